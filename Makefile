# ksched — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
KSCHED := $(BIN)/ksched
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install test test-slow test-all run lint kafka-up kafka-down kafka-status schemas-check bench clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found: install Python 3.11+ or run make PYTHON=python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## create .venv with ksched (editable) and the dev tools

test: install ## run the test suite (starts its own Kafka broker on 127.0.0.1:19092)
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test-slow: install ## run the slow suites (CI runs them too)
	$(BIN)/pytest -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: no slow tests collected

test-all: install ## every test, fast and slow
	$(BIN)/pytest $(PYTEST_ARGS)

run: install ## start local Kafka, apply topics, register the demo tenant, show status
	$(KSCHED) kafka start
	$(KSCHED) tenants add demo
	$(KSCHED) kafka status

lint: install ## ruff and mypy
	$(BIN)/ruff check scheduler tests
	$(BIN)/mypy

kafka-up: install ## start the local Kafka broker (idempotent)
	$(KSCHED) kafka start

kafka-down: install ## stop the local Kafka broker
	$(KSCHED) kafka stop

kafka-status: install ## show the local Kafka broker's status
	$(KSCHED) kafka status

schemas-check: install ## fail if a schema change would break a reader of the previous version
	$(BIN)/python -m scheduler.records.compat

clean: ## remove the venv and caches (not the Kafka jar cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
