"""``SQLiteHistoryStore``: the embedded default history store (stdlib ``sqlite3``, one file).

One connection, used by one thread at a time (the indexer hands it between its threads).

WAL journal mode (readers -- queries, tests -- never block the indexer) and a busy timeout;
each batch is ``BEGIN IMMEDIATE`` + ``executemany`` upserts + the offsets + ``COMMIT``, with
``synchronous=NORMAL`` (WAL: a committed batch survives a process crash; a power loss may undo
the last batches, together with their offsets, which the indexer then reads again).
Several indexers of one group may share the file (the write lock serialises their batches).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from scheduler.history import sql
from scheduler.history.base import (
    HistoryConflictError,
    HistoryStore,
    HistoryStoreError,
    TopicPartitionKey,
    check_table,
)
from scheduler.history.mapping import Batch

_D = sql.SQLITE
_OCC = sql.upsert_occurrences(_D)
_ATT = sql.upsert_attempts(_D)
_VER = sql.upsert_versions(_D)
_OFF = sql.upsert_offset(_D)
_SKIP = sql.add_skipped(_D)
_UNTIL_ONE = sql.effective_until(_D, "schedule_id = ?")
_CHG = sql.insert_changes(_D)
_DLQ = sql.upsert_dlq(_D)


class SQLiteHistoryStore(HistoryStore):
    """History store in the SQLite file ``path`` (its directory is created if missing)."""

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0, read_only: bool = False
    ) -> None:
        """``read_only``: a reader (the API's request threads each open one) creates the tables only
        when the indexer has not yet: the DDL takes the write lock (BEGIN IMMEDIATE), which 64
        threads opening at once, and the indexer's batches, made wait in SQLite's busy handler's
        sleeps of up to 100 ms (describe p99 over a second, docs/api.md)."""
        raw = os.fspath(path)
        if raw in ("", ":memory:"):
            raise ValueError(
                f"SQLiteHistoryStore: path {raw!r} is not a file: pass a file path, e.g. "
                "~/.local/share/ksched/history.db"
            )
        self.path = Path(raw)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            if not (read_only and self._has_schema()):
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("BEGIN IMMEDIATE")
                for stmt in sql.ddl(_D):
                    self._conn.execute(stmt)
                self._conn.execute("COMMIT")
        except (OSError, sqlite3.Error) as exc:
            raise HistoryStoreError(
                f"SQLiteHistoryStore({raw!r}): cannot open the database ({exc}): check that the path is "
                "a writable file on a local filesystem, or set history_dsn to another one"
            ) from exc
        self._closed = False

    def _has_schema(self) -> bool:
        """Whether every table and index of the DDL exists (each statement makes one object)."""
        row = self._conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchone()
        return int(row[0]) >= len(sql.ddl(_D))

    def __repr__(self) -> str:
        return f"SQLiteHistoryStore({os.fspath(self.path)!r})"

    def apply(self, group: str, batch: Batch, offsets: Mapping[TopicPartitionKey, int]) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            if batch.occurrences:
                c.executemany(_OCC, [r.as_tuple() for r in batch.occurrences.values()])
            if batch.attempts:
                c.executemany(_ATT, [r.as_tuple() for r in batch.attempts.values()])
            if batch.versions:
                c.executemany(_VER, [r.as_tuple() for r in batch.versions.values()])
                c.executemany(_UNTIL_ONE, [(sid,) for sid in {k[0] for k in batch.versions}])
            if batch.changes:
                c.executemany(_CHG, [r.as_tuple() for r in batch.changes.values()])
            if batch.dlq:
                c.executemany(_DLQ, [r.as_tuple() for r in batch.dlq.values()])
            if batch.skipped:
                c.executemany(_SKIP, list(batch.skipped.items()))
            c.executemany(_OFF, [(group, t, p, n) for (t, p), n in offsets.items()])
            c.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            c.execute("ROLLBACK")
            raise HistoryConflictError(f"{self!r}: the batch breaks a unique key ({exc})") from exc
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def offsets(self, group: str) -> dict[TopicPartitionKey, int]:
        return {(t, int(p)): int(n) for t, p, n in self._conn.execute(sql.select_offsets(_D), (group,))}

    def reset(self) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for table in sql.TABLES:
                c.execute(f"DELETE FROM {table}")
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def rows(self, table: str, order_by: str) -> list[tuple[object, ...]]:
        return list(self._conn.execute(f"SELECT * FROM {check_table(table)} ORDER BY {order_by}"))

    @property
    def dialect(self) -> sql.Dialect:
        return _D

    def select(self, query: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        return list(self._conn.execute(query, tuple(params)))

    def count(self, table: str) -> int:
        row = self._conn.execute(f"SELECT count(*) FROM {check_table(table)}").fetchone()
        return int(row[0])

    def scan(self, query: str, params: Sequence[object]) -> Iterator[tuple[object, ...]]:
        cur = self._conn.execute(query, tuple(params))
        try:
            while rows := cur.fetchmany(10_000):
                yield from rows
        finally:
            cur.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._conn.close()
