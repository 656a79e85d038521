"""The history store's read queries (scheduler/history/queries.py) on SQLite and PostgreSQL, and
their pure parts (scheduler/history/answers.py): tenancy, paging, versions, next fire times.

The expected answers are computed here from the records the test wrote (the oracle), not by the
code under test.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar
from zoneinfo import ZoneInfo

import pytest
from history_backends import HistoryBackend
from history_records import SPEC, T0_MS, Rec, dispatch, event, history, oid, report, schedule, story
from hypothesis import given
from hypothesis import strategies as st
from test_history_store import backend, batch_of

from scheduler.history import HistoryStore
from scheduler.history import answers as A
from scheduler.history.mapping import Batch, Source
from scheduler.history.views import OccurrenceView, Page
from scheduler.records import Schedule, ScheduleHistoryEntry, encode

__all__ = ["backend"]  # the SQLite / PostgreSQL fixture of test_history_store.py
SF = T0_MS
OTHER = replace(SPEC, handler="other")
T = TypeVar("T")


@pytest.fixture
def store(backend: HistoryBackend) -> Iterator[HistoryStore]:
    with backend.store() as s:
        s.apply("g", batch_of(_records()), {("ns.dispatch.acme", 0): 5})
        yield s


def _records() -> list[Rec]:
    return [
        *story("acme", "s1", 25),
        history("acme", "s1", 2, "PAUSE", "PAUSED", SF + 10_000, spec=None),
        history("acme", "s1", 3, "RESUME", "ACTIVE", SF + 20_000, spec=None),
        schedule("acme", "s1", 3, "ACTIVE", SF + 20_000),
        history("acme", "s2", 1, "CREATE", "ACTIVE", SF - 60_000, spec=OTHER),
        dispatch("acme", "s2", SF), event("acme", "s2", SF, "RETRY_WAIT", attempt=1),
        report("acme", "s2", SF, "STARTED", attempt=1, token="a"),
        report("acme", "s2", SF, "FAILED", attempt=1, token="a", retryable=True, error="E", at=SF + 70),
        dispatch("acme", "s2", SF, attempt=2, ts=SF + 500),
        report("acme", "s2", SF, "STARTED", attempt=2, token="b", at=SF + 510),
        report("acme", "s2", SF, "FAILED", attempt=2, token="b", retryable=False, error="E", at=SF + 700),
        event("acme", "s2", SF, "DEAD", attempt=2, reason="permanent"),
        history("acme", "s3", 1, "CREATE", "ACTIVE", SF, spec=None),  # its spec is not indexed yet
        *story("bravo", "b1", 3),
        history("bravo", "b1", 2, "CANCEL", "CANCELED", SF + 5_000, spec=None),
    ]


def _all_pages(fetch: Callable[..., Page[T]], limit: int) -> list[T]:
    """Every item of a listing, page by page (each at most ``limit``)."""
    items: list[T] = []
    cursor = None
    while True:
        page = fetch(cursor=cursor, limit=limit)
        assert len(page.items) <= limit
        items += page.items
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


def test_a_schedule_is_its_latest_version_with_the_spec_in_force(store: HistoryStore) -> None:
    s1 = store.schedule("acme", "s1")
    assert s1 is not None
    assert (s1.version, s1.state, s1.spec, s1.idempotency_key, s1.created_at_ms) == (
        3, "ACTIVE", SPEC, "k", T0_MS - 1000)
    assert (s1.effective_from_ms, s1.last_request_id) == (SF + 20_000, "r-3")
    b1 = store.schedule("bravo", "b1")
    assert b1 is not None and (b1.version, b1.state, b1.spec) == (2, "CANCELED", SPEC)
    assert store.schedule("acme", "s3") is None  # no spec indexed: not answered half-built
    assert store.schedule("acme", "nope") is None


def _change(sid: str, rid: str, command: str, state: str, applied_ms: int, ts: int) -> Rec:
    """A history entry of a PAUSE / RESUME (same version 1, no spec), recorded at Kafka time ``ts``."""
    value = encode(ScheduleHistoryEntry(
        schedule_id=sid, tenant="acme", version=1, command=command, request_id=rid, spec=None,  # type: ignore[arg-type]
        state=state, applied_at_ms=applied_ms, effective_from_ms=applied_ms,  # type: ignore[arg-type]
    ))
    return Rec(Source.HISTORY, None, value, ts, sid)


@pytest.mark.parametrize("order", [1, -1])
def test_pause_and_resume_keep_the_version_and_the_latest_change_wins(
    store: HistoryStore, order: int
) -> None:
    # The processor's clock has whole seconds: both changes share applied_at; Kafka's time orders them.
    recs = [history("acme", "p1", 1, "CREATE", "ACTIVE", SF),
            _change("p1", "pause", "PAUSE", "PAUSED", SF + 1000, SF + 1003),
            _change("p1", "resume", "RESUME", "ACTIVE", SF + 1000, SF + 1041),
            _change("p2", "pause-2", "PAUSE", "PAUSED", SF + 2000, SF + 2000),
            history("acme", "p2", 1, "CREATE", "ACTIVE", SF)]
    for r in recs[::order]:
        store.apply("g", batch_of([r, r]), {})  # and each twice
    p1, p2 = store.schedule("acme", "p1"), store.schedule("acme", "p2")
    assert p1 is not None and (p1.version, p1.state, p1.paused_at_ms, p1.resumed_at_ms) == (
        1, "ACTIVE", SF + 1000, SF + 1000)
    assert p1.last_request_id == "resume" and p1.updated_at_ms == SF + 1000
    assert p2 is not None and (p2.state, p2.paused_at_ms, p2.resumed_at_ms) == ("PAUSED", SF + 2000, None)
    assert [(c.command, c.state, c.request_id) for c in store.changes("acme", "p1")] == [
        ("CREATE", "ACTIVE", "r-1"), ("PAUSE", "PAUSED", "pause"), ("RESUME", "ACTIVE", "resume")]
    assert [v.state for v in store.versions("acme", "p1")] == ["ACTIVE"]
    assert [s.schedule_id for s in store.schedules("acme", state="PAUSED").items] == ["p2"]
    assert store.has_change("acme", "p1", "resume") and not store.has_change("bravo", "p1", "resume")
    assert not store.has_change("acme", "p1", "never")


def test_a_tenant_never_sees_another_tenants_ids(store: HistoryStore) -> None:
    acme_oid = oid("s1", 1, SF)
    assert store.occurrence("acme", acme_oid) is not None
    assert store.schedule("bravo", "s1") is None and store.versions("bravo", "s1") == ()
    assert store.occurrence("bravo", acme_oid) is None
    assert store.last_occurrences("bravo", "s1", 10) == ()
    assert store.occurrences("bravo", schedule_id="s1", from_ms=0, to_ms=2 * SF).items == ()
    assert {s.schedule_id for s in _all_pages(lambda **k: store.schedules("bravo", **k), 10)} == {"b1"}


def test_versions_carry_the_spec_and_their_effective_interval(store: HistoryStore) -> None:
    got = [(v.version, v.command, v.state, v.effective_from_ms, v.effective_until_ms, v.spec)
           for v in store.versions("acme", "s1")]
    assert got == [
        (1, "CREATE", "ACTIVE", SF - 60_000, SF + 10_000, SPEC),
        (2, "PAUSE", "PAUSED", SF + 10_000, SF + 20_000, SPEC),
        (3, "RESUME", "ACTIVE", SF + 20_000, None, SPEC),
    ]


@pytest.mark.parametrize("limit", [1, 7, 25, 1000])
def test_occurrence_pages_list_the_window_exactly_once_in_order(store: HistoryStore, limit: int) -> None:
    lo, hi = SF + 3 * 60_000, SF + 20 * 60_000  # [lo, hi): the 4th to the 20th
    expected = sorted((SF + i * 60_000, oid("s1", 1, SF + i * 60_000)) for i in range(3, 20))
    got = _all_pages(
        lambda **k: store.occurrences("acme", schedule_id="s1", from_ms=lo, to_ms=hi, **k), limit)
    assert [(o.scheduled_for_ms, o.occurrence_id) for o in got] == expected
    assert all(o.state == "SUCCEEDED" and o.lag_ms == 10 for o in got)  # enqueued: LogAppendTime


def test_occurrences_filter_by_state_and_span_schedules(store: HistoryStore) -> None:
    dead = store.occurrences("acme", from_ms=0, to_ms=2 * SF, state="DEAD")
    assert [(o.schedule_id, o.attempt_count, o.reason) for o in dead.items] == [("s2", 2, "permanent")]
    whole = _all_pages(lambda **k: store.occurrences("acme", from_ms=SF, to_ms=SF + 1, **k), 1)
    assert sorted(o.schedule_id for o in whole) == ["s1", "s2"]
    with pytest.raises(ValueError, match="ends before it starts"):
        store.occurrences("acme", from_ms=2, to_ms=1)


def test_an_occurrence_comes_with_its_whole_attempt_history(store: HistoryStore) -> None:
    detail = store.occurrence("acme", oid("s2", 1, SF))
    assert detail is not None
    o = detail.occurrence
    assert (o.state, o.attempt_count, o.available_at_ms, o.enqueued_at_ms, o.lag_ms) == ("DEAD", 2, SF + 5,
                                                                                         SF + 10, 10)
    got = [(a.attempt_no, a.token, a.worker_id, a.started_at_ms, a.finished_at_ms, a.result, a.retryable,
            a.error_class) for a in detail.attempts]
    assert got == [(1, "a", "w1", SF + 50, SF + 70, "FAILED", True, "E"),
                   (2, "b", "w1", SF + 510, SF + 700, "FAILED", False, "E")]


def test_last_occurrences_are_the_newest_first(store: HistoryStore) -> None:
    last = store.last_occurrences("acme", "s1", 3)
    assert [o.scheduled_for_ms for o in last] == [SF + i * 60_000 for i in (24, 23, 22)]


def test_schedules_filter_by_state_and_handler_and_page(store: HistoryStore) -> None:
    every = _all_pages(lambda **k: store.schedules("acme", **k), 1)
    assert [s.schedule_id for s in every] == ["s1", "s2"]
    assert [s.schedule_id for s in store.schedules("acme", handler="other").items] == ["s2"]
    assert [s.schedule_id for s in store.schedules("acme", handler="h", state="ACTIVE").items] == ["s1"]
    assert store.schedules("acme", state="PAUSED").items == ()
    assert [s.schedule_id for s in store.schedules("bravo", state="CANCELED").items] == ["b1"]


def test_bad_cursors_and_limits_are_refused_by_name(store: HistoryStore) -> None:
    page = store.schedules("acme", limit=1)
    with pytest.raises(ValueError, match="not a cursor of the occurrences listing"):
        store.occurrences("acme", from_ms=0, to_ms=1, cursor=page.next_cursor)
    with pytest.raises(ValueError, match="not a cursor"):
        store.schedules("acme", cursor="garbage!")
    with pytest.raises(ValueError, match="limit 0 is out of range"):
        store.schedules("acme", limit=0)


def test_indexed_names_the_namespaces_an_indexer_fed(store: HistoryStore) -> None:
    assert store.indexed("ns")
    assert not store.indexed("n") and not store.indexed("other")


# -- pure parts ------------------------------------------------------------------------------------


@given(st.sampled_from(["schedules", "occurrences"]), st.integers(-(2**62), 2**62), st.text())
def test_a_cursor_decodes_to_what_it_encodes(listing: str, at_ms: int, item: str) -> None:
    assert A.decode_cursor(A.encode_cursor(listing, at_ms, item), listing) == (at_ms, item)


@given(st.lists(st.integers(), max_size=30), st.integers(1, 10))
def test_a_page_is_the_first_items_and_a_cursor_only_when_more(items: list[int], limit: int) -> None:
    p = A.page(items[: limit + 1], limit, str)
    assert list(p.items) == items[:limit]
    assert p.next_cursor == (str(items[limit - 1]) if len(items) > limit else None)


def _schedule(cron: str, zone: str, state: str = "ACTIVE", effective_from_ms: int = 0) -> Schedule:
    return Schedule(tenant="t", schedule_id="sid", version=1, state=state,  # type: ignore[arg-type]
                    spec=replace(SPEC, cron=cron, timezone=zone), created_at_ms=0, updated_at_ms=0,
                    effective_from_ms=effective_from_ms)


def test_next_fires_follow_the_zone_across_a_dst_change() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    after = dt.datetime(2027, 3, 26, 12, tzinfo=dt.UTC)
    got = A.next_fires(_schedule("0 9 * * *", "Europe/Berlin"), int(after.timestamp() * 1000), 4)
    expected = [int(dt.datetime(2027, 3, d, 9, tzinfo=berlin).timestamp() * 1000) for d in (27, 28, 29, 30)]
    assert [f.scheduled_for_ms for f in got] == expected  # 08:00Z, then 07:00Z after the change
    assert all(f.available_at_ms == f.scheduled_for_ms for f in got)  # strict


def test_next_fires_start_at_the_version_and_only_when_active() -> None:
    start = int(dt.datetime(2030, 1, 1, 0, 30, tzinfo=dt.UTC).timestamp() * 1000)
    got = A.next_fires(_schedule("0 * * * *", "UTC", effective_from_ms=start), 0, 2)
    assert [f.scheduled_for_ms for f in got] == [start + 30 * 60_000, start + 90 * 60_000]
    for state in ("PAUSED", "CANCELED", "COMPLETED"):
        assert A.next_fires(_schedule("0 * * * *", "UTC", state=state), 0, 5) == ()


def test_a_view_has_no_lag_until_it_was_enqueued() -> None:
    o = OccurrenceView(occurrence_id="o", schedule_id="s", version=1, scheduled_for_ms=10,
                       available_at_ms=None, enqueued_at_ms=None, state="MISSED", state_at_ms=11,
                       attempt_count=0, reason="late")
    assert o.lag_ms is None and replace(o, enqueued_at_ms=15).lag_ms == 5


def test_the_queries_benchmark_fills_a_store_and_times_every_query(backend: HistoryBackend) -> None:
    from scheduler.bench.queries import fill, measure

    with backend.store() as s:
        assert fill(s, schedules=4, per_schedule=30) == 240
        assert s.count("occurrences") == 240 and len(s.schedules("acme").items) == 4
        result = measure(s, schedules=4, per_schedule=30, runs=3)
    assert len(result) == 6 and all(0 <= r["median_ms"] <= r["p95_ms"] for r in result.values())


def test_a_reader_waits_for_its_own_change_and_names_a_lagging_indexer(tmp_path: Path) -> None:
    from scheduler.client import HistoryLagging, HistoryNotIndexed, HistoryReader, ScheduleNotFound
    from scheduler.settings import Settings

    dsn = f"sqlite://{tmp_path / 'h.db'}"
    reader = HistoryReader(Settings(history_dsn=dsn, namespace="ns"), wait_s=0.3)
    with pytest.raises(HistoryNotIndexed, match=r"no such file.*history_dsn"):
        reader.schedule("acme", "p1")
    with HistoryBackend("sqlite", dsn).store() as writer:
        writer.apply("g", batch_of([history("acme", "p1", 1, "CREATE", "ACTIVE", SF)]), {})
        with pytest.raises(HistoryNotIndexed, match="has indexed nothing of namespace 'ns'"):
            reader.schedule("acme", "p1")  # rows, but no offsets of a topic of this namespace
        assert reader.open() is not None  # yet it answers: what the API's /readyz asks
        writer.apply("g", Batch(), {("ns.schedule-history", 0): 1})
        assert (s := reader.schedule("acme", "p1")) is not None and s.state == "ACTIVE"
        reader.noted("acme", "p1", 1, "pause")  # this process's PAUSE was accepted, not yet indexed
        with pytest.raises(HistoryLagging, match="has not indexed request pause"):
            reader.schedule("acme", "p1")  # not the ACTIVE of before its own pause
        writer.apply("g", batch_of([_change("p1", "pause", "PAUSE", "PAUSED", SF + 1000, SF + 1000)]), {})
        assert (s := reader.schedule("acme", "p1")) is not None and s.state == "PAUSED"
        assert ("acme", "p1") not in reader._written  # shown now: forgotten (bounded memory)
        reader.noted("acme", "p2", 1, None)  # a replayed create elsewhere: its version is enough
        with pytest.raises(HistoryLagging):
            reader.schedule("acme", "p2")
        with pytest.raises(ScheduleNotFound, match="schedule_id 'p3' not found for tenant 'acme'"):
            reader.describe("acme", "p3")
    reader.close()


def test_a_reader_remembers_a_bounded_number_of_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.client import HistoryReader, queries
    from scheduler.settings import Settings

    monkeypatch.setattr(queries, "WRITTEN_LIMIT", 3)
    reader = HistoryReader(Settings(history_dsn="sqlite:///nowhere.db", namespace="ns"))
    for i in range(5):
        reader.noted("acme", f"s{i}", 1, f"r{i}")
    reader.noted("acme", "s2", 2, "r5")  # a newer write of s2: now the newest
    assert list(reader._written) == [("acme", "s3"), ("acme", "s4"), ("acme", "s2")]
