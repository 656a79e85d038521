"""Shared helpers of tests/test_idempotency*.py: the SQL backends under test and the race drivers.

A :class:`DbBackend` is a picklable description (kind + file path or DSN), so
spawned processes can open their own store on the same database. Effects
append a row to a plain ``effects`` table *without* a unique key: a duplicate
effect shows up as a second row.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from scheduler.idempotency import IdempotencyStore, PostgresStore, SQLiteStore


class FlakyEffectError(Exception):
    """Raised on purpose by a test effect."""


@dataclass(frozen=True)
class DbBackend:
    kind: Literal["sqlite", "postgres"]
    target: str  # SQLite file path or PostgreSQL DSN (search_path = the test's schema)

    def store(self, **options: Any) -> IdempotencyStore[Any]:
        if self.kind == "sqlite":
            return SQLiteStore(self.target, **options)
        return PostgresStore(self.target, **options)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on a fresh connection outside any store and commit; return the rows."""
        sql = sql.replace("?", "%s") if self.kind == "postgres" else sql
        if self.kind == "sqlite":
            with sqlite3.connect(self.target, timeout=30) as conn:
                rows = conn.execute(sql, tuple(params)).fetchall()
            conn.close()
            return rows
        with psycopg.connect(self.target) as pg:
            cur = pg.execute(sql, tuple(params))
            return [tuple(row) for row in cur.fetchall()] if cur.description else []

    def create_effects_table(self) -> None:
        self.execute("CREATE TABLE effects (occurrence_id text NOT NULL, worker text NOT NULL)")

    def write_effect(self, conn: Any, occurrence_id: str, worker: str) -> None:
        """The effect body: one row in ``effects`` on the store's connection."""
        mark = "?" if self.kind == "sqlite" else "%s"
        conn.execute(f"INSERT INTO effects (occurrence_id, worker) VALUES ({mark}, {mark})",
                     (occurrence_id, worker))

    def effect_counts(self) -> Counter[str]:
        return Counter(row[0] for row in self.execute("SELECT occurrence_id FROM effects"))

    def recorded(self) -> set[str]:
        return {row[0] for row in self.execute("SELECT occurrence_id FROM ksched_processed")}


def race_threads(
    backend: DbBackend,
    ids: Sequence[str],
    n_threads: int,
    tag: str,
    *,
    fail_rate: float = 0.0,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """``n_threads`` threads share one store and each run_once every id; return how many were first.

    Even threads go through ``ids`` in order, odd ones in reverse, so every id
    is contended. With ``fail_rate`` > 0 each effect raises with that
    probability after writing its row (rolled back); the thread retries that
    id until run_once returns. ``on_ready`` runs once the store is connected,
    before the threads start.
    """
    store = backend.store()
    store.seen("warm-up")  # connect and create the schema before the race starts
    if on_ready is not None:
        on_ready()
    barrier = threading.Barrier(n_threads)
    firsts = [0] * n_threads
    errors: list[BaseException] = []

    def run(index: int) -> None:
        worker = f"{tag}-{index}"
        rng = random.Random(worker)
        order = list(ids) if index % 2 == 0 else list(reversed(ids))
        try:
            barrier.wait(timeout=30)
            for oid in order:
                firsts[index] += _run_once_retrying(store, backend, oid, worker, rng, fail_rate)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"race-{tag}-{i}") for i in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    store.close()
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"race {tag}: a thread did not finish in 120 s")
    return sum(firsts)


def _run_once_retrying(
    store: IdempotencyStore[Any],
    backend: DbBackend,
    oid: str,
    worker: str,
    rng: random.Random,
    fail_rate: float,
) -> int:
    """``store.run_once(oid, ...)`` until it returns (a flaky effect is retried); 1 if it was first."""
    once = functools.partial(
        _effect, backend=backend, fail_rate=fail_rate, occurrence_id=oid, worker=worker, rng=rng
    )
    while True:
        try:
            outcome = store.run_once(oid, once)
        except FlakyEffectError:
            continue
        return int(outcome.first)


def _effect(
    conn: Any, *, backend: DbBackend, fail_rate: float, occurrence_id: str, worker: str, rng: random.Random
) -> None:
    """The race's effect: one ``effects`` row; fails after writing it with probability ``fail_rate``."""
    backend.write_effect(conn, occurrence_id, worker)
    time.sleep(rng.random() * 0.002)  # widen the window between claim and commit
    if rng.random() < fail_rate:
        raise FlakyEffectError(occurrence_id)


def _race_process(
    backend: DbBackend,
    ids: Sequence[str],
    n_threads: int,
    tag: str,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Child-process body of :func:`race_processes` (module level so ``spawn`` can import it)."""
    announced = False

    def wait_for_go() -> None:
        nonlocal announced
        announced = True
        ready.put(tag)
        if not go.wait(timeout=60):
            raise TimeoutError("the parent never said go")

    try:
        results.put((tag, race_threads(backend, ids, n_threads, tag, on_ready=wait_for_go)))
    except BaseException as exc:
        if not announced:
            ready.put(tag)  # do not leave the parent waiting for a child that already failed
        results.put((tag, f"{type(exc).__name__}: {exc}"))


def race_processes(backend: DbBackend, ids: Sequence[str], n_processes: int, n_threads: int) -> list[int]:
    """Run :func:`race_threads` in ``n_processes`` spawned processes at once; their first-counts."""
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent has threads and open connections
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_race_process, args=(backend, ids, n_threads, f"p{i}", ready, go, results))
        for i in range(n_processes)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=60)
        go.set()
        outcomes = dict(results.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    failed = {tag: value for tag, value in outcomes.items() if isinstance(value, str)}
    if failed:
        raise AssertionError(f"race processes failed: {failed}")
    return [int(value) for value in outcomes.values()]
