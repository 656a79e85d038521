"""``PostgresStore``: the production idempotency store (psycopg 3).

Each claim is one READ COMMITTED transaction::

    INSERT INTO ksched_processed (occurrence_id) VALUES ($1)
        ON CONFLICT (occurrence_id) DO NOTHING RETURNING txid_current()
    -- the effect's statements on the same connection
    COMMIT

A second inserter of the same id blocks on the primary key until the first
transaction ends: after a commit it gets no row (duplicate, the effect is not
called); after a rollback its insert succeeds and it runs the effect. That is
the whole concurrency protocol -- across threads, processes and hosts.

The table is created on first use if ``to_regclass('ksched_processed')`` does
not find it on the connection's ``search_path`` (under an advisory lock, so
concurrent first uses do not race); a role without CREATE permission needs
it created once by the owner (the error prints the DDL)::

    CREATE TABLE ksched_processed (occurrence_id text PRIMARY KEY,
                                   processed_at timestamptz NOT NULL DEFAULT now())

Connections come from a small pool of our own (``max_connections``); a pooled
connection that turns out dead (server restart) is replaced once, transparently,
before the effect runs. Needs PostgreSQL 10 or later.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from scheduler.idempotency._pool import ConnectionPool
from scheduler.idempotency.base import TABLE, Claim, IdempotencyStore
from scheduler.idempotency.errors import (
    EffectBrokeTransactionError,
    StoreBusyError,
    StoreUnavailableError,
)

PgConnection = psycopg.Connection[TupleRow]

_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "occurrence_id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())"
)
_INSERT = (
    f"INSERT INTO {TABLE} (occurrence_id) VALUES (%s) "
    "ON CONFLICT (occurrence_id) DO NOTHING RETURNING txid_current()"
)
_SELECT = f"SELECT 1 FROM {TABLE} WHERE occurrence_id = %s"
_SCHEMA_LOCK_KEY = 0x6B73636865645F70  # "kschedPp": serialises concurrent CREATE TABLE IF NOT EXISTS
_APPLICATION_NAME = "ksched-idempotency"


class PostgresStore(IdempotencyStore[PgConnection]):
    """Idempotency store in PostgreSQL at ``dsn``; the effect gets the ``psycopg.Connection``.

    ``dsn`` is a libpq connection string or URL (``postgresql://user@host/db``);
    an ``options=-c search_path=...`` in it selects the schema of the table.
    The effect's connection is inside the store's transaction (not autocommit):
    it may open savepoints with ``conn.transaction()`` but must not commit or
    roll back. ``max_connections`` bounds the pool; a call waits up to
    ``acquire_timeout_s`` for a free connection. Connecting gives up after
    ``connect_timeout_s`` (whole seconds, libpq's minimum is 2).
    """

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int = 8,
        acquire_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(
                f"PostgresStore: dsn is not a libpq connection string or URL ({exc}): pass e.g. "
                "'postgresql://user@host:5432/dbname' or 'host=... dbname=...'"
            ) from exc
        if connect_timeout_s <= 0:
            raise ValueError(f"PostgresStore: connect_timeout_s must be > 0, got {connect_timeout_s}")
        self._dsn = dsn
        self._where = _describe(params)
        self._connect_kwargs: dict[str, Any] = {"connect_timeout": max(2, math.ceil(connect_timeout_s))}
        if "application_name" not in params:
            self._connect_kwargs["application_name"] = _APPLICATION_NAME
        self._schema_ready = False
        self._pool: ConnectionPool[PgConnection] = ConnectionPool(
            self._connect,
            PgConnection.close,
            max_size=max_connections,
            acquire_timeout_s=acquire_timeout_s,
            owner=repr(self),
        )

    def __repr__(self) -> str:
        return f"PostgresStore({self._where})"

    # -- IdempotencyStore hooks -------------------------------------------------------------------

    @contextmanager
    def _claim(self, occurrence_id: str) -> Iterator[Claim[PgConnection]]:
        conn, xid = self._insert_claim(occurrence_id)
        try:
            try:
                yield Claim(first=xid is not None, conn=conn)
                if xid is not None:
                    self._check_intact(conn, occurrence_id, xid)
                    self._commit(conn, occurrence_id)
            finally:
                _rollback_quietly(conn)  # no-op after COMMIT; ends the duplicate and failed cases
        finally:
            self._pool.release(conn, reuse=_reusable(conn))

    def _seen(self, occurrence_id: str) -> bool:
        conn, row = self._first_statement("SELECT", _SELECT, occurrence_id)
        _rollback_quietly(conn)
        self._pool.release(conn, reuse=_reusable(conn))
        return row is not None

    def _release(self) -> None:
        self._pool.close()

    # -- internals --------------------------------------------------------------------------------

    def _insert_claim(self, occurrence_id: str) -> tuple[PgConnection, int | None]:
        """Open the transaction and insert the id: (connection, this transaction's xid if inserted)."""
        conn, row = self._first_statement("INSERT", _INSERT, occurrence_id)
        return conn, None if row is None else int(row[0])

    def _first_statement(
        self, step: str, sql: str, occurrence_id: str
    ) -> tuple[PgConnection, TupleRow | None]:
        """Acquire a connection and run the transaction's first statement: (connection, first row).

        The caller owns the returned connection (an open transaction) and must
        release it. Nothing has happened yet that a retry could repeat, so a
        connection error (server restart, idle kill, admin shutdown) discards
        that connection and the idle ones, which likely died with it, and
        retries once on a new connection.
        """
        for attempt in (1, 2):
            conn = self._pool.acquire()
            try:
                return conn, conn.execute(sql, (occurrence_id,)).fetchone()
            except (pg_errors.QueryCanceled, pg_errors.LockNotAvailable) as exc:
                _rollback_quietly(conn)
                self._pool.release(conn, reuse=_reusable(conn))
                raise StoreBusyError(
                    f"{self!r}: waiting for a concurrent run of {occurrence_id!r} hit the server's "
                    f"statement_timeout/lock_timeout ({_first_line(exc)}): raise those timeouts for this "
                    "role or shorten the effects"
                ) from exc
            except psycopg.OperationalError as exc:
                self._pool.release(conn, reuse=False)
                self._pool.discard_idle()
                if attempt == 2:
                    raise self._unavailable(step, exc) from exc
            except BaseException:
                _rollback_quietly(conn)
                self._pool.release(conn, reuse=_reusable(conn))
                raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _check_intact(self, conn: PgConnection, occurrence_id: str, xid: int) -> None:
        """Raise EffectBrokeTransactionError unless the claim's transaction is still open and healthy."""
        status = conn.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise EffectBrokeTransactionError(
                f"{self!r}: the effect for {occurrence_id!r} swallowed a database error, so PostgreSQL "
                "aborted the transaction and nothing was recorded: let the error propagate, or run the "
                "statement that may fail inside `with conn.transaction():` (a savepoint)"
            )
        current = None
        if status == TransactionStatus.INTRANS and not conn.closed:
            row = conn.execute("SELECT txid_current_if_assigned()").fetchone()
            current = None if row is None or row[0] is None else int(row[0])
        if current != xid:
            raise EffectBrokeTransactionError(
                f"{self!r}: the effect for {occurrence_id!r} ended the store's transaction (commit(), "
                "rollback(), close() or COMMIT on its connection), so its writes and the record were not "
                "atomic: never end the transaction in an effect; use `with conn.transaction():` for a "
                "savepoint"
            )

    def _commit(self, conn: PgConnection, occurrence_id: str) -> None:
        try:
            conn.commit()
        except psycopg.OperationalError as exc:
            if conn.closed or conn.broken:
                raise StoreUnavailableError(
                    f"{self!r}: the connection broke during COMMIT of {occurrence_id!r} "
                    f"({_first_line(exc)}): the outcome is unknown; a redelivery returns first=False "
                    "if it was recorded"
                ) from exc
            raise  # e.g. a deferred constraint of the effect's writes: the effect failed, rolled back

    def _connect(self) -> PgConnection:
        try:
            conn = psycopg.connect(self._dsn, autocommit=False, **self._connect_kwargs)
        except psycopg.OperationalError as exc:
            raise self._unavailable("connect", exc) from exc
        try:
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            self._ensure_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _ensure_schema(self, conn: PgConnection) -> None:
        if self._schema_ready:
            return
        try:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,)).fetchone()
            if not (row and row[0]):
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
                conn.execute(_DDL)
            conn.commit()
        except pg_errors.InsufficientPrivilege as exc:
            _rollback_quietly(conn)
            raise StoreUnavailableError(
                f"{self!r}: this role may not create table {TABLE} ({_first_line(exc)}): have its owner "
                f"run once: {_DDL}"
            ) from exc
        except pg_errors.InvalidSchemaName as exc:
            _rollback_quietly(conn)
            raise StoreUnavailableError(
                f"{self!r}: no schema on the connection's search_path exists to create table {TABLE} in "
                f"({_first_line(exc)}): create the schema, or fix `options=-c search_path=...` in the dsn"
            ) from exc
        except psycopg.OperationalError as exc:
            _rollback_quietly(conn)
            raise self._unavailable("schema check", exc) from exc
        except BaseException:
            _rollback_quietly(conn)
            raise
        self._schema_ready = True

    def _unavailable(self, step: str, exc: Exception) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self!r}: {step} failed: {_first_line(exc)}: check the dsn and that the server is up "
            "and accepts connections"
        )


def _describe(params: dict[str, Any]) -> str:
    """``user@host:port/dbname`` from libpq params, without the password (for messages)."""
    user = params.get("user") or "<default user>"
    host = params.get("host") or params.get("hostaddr") or "<default host>"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or "<default db>"
    return f"{user}@{host}:{port}/{dbname}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reusable(conn: PgConnection) -> bool:
    return not conn.closed and not conn.broken and conn.info.transaction_status == TransactionStatus.IDLE


def _rollback_quietly(conn: PgConnection) -> None:
    if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
