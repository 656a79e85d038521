"""The history of real occurrences: a real processor and worker run them, the indexer replays the
topics, and the store holds their states, attempts and schedule versions."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from test_attempts_e2e import Events, Running, once_in

from scheduler.client import SchedulerClient
from scheduler.history import SQLiteHistoryStore
from scheduler.history.indexer import replay
from scheduler.processor.runtime import Processor
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.worker import Context, RetryableError, Worker

pytestmark = pytest.mark.kafka
TENANT = "hist"


@contextmanager
def processor_stack(kafka_settings: Settings, tenants: Iterable[str]) -> Iterator[Settings]:
    """``tenants`` registered (no retry budget) with their topics, and a processor running on
    short leases and ticks until the block ends; yields its settings."""
    from scheduler.cli.topics_cmd import apply_all

    for name in tenants:
        add_tenant(kafka_settings.tenants_file, Tenant(name=name, retry_budget_per_min=0))
    apply_all()
    settings = kafka_settings.replace(lease_s=3, tick_interval_ms=50)
    proc = Running(Processor(settings))
    try:
        yield settings
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[Settings]:
    with processor_stack(kafka_settings, [TENANT]) as settings:
        yield settings


def ok_flaky_worker(settings: Settings, tenant: str) -> tuple[Worker, Running]:
    """A ready worker of ``tenant`` with handlers ``ok`` (succeeds) and ``flaky`` (a retryable failure)."""

    def ok(ctx: Context) -> None:
        pass

    def flaky(ctx: Context) -> None:
        raise RetryableError("down")

    w = Worker(settings, tenant=tenant, handlers={"ok": ok, "flaky": flaky}, grace_s=1, heartbeat_s=0.5)
    runner = Running(w)
    assert w.wait_ready(60)
    return w, runner


def test_occurrences_attempts_and_versions_land_in_the_store(stack: Settings, tmp_path: Path) -> None:
    events = Events(stack, TENANT)
    w, runner = ok_flaky_worker(stack, TENANT)
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            good = client.create(TENANT, replace(once_in(3), handler="ok"), key="h-good").schedule_id
            flaky_spec = once_in(3, retry_max_attempts=2, retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
            bad = client.create(TENANT, replace(flaky_spec, handler="flaky"), key="h-bad").schedule_id
        wanted = {(good, "SUCCEEDED"), (bad, "DEAD")}
        events.wait(lambda ev: {(e.schedule_id, e.state) for e in ev} >= wanted, 60)
    finally:
        runner.stop()
        events.close()
    time.sleep(0.5)  # the worker's last reports are acknowledged before it stops; let them settle
    with SQLiteHistoryStore(tmp_path / "history.db") as store:
        replay(stack, store, from_beginning=True, group="e2e")
        occ = {r[2]: r for r in store.rows("occurrences", "occurrence_id") if r[1] == TENANT}
        att = [r for r in store.rows("attempts", "attempt_no, token") if r[3] == TENANT]
        versions = {r[0]: r for r in store.rows("schedules", "schedule_id, version") if r[2] == TENANT}
    # occurrence_id, tenant, schedule_id, version, scheduled_for, available_at, enqueued_at, state, rank,
    # state_at, attempt_count, reason
    g, b = occ[good], occ[bad]
    assert (g[7], g[10], g[3]) == ("SUCCEEDED", 1, 1)
    assert g[5] == g[4] and g[6] is not None and g[6] >= g[4]  # strict: available = nominal; enqueued after
    assert (b[7], b[10]) == ("DEAD", 2) and "RetryableError" in (b[11] or "")
    # occurrence_id, attempt_no, token, tenant, schedule_id, worker_id, started, heartbeat, finished, result,
    # retryable, error_class, error_message
    good_attempts = [(a[1], a[9]) for a in att if a[4] == good]
    bad_attempts = [(a[1], a[9], bool(a[10]), a[11]) for a in att if a[4] == bad]
    assert good_attempts == [(1, "SUCCEEDED")]
    assert bad_attempts == [(n, "FAILED", True, "scheduler.worker.handlers.RetryableError") for n in (1, 2)]
    assert all(a[5] == w.worker_id and a[6] is not None and a[8] is not None for a in att)
    # schedule_id, version, tenant, state, effective_from, effective_until, command, request_id, applied_at,
    # spec_json, ...
    assert {sid: (v[1], v[6]) for sid, v in versions.items()} == {good: (1, "CREATE"), bad: (1, "CREATE")}
    assert '"handler": "ok"' in (versions[good][9] or "")
