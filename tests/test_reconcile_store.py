"""``--source store``: the history store's rows of a window, on SQLite and PostgreSQL, read into the
reconciler's ledger exactly as the topics' records are (the same verdict from both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from history_backends import HistoryBackend
from history_records import T0_MS, Rec, dispatch, event, report
from test_history_store import batch_of

from scheduler.history import HistoryStore
from scheduler.reconcile.account import DUPLICATE, Ledger, settle
from scheduler.reconcile.lean import dispatch_head, event_heads
from scheduler.reconcile.store_source import read_store
from scheduler.records import report_fields

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
T = "acme"


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryStore]:
    if request.param == "sqlite":
        backend = HistoryBackend("sqlite", f"sqlite:///{tmp_path / 'history.db'}")
    else:
        backend = HistoryBackend("postgres", request.getfixturevalue("pg_dsn"))
    with backend.store() as s:
        s.reset()
        yield s


def records() -> list[Rec]:
    """a: succeeded; b: retried then dead; c: enqueued only; d: succeeded in two attempts; e: outside."""
    return [
        dispatch(T, "a", T0_MS), report(T, "a", T0_MS, "STARTED"), report(T, "a", T0_MS, "SUCCEEDED"),
        event(T, "a", T0_MS, "SUCCEEDED"),
        dispatch(T, "b", T0_MS), event(T, "b", T0_MS, "RETRY_WAIT"), dispatch(T, "b", T0_MS, attempt=2),
        event(T, "b", T0_MS, "DEAD", attempt=2),
        dispatch(T, "c", T0_MS + 60_000),
        report(T, "d", T0_MS, "SUCCEEDED", attempt=1, token="x"),
        report(T, "d", T0_MS, "SUCCEEDED", attempt=2, token="y"),
        event(T, "e", T0_MS + 3_600_000, "SUCCEEDED"),
        dispatch("other", "f", T0_MS),
    ]


def from_topics(recs: list[Rec], ledger: Ledger) -> None:
    """What ``--source topics`` does with the same records (sources.read_records' mapping)."""
    for r in recs:
        assert r.value is not None
        if r.tenant != T:
            continue
        if r.source.value == "dispatch":
            oid, sid, _t, ver, sf, att = dispatch_head(r.value)
            ledger.dispatch(oid, sid, ver, sf // 1000, att)
        elif r.source.value == "occurrence-events":
            for oid, sid, _t, ver, sf, state, att in event_heads(r.value):
                ledger.event(oid, sid, ver, sf // 1000, state, att)
        else:
            for d in report_fields(r.value) or ():
                oid, sf = d["occurrence_id"], d["scheduled_for_ms"] // 1000
                ledger.report(oid, d["schedule_id"], d["version"], sf, d["attempt"], str(d["kind"]))


def test_reconcile_store_rows_give_the_verdict_of_the_records(store: HistoryStore) -> None:
    recs = records()
    store.apply("g", batch_of(recs), {})
    t1, t2 = T0_MS // 1000, T0_MS // 1000 + 600
    rows = Ledger(t1, t2)
    assert read_store(store, T, rows) == 4  # a, b, c, d: e is outside the window, f another tenant's
    topics = Ledger(t1, t2)
    from_topics(recs, topics)
    states = {s.schedule_id: (s.state, s.attempts) for s in rows.seen.values()}
    assert states == {s.schedule_id: (s.state, s.attempts) for s in topics.seen.values()}
    assert states == {"a": ("SUCCEEDED", 1), "b": ("DEAD", 2), "c": ("ENQUEUED", 1), "d": ("RUNNING", 2)}
    by_store, by_topics = settle((), rows), settle((), topics)  # nothing expected: all UNEXPECTED
    assert by_store.states == by_topics.states == {"UNEXPECTED": 4}
    found = {(f.kind, f.schedule_id) for f in by_store.findings}
    assert found == {(f.kind, f.schedule_id) for f in by_topics.findings}
    assert {sid for kind, sid in found if kind == DUPLICATE} == {"d"}
