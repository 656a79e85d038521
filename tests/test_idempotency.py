"""The IdempotencyStore contract, run against every backend.

MemoryStore in-process; SQLiteStore on a temp file; PostgresStore on the
session's private PostgreSQL server (tests/pg_fixture.py), each test in its own
schema. Effects write to an ``effects`` table through the store's connection,
and the tests count those rows through a separate connection.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from idempotency_backends import DbBackend, FlakyEffectError
from pg_fixture import PgServer

from scheduler.idempotency import (
    MAX_OCCURRENCE_ID_LEN,
    IdempotencyStore,
    InvalidOccurrenceIdError,
    MemoryStore,
    Outcome,
    ReentrantCallError,
    StoreClosedError,
)

KINDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
SQL_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass
class Harness:
    """One backend under test: opens stores on one database and counts the effects' writes."""

    kind: str
    db: DbBackend | None  # None: MemoryStore, whose effect writes go to ``memory_effects``
    memory_effects: list[str] = field(default_factory=list)
    opened: list[IdempotencyStore[Any]] = field(default_factory=list)

    def store(self) -> IdempotencyStore[Any]:
        store: IdempotencyStore[Any] = MemoryStore() if self.db is None else self.db.store()
        self.opened.append(store)
        return store

    def write(self, conn: Any, occurrence_id: str) -> None:
        if self.db is None:
            assert conn is None
            self.memory_effects.append(occurrence_id)
        else:
            self.db.write_effect(conn, occurrence_id, "test")

    def effect_counts(self) -> Counter[str]:
        return Counter(self.memory_effects) if self.db is None else self.db.effect_counts()

    def close(self) -> None:
        for store in self.opened:
            store.close()


def _harness(kind: str, directory: Path, pg_dsn: str | None) -> Harness:
    if kind == "memory":
        return Harness(kind, None)
    if kind == "sqlite":
        db = DbBackend("sqlite", str(directory / "idem.db"))
    else:
        assert pg_dsn is not None
        db = DbBackend("postgres", pg_dsn)
    db.create_effects_table()
    return Harness(kind, db)


