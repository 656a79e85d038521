"""Concurrent run_once calls with the same ids: exactly one effect per id.

Every effect appends a row to an ``effects`` table with no unique key, through
the store's connection; the tests count those rows afterwards. 8 threads share
one store; 2 spawned processes with 4 threads each open their own stores on
the same SQLite file / PostgreSQL schema.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from idempotency_backends import DbBackend, race_processes, race_threads

from scheduler.idempotency import MemoryStore

IDS = [f"occ-{n:03d}" for n in range(40)]
SQL_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=SQL_KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> DbBackend:
    if request.param == "sqlite":
        backend = DbBackend("sqlite", str(tmp_path / "race.db"))
    else:
        backend = DbBackend("postgres", request.getfixturevalue("pg_dsn"))
    backend.create_effects_table()
    return backend


def _assert_exactly_once(db: DbBackend, firsts: int) -> None:
    assert db.effect_counts() == Counter(dict.fromkeys(IDS, 1))
    assert db.recorded() == set(IDS)
    assert firsts == len(IDS)


def test_eight_threads_one_effect_per_id(db: DbBackend) -> None:
    _assert_exactly_once(db, race_threads(db, IDS, 8, "t"))


def test_eight_threads_with_failing_effects_still_one_effect_per_id(db: DbBackend) -> None:
    # A third of the effects raise after writing: their rows roll back, and a waiting
    # duplicate (or the retry) runs the effect again, until each id succeeded once.
    _assert_exactly_once(db, race_threads(db, IDS, 8, "f", fail_rate=0.35))


def test_two_processes_one_effect_per_id(db: DbBackend) -> None:
    firsts = race_processes(db, IDS, n_processes=2, n_threads=4)
    _assert_exactly_once(db, sum(firsts))


def test_memory_store_eight_threads_one_effect_per_id() -> None:
    store = MemoryStore()
    effects: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(8)
    firsts: list[bool] = []

    def effect(conn: Any, oid: str) -> None:
        with lock:
            effects[oid] += 1

    def run() -> None:
        barrier.wait(timeout=30)
        for oid in IDS:
            outcome = store.run_once(oid, functools.partial(effect, oid=oid))
            with lock:
                firsts.append(outcome.first)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert effects == Counter(dict.fromkeys(IDS, 1))
    assert sum(firsts) == len(IDS) and len(firsts) == 8 * len(IDS)


class _Holder:
    """Runs run_once(oid) in a thread whose effect writes, then blocks until told to commit or fail."""

    def __init__(self, db: DbBackend, oid: str, *, fail: bool) -> None:
        self.store = db.store()
        self.started = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None

        def effect(conn: Any) -> None:
            db.write_effect(conn, oid, "holder")
            self.started.set()
            assert self.release.wait(timeout=30)
            if fail:
                raise RuntimeError("holder fails on purpose")

        def run() -> None:
            try:
                self.store.run_once(oid, effect)
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.started.wait(timeout=30)

    def finish(self) -> None:
        self.release.set()
        self.thread.join(timeout=30)
        self.store.close()


@pytest.mark.parametrize("holder_fails", [False, True], ids=["holder-commits", "holder-fails"])
def test_a_concurrent_duplicate_waits_for_the_running_effect(db: DbBackend, holder_fails: bool) -> None:
    holder = _Holder(db, "occ-1", fail=holder_fails)
    waiter_store = db.store()
    result: list[Any] = []

    def wait_for_claim() -> None:
        result.append(waiter_store.run_once("occ-1", lambda c: db.write_effect(c, "occ-1", "w")))

    waiter = threading.Thread(target=wait_for_claim)
    try:
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive(), "the duplicate did not wait for the running effect"
    finally:
        holder.finish()
        waiter.join(timeout=30)
        waiter_store.close()
    assert not waiter.is_alive()
    if holder_fails:
        assert isinstance(holder.error, RuntimeError)
        assert result[0].first is True  # the holder rolled back: the waiter ran the effect
        assert [row[0] for row in db.execute("SELECT worker FROM effects")] == ["w"]
    else:
        assert holder.error is None
        assert result[0].first is False
        assert [row[0] for row in db.execute("SELECT worker FROM effects")] == ["holder"]
