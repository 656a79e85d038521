"""The HistoryStore contract, run against SQLite and PostgreSQL (tests/pg_fixture.py's server).

The SQL merge must equal the Python merge of :mod:`scheduler.history.rows`: the same records
applied in shuffled batches, some twice, end in the rows one merged batch gives.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from history_backends import HistoryBackend, normalised
from history_records import T0_MS, Rec, dead_letter, dispatch, event, history, oid, report, schedule, story

from scheduler.history import HistoryConflictError, HistoryStore, open_store
from scheduler.history.mapping import Batch, Source
from scheduler.history.rows import OccurrenceRow

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
T = "acme"
SF = T0_MS
G = "grp"


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> HistoryBackend:
    if request.param == "sqlite":
        return HistoryBackend("sqlite", f"sqlite://{tmp_path / 'history.db'}")
    return HistoryBackend("postgres", request.getfixturevalue("pg_dsn"))


@pytest.fixture
def store(backend: HistoryBackend) -> Iterator[HistoryStore]:
    with backend.store() as s:
        yield s


def batch_of(recs: list[Rec]) -> Batch:
    b = Batch()
    for r in recs:
        b.add(r.source, r.tenant, r.value, r.ts)
    return b


def records() -> list[Rec]:
    return [
        *story(T, "s1", 20),
        dispatch(T, "s2", SF), event(T, "s2", SF, "RETRY_WAIT", attempt=1),
        dispatch(T, "s2", SF, attempt=2, ts=SF + 500),
        report(T, "s2", SF, "STARTED", attempt=2, token="b"),
        report(T, "s2", SF, "STARTED", attempt=2, token="c"),
        report(T, "s2", SF, "HEARTBEAT", attempt=2, token="b", at=SF + 600),
        report(T, "s2", SF, "FAILED", attempt=2, token="b", retryable=False, error="E", at=SF + 700),
        event(T, "s2", SF, "DEAD", attempt=2, reason="permanent"),
        event(T, "s3", SF, "MISSED", attempt=None, reason="late"),
        history(T, "s1", 2, "PAUSE", "PAUSED", SF + 10_000, spec=None),
        history(T, "s1", 3, "RESUME", "ACTIVE", SF + 20_000, spec=None),
        schedule(T, "s1", 3, "ACTIVE", SF + 20_000),
    ]


def test_sql_merge_equals_the_python_merge_in_any_order_and_batching(backend: HistoryBackend) -> None:
    recs = records()
    with backend.store() as once:
        once.apply(G, batch_of(recs), {("t", 0): len(recs)})
        expected = normalised(once)
    assert len(expected["occurrences"]) == 22 and len(expected["attempts"]) == 22
    rng = random.Random(3)
    for round_no in range(3):
        with backend.store() as s:
            s.reset()
            shuffled = recs + rng.sample(recs, 15)
            rng.shuffle(shuffled)
            for i in range(0, len(shuffled), 7):
                s.apply(G, batch_of(shuffled[i:i + 7]), {("t", 0): i})
            assert normalised(s) == expected, f"round {round_no}"


def test_rows_and_offsets_commit_together_and_offsets_never_move_back(store: HistoryStore) -> None:
    store.apply(G, batch_of(story(T, "s1", 3)), {("d", 0): 10, ("d", 1): 4})
    store.apply(G, batch_of([]), {("d", 0): 7, ("e", 2): 1})  # a zombie's late, older commit
    assert store.offsets(G) == {("d", 0): 10, ("d", 1): 4, ("e", 2): 1}
    assert store.offsets("other") == {}
    counts = store.counts()
    assert (counts["occurrences"], counts["attempts"], counts["schedules"]) == (3, 3, 1)
    bad = batch_of(story(T, "s9", 2))
    sf = SF + 60_000
    clash = OccurrenceRow("0" * 32, T, "s9", 1, sf, None, None, "MISSED", 0, 0, 0, None)
    bad.occurrences[clash.occurrence_id] = clash  # same (schedule, version, scheduled_for): UNIQUE
    with pytest.raises(HistoryConflictError, match=r"(?i)unique"):
        store.apply(G, bad, {("d", 0): 99})
    assert store.offsets(G)[("d", 0)] == 10, "a failed batch stores no offset"
    assert store.count("occurrences") == 3, "... and no row"
    store.apply(G, batch_of(story(T, "s9", 1)), {("d", 0): 11})  # the store is usable after it
    assert store.count("occurrences") == 4


def test_each_version_gets_its_effective_interval(store: HistoryStore) -> None:
    store.apply(G, batch_of([history(T, "s1", 3, "RESUME", "ACTIVE", SF + 300)]), {})
    store.apply(G, batch_of([history(T, "s1", 1, "CREATE", "ACTIVE", SF + 100)]), {})
    store.apply(G, batch_of([history(T, "s1", 2, "PAUSE", "PAUSED", SF + 200, spec=None)]), {})
    rows = store.rows("schedules", "version")
    intervals = [(r[1], r[3], r[4], r[5]) for r in rows]  # version, state, from, until
    assert intervals == [(1, "ACTIVE", SF + 100, SF + 200), (2, "PAUSED", SF + 200, SF + 300),
                         (3, "ACTIVE", SF + 300, None)]


def test_skips_are_counted_with_the_batch_and_reset_empties_everything(store: HistoryStore) -> None:
    store.apply(G, batch_of([Rec(Source.DISPATCH, T, b"junk", 1, "s"), *story(T, "s1", 1)]), {("d", 0): 2})
    store.apply(G, batch_of([Rec(Source.DISPATCH, T, b"x", 1, "s")]), {("d", 0): 3})
    assert store.skipped() == {"undecodable dispatch": 2}
    store.reset()
    assert set(store.counts().values()) == {0} and store.offsets(G) == {}


def test_dead_letters_keep_their_latest_death_and_where_it_lies(store: HistoryStore) -> None:
    """The SQL merge of dlq_entries is rows.merge_dlq's: the later death, whatever the batch order."""
    def located(*items: tuple[str, int, int, int]) -> Batch:  # (schedule, attempts, partition, offset)
        b = Batch()
        for sid, attempts, partition, offset in items:
            b.add_dlq(T, dead_letter(T, sid, SF, attempts=attempts), partition, offset)
        return b

    store.apply(G, located(("s1", 5, 1, 9), ("s2", 3, 0, 2)), {("ks.dlq.acme", 0): 3, ("ks.dlq.acme", 1): 10})
    store.apply(G, located(("s1", 3, 1, 4)), {("ks.dlq.acme", 1): 5})  # the earlier death, read late
    store.apply(G, located(("s1", 5, 1, 9)), {})  # the same record twice: one row
    assert store.dlq_location(T, oid("s1", 1, SF)) == (1, 9)
    assert store.dlq_location(T, oid("s2", 1, SF)) == (0, 2)
    assert store.dlq_location("other", oid("s1", 1, SF)) is None, "another tenant's id is unknown"
    assert store.dlq_location(T, "o-none") is None and store.count("dlq_entries") == 2
    store.apply("other-group", Batch(), {("ks.dlq.acme", 0): 7})
    assert store.indexed_to("ks.dlq.acme") == {0: 7, 1: 10} and store.indexed_to("ks.dlq.x") == {}


