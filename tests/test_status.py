"""``ksched status`` (issue 16, item 1): the verdict on constructed views (pure), then the real
broker: no processor -> every shard unowned, exit 1; a processor owning them all -> exit 0 with its
shards, watermarks and the registered tenant; two processor processes, two tenants and a worker,
then one processor killed with SIGKILL: its shards move to the other and the view says so."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from namespaces import drop_namespace
from test_attempts_e2e import Running
from test_processor_failover import InProcess, OffsetClock, with_topics

from scheduler.access_admin import ensure_services
from scheduler.cli import main
from scheduler.settings import Settings
from scheduler.status.model import WATERMARK_LAG_LIMIT_S, ShardView, StatusView, TenantView, problems, to_json
from scheduler.subprocesses import stop_all
from scheduler.tenant_admin import current, put
from scheduler.tenants import Tenant
from scheduler.worker import Context, Worker

NOW = 1_900_000_000_000


def _view(*shards: ShardView) -> StatusView:
    return StatusView(bootstrap="b", namespace="ns", brokers=("127.0.0.1:1 (node 1)",), processors=(),
                      shards=shards, taken_at_ms=NOW,
                      tenants=(TenantView(name="t", state="ACTIVE", dispatch_offsets=5, worker_lag=1,
                                          workers=1, dlq_offsets=0),))


def test_a_healthy_view_has_no_problem_and_its_lags_are_reported() -> None:
    v = _view(ShardView(shard=0, owner="p1", watermark_ms=NOW - 400, updated_at_ms=NOW - 300))
    assert problems(v) == []
    data = to_json(v)
    assert data["shards"][0]["watermark_lag_s"] == pytest.approx(0.4)
    assert data["shards"][0]["commit_age_s"] == pytest.approx(0.3) and data["problems"] == []


def test_a_tenant_over_the_lag_slo_in_the_last_five_minutes_is_named() -> None:
    view = _view(ShardView(shard=0, owner="p", watermark_ms=NOW, updated_at_ms=NOW))
    assert problems(view) == []
    late = replace(view, lag_p99_5m={"acme": 6.2, "calm": 0.4})
    [found] = problems(late)
    assert found.startswith("tenant acme: strict lag p99 over the last 5 minutes is 6.2 s (SLO 5 s)")


def test_an_unowned_or_late_shard_is_named_with_the_fix() -> None:
    late_ms = NOW - int((WATERMARK_LAG_LIMIT_S + 5) * 1000)
    v = _view(ShardView(shard=0, owner=None, watermark_ms=None, updated_at_ms=None),
              ShardView(shard=1, owner="p1", watermark_ms=late_ms, updated_at_ms=late_ms),
              ShardView(shard=2, owner="p1", watermark_ms=NOW, updated_at_ms=NOW))
    found = problems(v)
    assert len(found) == 2
    assert found[0].startswith("shard 0 has no owner") and "ksched processor" in found[0]
    assert found[1].startswith("shard 1 (owner p1) is 15.0 s behind the clock")


@pytest.fixture
def space(kafka_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    settings = kafka_settings.replace(namespace=f"{kafka_settings.namespace}-st{secrets.token_hex(2)}")
    ensure_services(settings)
    monkeypatch.setenv("KSCHED_NAMESPACE", settings.namespace)  # what the CLI reads
    yield settings
    drop_namespace(settings)


def _status(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["status", "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.kafka
def test_status_names_unowned_shards_then_the_processor_that_owns_them(
    space: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant = Tenant(name="st")
    tenants = with_topics(space, tenant)
    put(space, current(space), tenant)
    code, data = _status(capsys)
    assert code == 1
    assert [s["owner"] for s in data["shards"]] == [None] * space.partitions  # type: ignore[index]
    assert len(data["problems"]) == space.partitions  # type: ignore[arg-type]
    proc = InProcess(space, tenants, OffsetClock())
    try:
        proc.wait_owning(space.partitions)
        deadline = time.monotonic() + 30
        while True:  # each shard's first ShardState comes with its first committed tick
            code, data = _status(capsys)
            if all(s["watermark_lag_s"] is not None for s in data["shards"]):  # type: ignore[union-attr]
                break
            assert time.monotonic() < deadline, data["shards"]
            time.sleep(0.5)
        assert main(["status"]) == 0 and "every shard owned and on time" in capsys.readouterr().out
    finally:
        proc.stop()
    assert code == 0, data["problems"]
    [p] = data["processors"]  # type: ignore[misc]
    assert p["shards"] == list(range(space.partitions)) and p["client_id"]
    assert {s["owner"] for s in data["shards"]} == {p["client_id"]}  # type: ignore[union-attr]
    # The registry is the topic over the seed file: the session's seeded tenants are listed too.
    [t] = [t for t in data["tenants"] if t["name"] == "st"]  # type: ignore[attr-defined,index]
    assert t["state"] == "ACTIVE" and t["workers"] == 0


def _until(capsys: pytest.CaptureFixture[str], ok: Callable[[int, dict[str, Any]], bool], timeout_s: float,
           what: str) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        code, data = _status(capsys)
        if ok(code, data):
            return code, data
        assert time.monotonic() < deadline, f"{what} not seen in {timeout_s:g} s: {data}"
        time.sleep(0.5)


def _spread(code: int, data: dict[str, Any]) -> bool:
    procs = data["processors"]
    registered = data["figures"]["endpoints"]  # each processor's /metrics, found in the discovery folder
    return code == 0 and len(procs) == 2 and all(p["shards"] for p in procs) and registered == 2


@pytest.mark.kafka
def test_status_follows_two_processors_two_tenants_a_worker_and_a_processor_killed(
    space: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    tenants = with_topics(space, Tenant(name="sa"), Tenant(name="sb"))
    for t in tenants.values():
        put(space, current(space), t)
    env = {**os.environ, "KSCHED_NAMESPACE": space.namespace}
    cmd = [sys.executable, "-m", "scheduler", "processor", "--log-level", "WARNING", "--metrics-port", "0"]
    procs = [subprocess.Popen(cmd, env=env) for _ in range(2)]

    def noop(ctx: Context) -> None:
        return None

    worker = Worker(space, tenant="sa", handlers={"h": noop}, grace_s=1, heartbeat_s=0.5)
    running = Running(worker)
    try:
        assert worker.wait_ready(60)
        _, data = _until(capsys, _spread, 90, "two processors sharing every shard, on time")
        owned = sorted(s for p in data["processors"] for s in p["shards"])
        assert owned == list(range(space.partitions))
        views = {t["name"]: t for t in data["tenants"]}
        assert views["sa"]["workers"] == 1 and views["sb"]["workers"] == 0
        assert views["sa"]["state"] == views["sb"]["state"] == "ACTIVE"

        procs[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        # The group drops the dead member after its session timeout (6 s); the survivor then owns
        # every shard and ticks them: exit 0 again, with one processor.
        every = {str(s) for s in range(space.partitions)}
        # A taken shard's due backlog is on the survivor's /metrics from its first tick with a
        # state record (within a second of the take): the status may see the shard before it.
        _, data = _until(capsys, lambda c, d: c == 0 and len(d["processors"]) == 1
                         and set(d["figures"]["due_1h"]) == every, 60,
                         "every shard moved to the surviving processor, its due backlog reported")
        moved_s = time.monotonic() - killed
        [p] = data["processors"]
        assert p["shards"] == list(range(space.partitions))
        print(f"status: shards moved to the survivor {moved_s:.1f} s after the SIGKILL")
        assert data["figures"]["endpoints"] == 1  # the dead one's registration is swept
        assert moved_s < 30, f"{moved_s:.1f} s: far past the 6 s session timeout"
    finally:
        running.stop()
        stop_all(procs, 30)
