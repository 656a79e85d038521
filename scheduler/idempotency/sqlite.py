"""``SQLiteStore``: the embedded default idempotency store (stdlib ``sqlite3``).

One database file, shared safely by every thread of a process and by several
processes on the same machine:

* WAL journal mode (readers never block the writer) and a busy timeout, so a
  writer in another process waits for the lock instead of failing;
* each claim is ``BEGIN IMMEDIATE`` (take the write lock first) +
  ``INSERT ... ON CONFLICT DO NOTHING`` + the effect + ``COMMIT``, so two
  claims of the same id are serialised and the second sees the first's row;
* within one process, claims also queue on a lock (FIFO-ish, no busy polling),
  and connections come from a small pool (one thread at a time per connection).

Durability is SQLite's default ``synchronous=FULL``: a returned
``Outcome(first=True)`` survives a power loss. WAL needs a local filesystem
(not NFS/SMB). The table is::

    ksched_processed(occurrence_id TEXT PRIMARY KEY, processed_at TEXT)  -- ISO-8601 UTC, ms
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from scheduler.idempotency._pool import ConnectionPool
from scheduler.idempotency.base import TABLE, Claim, IdempotencyStore, Outcome
from scheduler.idempotency.errors import EffectBrokeTransactionError, StoreBusyError, StoreUnavailableError

_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " occurrence_id TEXT PRIMARY KEY NOT NULL,"
    " processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
    ") WITHOUT ROWID"
)
_INSERT = f"INSERT INTO {TABLE} (occurrence_id) VALUES (?) ON CONFLICT (occurrence_id) DO NOTHING"
_SELECT = f"SELECT 1 FROM {TABLE} WHERE occurrence_id = ?"
T = TypeVar("T")


class SQLiteStore(IdempotencyStore[sqlite3.Connection]):
    """Idempotency store in the SQLite file ``path``; the effect gets a ``sqlite3.Connection``.

    The connection is in autocommit mode (``isolation_level=None``) with the
    store's transaction open: the effect's statements are part of it. The
    parent directory is created if missing. ``busy_timeout_s`` bounds every
    wait for the write lock -- it must exceed the longest effect, since a
    concurrent claim waits for the running one. ``max_connections`` bounds the
    pool (one writer at a time; the rest serve :meth:`seen`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 30.0,
        max_connections: int = 4,
    ) -> None:
        super().__init__()
        raw = os.fspath(path)
        if raw in ("", ":memory:"):
            raise ValueError(
                f"SQLiteStore: path {raw!r} is not a file, and every connection would get its own "
                "empty database: pass a file path, or use MemoryStore for an in-process store"
            )
        if busy_timeout_s <= 0:
            raise ValueError(f"SQLiteStore: busy_timeout_s must be > 0, got {busy_timeout_s}")
        self.path = Path(raw)
        self._busy_timeout_s = busy_timeout_s
        self._write_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        self._schema_ready = False
        self._pool: ConnectionPool[sqlite3.Connection] = ConnectionPool(
            self._connect,
            sqlite3.Connection.close,
            max_size=max_connections,
            acquire_timeout_s=busy_timeout_s,
            owner=f"SQLiteStore({raw!r})",
        )

    def __repr__(self) -> str:
        return f"SQLiteStore({os.fspath(self.path)!r})"

    # -- IdempotencyStore hooks -------------------------------------------------------------------

    @contextmanager
    def _claim(self, occurrence_id: str) -> Iterator[Claim[sqlite3.Connection]]:
        with self._write() as conn:
            first = self._run(conn, _INSERT, occurrence_id).rowcount == 1
            yield Claim(first=first, conn=conn)
            if first:
                self._check_open(conn, occurrence_id)
                self._run(conn, "COMMIT")

    def _run_batch(
        self, items: Sequence[tuple[str, Callable[[sqlite3.Connection], T]]]
    ) -> list[Outcome[T] | Exception]:
        """Group commit: every item in one transaction (one durable write), each effect in a
        SAVEPOINT with its id, so one that raises rolls back its own writes and id only."""
        out: list[Outcome[T] | Exception] = []
        with self._write() as conn:
            for occurrence_id, effect in items:
                self._run(conn, "SAVEPOINT ksched_item")
                if self._run(conn, _INSERT, occurrence_id).rowcount != 1:
                    self._run(conn, "RELEASE ksched_item")
                    out.append(Outcome(first=False, value=None))
                    continue
                try:
                    value = effect(conn)
                except Exception as exc:
                    self._check_open(conn, occurrence_id)
                    self._run(conn, "ROLLBACK TO ksched_item")
                    self._run(conn, "RELEASE ksched_item")
                    out.append(exc)
                    continue
                self._check_open(conn, occurrence_id)
                self._run(conn, "RELEASE ksched_item")
                out.append(Outcome(first=True, value=value))
            self._run(conn, "COMMIT")
        return out

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """The write lock, a pooled connection and ``BEGIN IMMEDIATE``; rolled back unless the
        caller committed."""
        if not self._write_lock.acquire(timeout=self._busy_timeout_s):
            raise StoreBusyError(
                f"{self!r}: another thread kept the write lock for more than busy_timeout_s="
                f"{self._busy_timeout_s:g}: raise busy_timeout_s or shorten the effects"
            )
        try:
            conn = self._pool.acquire()
            try:
                self._run(conn, "BEGIN IMMEDIATE")
                try:
                    yield conn
                finally:
                    _rollback_quietly(conn)  # no-op after COMMIT; ends the duplicate and failed cases
            finally:
                self._pool.release(conn, reuse=_reusable(conn))
        finally:
            self._write_lock.release()

    def _check_open(self, conn: sqlite3.Connection, occurrence_id: str) -> None:
        if not _in_transaction(conn):
            raise EffectBrokeTransactionError(
                f"{self!r}: the effect for {occurrence_id!r} ended the store's transaction "
                "(commit(), rollback(), close() or COMMIT on its connection), so its writes "
                "and the record were not atomic: never end the transaction in an effect; "
                "use SAVEPOINT ... RELEASE for a partial rollback"
            )

    def _seen(self, occurrence_id: str) -> bool:
        conn = self._pool.acquire()
        try:
            return self._run(conn, _SELECT, occurrence_id).fetchone() is not None
        finally:
            self._pool.release(conn, reuse=_reusable(conn))

    def _release(self) -> None:
        self._pool.close()

    # -- internals --------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailableError(
                f"{self!r}: cannot open the database file ({exc}): check that the path is a writable "
                "file on a local filesystem"
            ) from exc
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                mode = str(self._run(conn, "PRAGMA journal_mode=WAL").fetchone()[0])
                if mode.lower() != "wal":
                    raise StoreUnavailableError(
                        f"{self!r}: SQLite refused WAL journal mode (got {mode!r}), which concurrent "
                        "processes need: put the file on a local filesystem"
                    )
                self._ensure_schema(conn)
                return conn
            except StoreBusyError:
                # Switching a new file to WAL takes an exclusive lock without SQLite's busy handler:
                # processes opening the same new database at once get SQLITE_BUSY at once. Retry.
                if time.monotonic() >= deadline:
                    conn.close()
                    raise
                time.sleep(0.01)
            except BaseException:
                conn.close()
                raise

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        with self._schema_lock:
            if not self._schema_ready:
                self._run(conn, _DDL)
                self._schema_ready = True

    def _run(self, conn: sqlite3.Connection, sql: str, *params: str) -> sqlite3.Cursor:
        """Execute one of the store's own statements, translating lock and file errors."""
        try:
            return conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise StoreBusyError(
                    f"{self!r}: the database stayed locked by another connection or process for more "
                    f"than busy_timeout_s={self._busy_timeout_s:g} ({exc}): raise busy_timeout_s or "
                    "shorten the effects"
                ) from exc
            raise StoreUnavailableError(f"{self!r}: {sql.split()[0]} failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailableError(
                f"{self!r}: {sql.split()[0]} failed ({exc}): the file is not a usable SQLite database; "
                "point the store at a new path"
            ) from exc


def _in_transaction(conn: sqlite3.Connection) -> bool:
    try:
        return conn.in_transaction
    except sqlite3.ProgrammingError:  # closed by the effect
        return False


def _reusable(conn: sqlite3.Connection) -> bool:
    try:
        return not conn.in_transaction
    except sqlite3.ProgrammingError:
        return False


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if _in_transaction(conn):
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