@pytest.fixture(params=KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind: str = request.param
    pg_dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else None
    h = _harness(kind, tmp_path, pg_dsn)
    yield h
    h.close()


@pytest.fixture(params=SQL_KINDS)
def sql_harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    kind: str = request.param
    pg_dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else None
    h = _harness(kind, tmp_path, pg_dsn)
    yield h
    h.close()


def test_first_call_runs_the_effect_once_and_its_write_is_visible(harness: Harness) -> None:
    store = harness.store()
    calls: list[Any] = []

    def effect(conn: Any) -> str:
        calls.append(conn)
        harness.write(conn, "occ-1")
        return "done"

    assert store.run_once("occ-1", effect) == Outcome(first=True, value="done")
    assert len(calls) == 1
    assert harness.effect_counts() == Counter({"occ-1": 1})
    assert store.seen("occ-1")


def test_duplicate_returns_not_first_and_does_not_call_the_effect(harness: Harness) -> None:
    store = harness.store()
    store.run_once("occ-1", lambda conn: harness.write(conn, "occ-1"))

    def must_not_run(conn: Any) -> None:
        raise AssertionError("the effect ran for a duplicate")

    assert store.run_once("occ-1", must_not_run) == Outcome(first=False, value=None)
    assert harness.effect_counts() == Counter({"occ-1": 1})


def test_failed_effect_leaves_no_record_and_can_be_retried(harness: Harness) -> None:
    store = harness.store()
    boom = RuntimeError("handler failed")

    def failing(conn: Any) -> None:
        raise boom

    with pytest.raises(RuntimeError) as caught:
        store.run_once("occ-1", failing)
    assert caught.value is boom  # propagated unchanged
    assert not store.seen("occ-1")

    assert store.run_once("occ-1", lambda conn: 7) == Outcome(first=True, value=7)
    assert store.seen("occ-1")


def test_effect_writes_roll_back_together_with_the_record(sql_harness: Harness) -> None:
    store = sql_harness.store()

    def write_then_fail(conn: Any) -> None:
        sql_harness.write(conn, "occ-1")
        raise FlakyEffectError("after the write")

    with pytest.raises(FlakyEffectError):
        store.run_once("occ-1", write_then_fail)
    assert sql_harness.effect_counts() == Counter()
    assert not store.seen("occ-1")
    assert sql_harness.db is not None and sql_harness.db.recorded() == set()

    store.run_once("occ-1", lambda conn: sql_harness.write(conn, "occ-1"))
    assert sql_harness.effect_counts() == Counter({"occ-1": 1})
    assert sql_harness.db.recorded() == {"occ-1"}


def test_seen(harness: Harness) -> None:
    store = harness.store()
    assert not store.seen("a")
    store.run_once("a", lambda conn: None)
    with pytest.raises(ZeroDivisionError):
        store.run_once("b", lambda conn: 1 // 0)
    assert store.seen("a")
    assert not store.seen("b")
    assert not store.seen("c")


def test_records_survive_a_new_store_and_schema_creation_is_idempotent(sql_harness: Harness) -> None:
    with sql_harness.store() as first:
        first.run_once("occ-1", lambda conn: None)
    with sql_harness.store() as second, sql_harness.store() as third:
        assert second.seen("occ-1")
        assert second.run_once("occ-1", lambda conn: None).first is False
        assert third.run_once("occ-2", lambda conn: None).first is True
        assert second.seen("occ-2")


def test_closed_store_refuses_calls_and_close_is_idempotent(harness: Harness) -> None:
    with harness.store() as store:
        store.run_once("a", lambda conn: None)
    assert store.closed
    store.close()
    with pytest.raises(StoreClosedError, match="closed store"):
        store.run_once("b", lambda conn: None)
    with pytest.raises(StoreClosedError, match=r"seen\(\) on a closed store"):
        store.seen("a")


def test_effect_may_not_call_back_into_its_store(harness: Harness) -> None:
    store = harness.store()

    def nested(conn: Any) -> None:
        store.run_once("inner", lambda c: None)

    with pytest.raises(ReentrantCallError, match="use the connection the effect was given"):
        store.run_once("outer", nested)
    with pytest.raises(ReentrantCallError, match=r"close\(\) was called from inside an effect"):
        store.run_once("outer", lambda conn: store.close())
    assert not store.seen("outer")
    assert not store.seen("inner")
    assert store.run_once("outer", lambda conn: 1).first  # the store still works


@pytest.mark.parametrize(
    "bad",
    ["", "x" * (MAX_OCCURRENCE_ID_LEN + 1), "a\x00b", b"abc", 42, None],
    ids=["empty", "too-long", "nul", "bytes", "int", "none"],
)
def test_invalid_occurrence_ids_are_rejected_before_anything_runs(harness: Harness, bad: Any) -> None:
    store = harness.store()
    with pytest.raises(InvalidOccurrenceIdError, match="occurrence_id must be") as caught:
        store.run_once(bad, lambda conn: pytest.fail("effect ran"))
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidOccurrenceIdError):
        store.seen(bad)


def test_longest_valid_and_unicode_ids_round_trip(harness: Harness) -> None:
    store = harness.store()
    for oid in ("x" * MAX_OCCURRENCE_ID_LEN, "zürich-⏰-日本", "'; DROP TABLE ksched_processed; --"):
        assert store.run_once(oid, lambda conn: 1).first
        assert store.seen(oid)
        assert not store.run_once(oid, lambda conn: 1).first


def test_outcome_is_a_frozen_value() -> None:
    outcome = Outcome(first=True, value=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.first = False  # type: ignore[misc]
    assert outcome == Outcome(True, 3)


def test_memory_store_effect_gets_none_and_records_the_time() -> None:
    seen_conn: list[Any] = []
    with MemoryStore() as store:
        assert store.run_once("occ-1", seen_conn.append).first
        assert seen_conn == [None]
        stamp = store.processed_at("occ-1")
        assert stamp is not None and stamp.tzinfo is dt.UTC
        assert store.processed_at("occ-2") is None


# -- property: any sequence of calls matches a set model ---------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("call"), st.sampled_from(["a", "b", "c", "d"]), st.booleans()),
        st.tuples(st.just("reopen"), st.just(""), st.just(False)),
    ),
    max_size=14,
)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_any_call_sequence_matches_the_model(kind: str, ops: list[tuple[str, str, bool]],
                                              request: pytest.FixtureRequest) -> None:
    server: PgServer | None = request.getfixturevalue("postgres_server") if kind == "postgres" else None
    with tempfile.TemporaryDirectory() as tmp, _fresh_pg_schema(server) as pg_dsn:
        h = _harness(kind, Path(tmp), pg_dsn)
        store = h.store()
        recorded: set[str] = set()
        for op, oid, fail in ops:
            if op == "reopen":
                if h.db is not None:  # a MemoryStore forgets everything: reopening is a SQL-only event
                    store.close()
                    store = h.store()
                continue

            def effect(conn: Any, oid: str = oid, fail: bool = fail) -> str:
                h.write(conn, oid)
                if fail:
                    raise FlakyEffectError(oid)
                return oid

            if oid in recorded:
                assert store.run_once(oid, effect) == Outcome(first=False, value=None)
            elif fail:
                with pytest.raises(FlakyEffectError):
                    store.run_once(oid, effect)
                if h.db is None:
                    h.memory_effects.pop()  # a MemoryStore cannot roll the effect's own writes back
            else:
                assert store.run_once(oid, effect) == Outcome(first=True, value=oid)
                recorded.add(oid)
        for oid in "abcd":
            assert store.seen(oid) == (oid in recorded)
        assert h.effect_counts() == Counter(recorded)
        h.close()


