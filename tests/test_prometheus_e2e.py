"""Real processes, real expositions, a real Prometheus.

A processor, a worker, a history indexer and a reconciler run as ``ksched`` subprocesses with
``--metrics-port 0`` and register in a file_sd folder; each exposition passes ``promtool check
metrics`` and declares exactly deploy/prometheus/metrics.txt (the dashboard's list); a Prometheus
scraping that folder sees them all up. The slow test stops the worker while the tenant's schedules
keep firing and reads the firing alert from Prometheus' HTTP API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_contract_e2e import create_many, free_port
from test_grafana_dashboard import METRICS_LIST, committed_names, exposition_names
from test_prometheus_rules import promtool

from scheduler.domain import ScheduleSpec
from scheduler.prometheus_server import LocalPrometheus, scaled_rules
from scheduler.settings import Settings
from scheduler.status.scrape import windowed_lag_p99
from scheduler.subprocesses import stop_all
from scheduler.tenants import Tenant, add_tenant

pytestmark = pytest.mark.kafka
TENANT = "prom"


@dataclass
class Stack:
    settings: Settings
    targets: Path
    folder: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def start(self, name: str, *args: str) -> None:
        env = {**os.environ, "KSCHED_TICK_INTERVAL_MS": "50",
               "KSCHED_PROMETHEUS_SD_DIR": str(self.targets), "KSCHED_DEMO_DB": str(self.folder / "fx.db")}
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        quiet = [] if args[0] == "reconcile" else ["--log-level", "WARNING"]  # it logs nothing routine
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "scheduler", *args, "--metrics-port", "0", *quiet],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )

    def endpoint(self, name: str, timeout_s: float = 60) -> str:
        """The /metrics URL process ``name`` registered in the targets folder."""
        job = {"processor": "ksched-processor", "worker": "ksched-worker", "history": "ksched-history",
               "reconcile": "ksched-reconcile"}[name]
        path = self.targets / f"{job}-{self.procs[name].pid}.json"
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            assert self.procs[name].poll() is None, (self.folder / f"{name}.log").read_text()
            assert time.monotonic() < deadline, f"{name} did not register {path}"
            time.sleep(0.2)
        [group] = json.loads(path.read_text())
        assert group["labels"] == {"job": job}
        return f"http://{group['targets'][0]}/metrics"

    def stop(self, name: str) -> None:
        stop_all([self.procs.pop(name)], 20)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def fire_every_second(settings: Settings, n: int, lead_s: int = 5) -> None:
    """``n`` one-time schedules, one per second from ``lead_s`` seconds on (handler report)."""
    t0 = int(time.time()) + lead_s
    def at(i: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + i))

    specs = [(f"once-{t0}-{i}", ScheduleSpec(kind="once", at=at(i), timezone="UTC", handler="report"))
             for i in range(n)]
    create_many(settings, TENANT, specs)


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT))  # no max_running: a stopped worker
    # would then stop the emission too (its occurrences stay in flight), and no rule could tell
    apply_all()
    folder = tmp_path_factory.mktemp("prom")
    s = Stack(kafka_settings, folder / "targets", folder, {})
    s.start("processor", "processor")
    s.start("worker", "worker", "--tenant", TENANT, "--handlers", "scheduler.demo.handlers", "--grace-s", "1")
    s.start("history", "history", "--dsn", f"sqlite:///{folder / 'history.db'}")
    s.start("reconcile", "reconcile", "--tenant", TENANT, "--from", "now", "--watch")
    try:
        yield s
    finally:
        stop_all(s.procs.values(), 20)
    assert not list(s.targets.glob("*.json")), "a process that stopped cleanly left its target file"


def test_every_process_exposition_passes_promtool_and_carries_its_metrics(stack: Stack) -> None:
    fire_every_second(stack.settings, 3, lead_s=3)
    wanted = {
        "processor": ["ksched_schedule_lag_seconds_bucket", "ksched_shard_owned", "ksched_shards",
                      "ksched_watermark_timestamp_seconds", "ksched_upcoming_occurrences",
                      "ksched_clock_offset_seconds", "ksched_clock_offset_uncertainty_seconds",
                      'ksched_attempt_reports_total{kind="STARTED",tenant="prom"}',
                      'ksched_tenant_quota{quota="trigger_rate_per_s",tenant="prom"} '
                      f"{float(Tenant(name=TENANT).trigger_rate_per_s)}"],
        "worker": ['ksched_worker_handled_total{outcome="succeeded",tenant="prom"}',
                   "ksched_worker_start_lag_seconds_bucket"],
        "history": ["ksched_history_records_total", "ksched_history_last_commit_timestamp_seconds"],
    }
    urls = {name: stack.endpoint(name) for name in wanted}
    deadline = time.monotonic() + 90
    while True:  # until the three occurrences went through every process
        texts = {name: scrape(url) for name, url in urls.items()}
        missing = {n: [m for m in ms if m not in texts[n]] for n, ms in wanted.items()}
        if not any(missing.values()):
            break
        assert time.monotonic() < deadline, missing
        time.sleep(1)
    for name, text in texts.items():
        out = promtool("check", "metrics", stdin=text)
        assert out.strip() == "", f"{name}: promtool check metrics:\n{out}"
    offset = [ln for ln in texts["processor"].splitlines() if ln.startswith("ksched_clock_offset_seconds ")]
    assert abs(float(offset[0].split()[1])) < 1  # the broker runs on this host's clock
    owned = [ln for ln in texts["processor"].splitlines() if ln.startswith("ksched_shard_owned{")]
    assert len(owned) == stack.settings.partitions  # one processor: every shard


def test_the_committed_metric_list_is_what_the_processes_export(stack: Stack) -> None:
    """deploy/prometheus/metrics.txt (the dashboard test's list) is exactly the union of the real
    expositions: a renamed metric fails here, and a new one must be added there."""
    real: set[str] = set()
    for name in ("processor", "worker", "history", "reconcile"):
        real |= exposition_names(scrape(stack.endpoint(name)))
    listed = committed_names()
    assert listed == real, (f"{METRICS_LIST}: missing {sorted(real - listed)}, "
                            f"not exported {sorted(listed - real)}")


def test_a_prometheus_on_the_targets_folder_scrapes_every_process(stack: Stack, tmp_path: Path) -> None:
    for name in ("processor", "worker", "history", "reconcile"):
        stack.endpoint(name)
    with LocalPrometheus(tmp_path, free_port(), stack.targets, scrape_interval_s=1,
                         evaluation_interval_s=1) as prom:
        deadline = time.monotonic() + 60
        while True:
            active = prom.api("targets")["activeTargets"]
            up = {t["labels"]["job"] for t in active if t["health"] == "up"}
            if up == {"ksched-processor", "ksched-worker", "ksched-history", "ksched-reconcile"}:
                break
            assert time.monotonic() < deadline, active
            time.sleep(1)
        rules = [r["name"] for g in prom.api("rules")["groups"] for r in g["rules"]]
        assert "KschedStrictLagHigh" in rules and "KschedWorkersNotStarting" in rules
        # ksched status's windowed lag query is valid PromQL on this Prometheus (its answer: a dict)
        assert windowed_lag_p99(prom.url, stack.settings.namespace) is not None
        assert windowed_lag_p99("http://127.0.0.1:1", stack.settings.namespace) is None  # nobody there


@pytest.mark.slow
def test_stopping_the_worker_fires_the_alert_while_the_schedules_keep_firing(
    stack: Stack, tmp_path: Path
) -> None:
    """The shipped rules, every duration divided by 12 (for: 2m -> 10 s, rate [1m] -> 5 s), scraped
    and evaluated every second: the same expressions in a test that cannot wait minutes."""
    rules = tmp_path / "rules.yml"
    rules.write_text(scaled_rules(1 / 12))
    fire_every_second(stack.settings, 120, lead_s=3)
    with LocalPrometheus(tmp_path, free_port(), stack.targets, rules_file=rules, scrape_interval_s=1,
                         evaluation_interval_s=1) as prom:

        def alerts() -> list[dict[str, object]]:
            found = prom.api("alerts")["alerts"]
            return [a for a in found if a["labels"]["alertname"] == "KschedWorkersNotStarting"]

        time.sleep(20)  # the worker runs: occurrences are started as they are emitted
        assert alerts() == []
        stack.stop("worker")
        deadline = time.monotonic() + 60
        while not [a for a in alerts() if a["state"] == "firing"]:
            assert time.monotonic() < deadline, (alerts(), [
                prom.api("query", query=q)["result"] for q in (
                    "sum by (tenant) (rate(ksched_emitted_total[5s]))",
                    'sum by (tenant) (rate(ksched_attempt_reports_total{kind="STARTED"}[5s]))',
                    "ksched_missed_total", "ksched_emitted_total", "up")])
            time.sleep(1)
        [alert] = alerts()
        assert alert["labels"]["tenant"] == TENANT and alert["labels"]["severity"] == "page"
