# ksched — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
KSCHED := $(BIN)/ksched
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install postgres-server java-tools prometheus-tools chromium java-example test test-slow test-all run lint kafka-up kafka-down kafka-status schemas-check bench openapi clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found: install Python 3.11+ or run make PYTHON=python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## create .venv with ksched (editable) and the dev tools; compile the hot modules
	@$(BIN)/python -m scheduler.native build  # mypyc, the modules listed in scheduler/native.py; quick when current

# The idempotency tests start a private PostgreSQL cluster from the server binaries (tests/pg_fixture.py).
PG_CTL_GLOB ?= /usr/lib/postgresql/*/bin/pg_ctl
PG_APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql

postgres-server: ## install Debian's PostgreSQL server when pg_ctl is missing (the tests run a private cluster)
	@if [ -n "$$KSCHED_TEST_POSTGRES_DSN$$KSCHED_TEST_PG_BINDIR" ] || ls $(PG_CTL_GLOB) >/dev/null 2>&1 \
	    || command -v pg_ctl >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: PostgreSQL server (pg_ctl) not found: run 'sudo apt-get install postgresql' or set KSCHED_TEST_PG_BINDIR"; \
	  exit 1; \
	fi; \
	echo "make: PostgreSQL server (pg_ctl) not found: installing Debian's postgresql package"; \
	$(PG_APT_INSTALL) || { apt-get update -q && $(PG_APT_INSTALL); }; \
	ls $(PG_CTL_GLOB) >/dev/null 2>&1 || { echo "make: postgresql installed but no $(PG_CTL_GLOB)"; exit 1; }

# The Java example (examples/java) and the broker need a JDK 17+ and Maven: Debian's packages when missing.
JAVA_APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openjdk-17-jdk-headless maven

java-tools: ## install a JDK 17 and Maven (Debian's packages) when javac or mvn is missing
	@if command -v javac >/dev/null && command -v mvn >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: javac or mvn not found: run 'sudo apt-get install openjdk-17-jdk-headless maven'"; exit 1; \
	fi; \
	echo "make: javac or mvn not found: installing Debian's openjdk-17-jdk-headless and maven"; \
	$(JAVA_APT_INSTALL) || { apt-get update -q && $(JAVA_APT_INSTALL); }

# Prometheus and promtool (alert-rule tests, `promtool check metrics`, `make run`): Debian's
# prometheus package when missing. Only the binaries are used: the package's service must not start
# (it would bind 0.0.0.0:9090), so the install runs under a policy-rc.d that forbids starting
# services (kept if the machine has one, removed after otherwise) and the unit is disabled after.
PROM_APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus

prometheus-tools: ## install Debian's prometheus (server + promtool) when missing; its service is never started
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: prometheus or promtool not found: run 'sudo apt-get install prometheus' (then stop its service: ksched starts its own)"; exit 1; \
	fi; \
	echo "make: prometheus or promtool not found: installing Debian's prometheus package (service not started)"; \
	policy=/usr/sbin/policy-rc.d; own=; \
	if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy && chmod +x $$policy && own=1; fi; \
	$(PROM_APT_INSTALL) || { apt-get update -q && $(PROM_APT_INSTALL); }; rc=$$?; \
	[ -n "$$own" ] && rm -f $$policy; \
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then \
	  systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; \
	exit $$rc

# The console test (tests/test_console_e2e.py) drives the page in headless Chromium: Debian's
# chromium package when missing (no browser download: the network reaches Debian's packages only).
CHROMIUM_APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

chromium: ## install Debian's chromium (headless browser of the console test) when missing
	@if [ -n "$$KSCHED_TEST_CHROMIUM" ] || command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: chromium not found: run 'sudo apt-get install chromium' or set KSCHED_TEST_CHROMIUM"; exit 1; \
	fi; \
	echo "make: chromium not found: installing Debian's chromium package"; \
	$(CHROMIUM_APT_INSTALL) || { apt-get update -q && $(CHROMIUM_APT_INSTALL); }; \
	command -v chromium >/dev/null || { echo "make: chromium installed but not on PATH"; exit 1; }

java-example: install ## build examples/java with Maven (dependencies in ksched's Maven cache, kafka_cache_dir/m2)
	@command -v mvn >/dev/null || { echo "make: mvn not found: install Maven (apt-get install maven) or run make java-tools"; exit 1; }
	mvn -B -q -f examples/java/pom.xml -Dmaven.repo.local="$$($(BIN)/python -c 'from scheduler.settings import load_settings; print(load_settings().kafka_cache_dir)')/m2" package

test: install postgres-server prometheus-tools chromium ## run the test suite (starts its own Kafka broker on 127.0.0.1:19092)
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test-slow: install postgres-server prometheus-tools chromium ## run the slow suites (CI runs them too)
	$(BIN)/pytest -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: no slow tests collected

test-all: install postgres-server prometheus-tools chromium ## every test, fast and slow
	$(BIN)/pytest $(PYTEST_ARGS)

run: install prometheus-tools ## the demo: local Kafka, topics, two tenants, processor, workers, sample schedules, live view
	$(KSCHED) kafka start
	$(KSCHED) demo

lint: install ## ruff and mypy
	$(BIN)/ruff check scheduler tests
	$(BIN)/mypy

kafka-up: install ## start the local Kafka broker (idempotent)
	$(KSCHED) kafka start

kafka-down: install ## stop the local Kafka broker
	$(KSCHED) kafka stop

kafka-status: install ## show the local Kafka broker's status
	$(KSCHED) kafka status

schemas-check: install ## fail if records/_generated.py is stale or a schema change breaks an older reader
	$(BIN)/python -m scheduler.records.generate --check
	$(BIN)/python -m scheduler.records.compat

openapi: install ## regenerate docs/openapi.json from the API's code (a test fails when it is stale)
	$(KSCHED) api openapi

clean: ## remove the venv, caches and compiled modules (not the Kafka jar cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find scheduler \( -name '_*_native*.so' -o -name '_*_native.sha256' \) -delete
