"""The reconciler against a real processor, real workers and the real broker.

One short window (fast suite): one-time occurrences that succeed, retry to DEAD, and are
canceled before their time, plus two emission faults in the processor — one occurrence
dropped from its transaction, one dispatched a second time outside any transaction. The
reconciler must name exactly those two occurrence ids (GAP, DUPLICATE), count the rest
exactly, exit 1 from the CLI, and say the same from the history store as from the topics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_attempts_e2e import Events, Running, once_in
from test_history_e2e import ok_flaky_worker

from scheduler.cli import main
from scheduler.client import SchedulerClient
from scheduler.domain import schedule_id_for
from scheduler.history import SQLiteHistoryStore
from scheduler.history.indexer import replay
from scheduler.processor.emission_faults import EmissionFaults
from scheduler.processor.runtime import Processor
from scheduler.reconcile.account import DUPLICATE, GAP, UNEXPECTED
from scheduler.reconcile.run import Outcome, WindowNotClosed, reconcile
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant

pytestmark = pytest.mark.kafka
TENANT = "recon"
DROP_KEY, DUP_KEY = "r-drop", "r-dup"


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[tuple[Settings, Processor]]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT, retry_budget_per_min=0))
    apply_all()
    settings = kafka_settings.replace(lease_s=3, tick_interval_ms=50)
    proc = Processor(settings)
    proc.checkpoints.fault = EmissionFaults({schedule_id_for(TENANT, DROP_KEY): "drop",
                                             schedule_id_for(TENANT, DUP_KEY): "duplicate"})
    running = Running(proc)
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create(TENANT, once_in(86_400), key="warm-up")
    yield settings, proc
    running.stop()


def closed(settings: Settings, t1: int, t2: int, **kw: object) -> Outcome:
    """Reconcile once the processors have closed the whole window (they tick every 50 ms)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            o = reconcile(settings, TENANT, t1, t2, **kw)  # type: ignore[arg-type]
            if not o.window.clamped:
                return o
        except WindowNotClosed:
            pass
        assert time.monotonic() < deadline, "the window did not close within 60 s"
        time.sleep(0.5)


def test_reconcile_names_the_dropped_and_the_doubled_occurrence(
    stack: tuple[Settings, Processor], tmp_path: Path
) -> None:
    settings, proc = stack
    events = Events(settings, TENANT)
    _, runner = ok_flaky_worker(settings, TENANT)
    t1 = int(time.time())
    try:
        with SchedulerClient(settings, timeout_s=60) as client:
            good = client.create(TENANT, replace(once_in(3), handler="ok"), key="r-good").schedule_id
            flaky_spec = once_in(3, retry_max_attempts=2, retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
            bad = client.create(TENANT, replace(flaky_spec, handler="flaky"), key="r-bad").schedule_id
            dropped = client.create(TENANT, replace(once_in(4), handler="ok"), key=DROP_KEY).schedule_id
            doubled = client.create(TENANT, replace(once_in(4), handler="ok"), key=DUP_KEY).schedule_id
            gone = client.create(TENANT, replace(once_in(30), handler="ok"), key="r-gone").schedule_id
            client.cancel(TENANT, gone)
        wanted = {(good, "SUCCEEDED"), (bad, "DEAD"), (doubled, "SUCCEEDED")}
        events.wait(lambda ev: {(e.schedule_id, e.state) for e in ev} >= wanted, 60)
    finally:
        runner.stop()
        events.close()
    t2 = int(time.time()) + 1
    gap_oid, dup_oid = proc.checkpoints.fault.fired[dropped], proc.checkpoints.fault.fired[doubled]  # type: ignore[union-attr]

    topics = closed(settings, t1, t2)
    v = topics.verdict
    assert (v.expected, v.states["SUCCEEDED"], v.states["DEAD"], v.states[GAP]) == (4, 2, 1, 1), v.states
    found = sorted((f.kind, f.occurrence_id) for f in v.findings)
    assert found == sorted([(GAP, gap_oid), (DUPLICATE, dup_oid)])
    assert v.count(UNEXPECTED) == 0

    out = tmp_path / "findings.json"
    cli = ["reconcile", "--tenant", TENANT, "--from", str(t1), "--to", str(t2), "--json", str(out)]
    assert main(cli) == 1
    doc = json.loads(out.read_text())
    assert (doc["gaps"], doc["duplicates"], doc["unexpected"]) == (1, 1, 0)
    assert {f["occurrence_id"] for f in doc["findings"]} == {gap_oid, dup_oid}

    # the history store says the same of every occurrence (a dispatch record committed twice is
    # invisible there: the store's rows merge by occurrence id)
    with SQLiteHistoryStore(tmp_path / "history.db") as store:
        replay(settings, store, from_beginning=True, group="reconcile-e2e")
        from_store = closed(settings, t1, t2, source="store", store=store).verdict
    assert from_store.states == v.states
    assert [(f.kind, f.occurrence_id) for f in from_store.findings] == [(GAP, gap_oid)]