@contextmanager
def _fresh_pg_schema(server: PgServer | None) -> Iterator[str | None]:
    """A DSN on a new schema of ``server``, dropped afterwards; None without a server."""
    if server is None:
        yield None
        return
    schema = f"h_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield server.schema_dsn(schema)
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _must_not_run(conn: Any) -> None:
    raise AssertionError("the effect ran for an id already recorded")


def test_run_batch_records_each_effect_with_its_id_and_returns_a_failure_in_place(harness: Harness) -> None:
    store = harness.store()
    store.run_once("old", lambda conn: harness.write(conn, "old"))
    boom = RuntimeError("one bad row")

    def failing(conn: Any) -> None:
        raise boom

    def writes(oid: str) -> Any:
        def effect(conn: Any) -> str:
            harness.write(conn, oid)
            return oid.upper()
        return effect

    out = store.run_batch([("a", writes("a")), ("old", _must_not_run), ("bad", failing),
                           ("a", _must_not_run), ("b", writes("b"))])  # "a" twice: runs once
    assert out == [Outcome(first=True, value="A"), Outcome(first=False, value=None), boom,
                   Outcome(first=False, value=None), Outcome(first=True, value="B")]
    assert harness.effect_counts() == Counter({"old": 1, "a": 1, "b": 1})
    assert [store.seen(i) for i in ("a", "b", "bad")] == [True, True, False]
    assert store.run_batch([("bad", lambda conn: 1)]) == [Outcome(first=True, value=1)]  # retried later
    with pytest.raises(InvalidOccurrenceIdError):
        store.run_batch([("c", writes("c")), ("", writes("x"))])
    assert not store.seen("c")  # ids are checked before anything runs


def test_run_batch_rolls_back_a_failing_effects_writes_only(sql_harness: Harness) -> None:
    store = sql_harness.store()

    def writes_then_fails(conn: Any) -> None:
        sql_harness.write(conn, "bad")
        raise ValueError("after writing")

    out = store.run_batch([("good", lambda conn: sql_harness.write(conn, "good")), ("bad", writes_then_fails),
                           ("late", lambda conn: sql_harness.write(conn, "late"))])
    assert isinstance(out[1], ValueError)
    assert sql_harness.effect_counts() == Counter({"good": 1, "late": 1})  # "bad"'s write rolled back
    assert not store.seen("bad")