def test_the_dlq_pages_one_item_per_dead_occurrence_in_order_of_death(store: HistoryStore) -> None:
    b = Batch()
    for i in range(7):  # deaths at SF + i*10, the third one twice (replayed and dead again: later)
        b.add_dlq(T, dead_letter(T, f"s{i}", SF, dead_at_ms=SF + 10 * i), i % 2, i)
    b.add_dlq(T, dead_letter(T, "s2", SF, attempts=9, dead_at_ms=SF + 100), 0, 50)
    b.add_dlq("other", dead_letter("other", "s9", SF), 0, 0)
    store.apply(G, b, {})
    seen, cursor = [], None
    for _ in range(10):
        page = store.dead_letters(T, cursor=cursor, limit=3)
        assert len(page.items) <= 3
        seen += [(d.schedule_id, d.attempts) for d in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == [("s0", 3), ("s1", 3), ("s3", 3), ("s4", 3), ("s5", 3), ("s6", 3), ("s2", 9)]
    assert store.dead_letters("nobody").items == ()
    with pytest.raises(ValueError, match="not a cursor of the dlq listing"):
        store.dead_letters(T, cursor="0:12")


def test_open_store_picks_the_backend_from_the_dsn(tmp_path: Path) -> None:
    with open_store("", tmp_path / "default.db") as s:
        assert type(s).__name__ == "SQLiteHistoryStore" and (tmp_path / "default.db").exists()
    with open_store(f"sqlite://{tmp_path / 'x.db'}", tmp_path / "unused.db") as s:
        assert (tmp_path / "x.db").exists()
    with open_store(str(tmp_path / "plain.db"), tmp_path / "unused.db"):
        assert (tmp_path / "plain.db").exists()
    from scheduler.history import HistoryStoreError

    with pytest.raises(HistoryStoreError, match=r"cannot connect.*check history_dsn"):
        open_store("postgresql://nobody@127.0.0.1:1/none", tmp_path / "unused.db")


def test_a_conflicting_batch_is_rebuilt_with_every_id_checked(tmp_path: Path) -> None:
    """A processor record with a forged id breaks the UNIQUE key; the writer re-maps and applies."""
    from dataclasses import replace as with_

    from scheduler.history.writer import BatchWriter, Job
    from scheduler.records import OccurrenceEvent, decode, encode

    real = event(T, "s1", SF, "SUCCEEDED")
    forged_event = with_(decode(real.value or b"", OccurrenceEvent), occurrence_id="f" * 32)
    recs = [dispatch(T, "s1", SF), Rec(real.source, T, encode(forged_event), 1, "s1")]

    def build(verify: bool) -> Batch:
        b = Batch(verify_ids=verify)
        for r in recs:
            b.add(r.source, r.tenant, r.value, r.ts)
        return b

    applied: list[Batch] = []
    with open_store(f"sqlite://{tmp_path / 'h.db'}", tmp_path / "unused.db") as store:
        writer = BatchWriter(store, G, lambda job, batch, seconds: applied.append(batch))
        writer.submit(Job(build(False), {("d", 0): 2}, lambda: build(True)))
        writer.drain()
        writer.close()
        assert store.count("occurrences") == 1 and store.offsets(G) == {("d", 0): 2}
    assert applied[0].verify_ids and applied[0].skipped == {"occurrence_id mismatch": 1}


@pytest.mark.postgres
def test_a_select_only_role_reads_postgresql_opened_read_only(pg_dsn: str) -> None:
    """The SDK's queries and the reconciler open the store read-only: a role that may only SELECT
    reads it; opened to write, the same role gets the owner's fix, never a traceback."""
    import secrets

    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from scheduler.history import HistoryStoreError

    with open_store(pg_dsn, Path("unused.db")) as owner:
        owner.apply("g", Batch(), {("t", 0): 7})
    params = conninfo_to_dict(pg_dsn)
    schema = str(params["options"]).split("search_path=")[1].split()[0]
    role = f"reader_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"CREATE ROLE {role} LOGIN")  # type: ignore[arg-type]
        c.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")  # type: ignore[arg-type]
        c.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")  # type: ignore[arg-type]
    reader = make_conninfo(pg_dsn, user=role)
    with open_store(reader, Path("unused.db"), read_only=True) as store:
        assert store.offsets("g") == {("t", 0): 7}
        with pytest.raises(HistoryStoreError, match="opened read-only"):
            store.apply("g", Batch(), {("t", 0): 8})
    with pytest.raises(HistoryStoreError, match="may not create the history tables"):
        open_store(reader, Path("unused.db"))
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA empty_{role} AUTHORIZATION postgres")  # type: ignore[arg-type]
    empty = make_conninfo(pg_dsn, options=f"-c search_path=empty_{role}")
    with pytest.raises(HistoryStoreError, match=r"no history table occurrences.*run `ksched history` once"):
        open_store(empty, Path("unused.db"), read_only=True)


def test_a_sqlite_reader_opens_without_the_write_lock(tmp_path: Path) -> None:
    """A read-only open of a store the indexer made takes no write lock (the API's request threads
    each open one, while the indexer writes); one of a file without tables still creates them."""
    import sqlite3
    import time

    from scheduler.history.sqlite import SQLiteHistoryStore

    path = tmp_path / "history.db"
    SQLiteHistoryStore(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # the indexer in the middle of a batch
    try:
        started = time.monotonic()
        with SQLiteHistoryStore(path, busy_timeout_s=2.0, read_only=True) as reader:
            assert not reader.indexed("ns")
        assert time.monotonic() - started < 1.0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    with SQLiteHistoryStore(tmp_path / "fresh.db", read_only=True) as fresh:
        assert not fresh.indexed("ns")
