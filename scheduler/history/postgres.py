"""``PostgresHistoryStore``: the production history store (psycopg 3).

One READ COMMITTED transaction per batch (committed without waiting for the WAL flush: see
``_ASYNC_COMMIT``): the occurrence and attempt rows are binary-``COPY``'d into
session-temporary staging tables (``ON COMMIT DELETE ROWS``) and merged with one
``INSERT … SELECT … ON CONFLICT DO UPDATE`` each (the batch holds one row per key, as that
statement requires); schedule versions, skip counts and offsets are small ``executemany``s. The
tables are created on open if missing, under an advisory lock so indexers starting together do
not race; a role without CREATE permission needs them created once by the owner (the error says
so). ``options=-c search_path=…`` in the DSN selects the schema.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from scheduler.history import sql
from scheduler.history.base import (
    HistoryConflictError,
    HistoryStore,
    HistoryStoreError,
    TopicPartitionKey,
    check_table,
)
from scheduler.history.mapping import Batch
from scheduler.history.rows import ATTEMPT_COLUMNS, OCCURRENCE_COLUMNS

_D = sql.POSTGRES
_SCHEMA_LOCK_KEY = 0x6B73636865645F68  # "kschedPh"
_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS occ_stage (LIKE occurrences) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS att_stage (LIKE attempts) ON COMMIT DELETE ROWS",
)
# Binary COPY: about half the client's CPU of text COPY per row (the rows are formatted in C from
# the column types, read once from the staging tables in _copy_types), and less for the server.
_COPY_OCC = f"COPY occ_stage ({', '.join(OCCURRENCE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_ATT = f"COPY att_stage ({', '.join(ATTEMPT_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COLUMN_TYPES = (
    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
    " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
)
_OCC = sql.upsert_occurrences(_D, "occ_stage")
_ATT = sql.upsert_attempts(_D, "att_stage")
_VER = sql.upsert_versions(_D)
_UNTIL = sql.effective_until(_D, "schedule_id = ANY(%s)")
_OFF = sql.upsert_offset(_D)
_CHG = sql.insert_changes(_D)
_DLQ = sql.upsert_dlq(_D)
_SKIP = sql.add_skipped(_D)
# A batch's rows and its offsets commit together, so a commit lost to a server crash loses both:
# the indexer reads those records again from the older offsets. Waiting for the WAL flush buys
# nothing here, and costs the writer a flush per batch.
_ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"


class PostgresHistoryStore(HistoryStore):
    """History store in PostgreSQL at ``dsn`` (a libpq connection string or URL)."""

    def __init__(self, dsn: str, *, connect_timeout_s: int = 10, read_only: bool = False) -> None:
        """``read_only``: create nothing (a role with SELECT only: the SDK's and the API's queries,
        the reconciler) and refuse :meth:`apply`; the tables must exist."""
        self._read_only = read_only
        self._types: dict[str, list[str]] = {}  # binary COPY's column types per staging table
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise HistoryStoreError(
                f"history_dsn is not a libpq connection string or URL ({exc}): pass e.g. "
                "'postgresql://user@host:5432/dbname'"
            ) from exc
        self._where = f"{params.get('user', '')}@{params.get('host', '')}:{params.get('port', '5432')}/" \
                      f"{params.get('dbname', '')}"
        try:
            self._conn: psycopg.Connection[TupleRow] = psycopg.connect(
                dsn, autocommit=False, connect_timeout=max(2, connect_timeout_s),
                application_name="ksched-history",
            )
        except psycopg.OperationalError as exc:
            raise HistoryStoreError(
                f"{self!r}: cannot connect ({_first_line(exc)}): check history_dsn and that the server is up"
            ) from exc
        if read_only:
            self._check_schema()
        else:
            self._create_schema()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresHistoryStore({self._where})"

    def _create_schema(self) -> None:
        c = self._conn
        try:
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
            for stmt in sql.ddl(_D):
                c.execute(stmt)  # type: ignore[arg-type]  # built from constants, not input
            for stmt in _STAGING:
                c.execute(stmt)  # type: ignore[arg-type]
            self._types = {t: self._copy_types(t, cols) for t, cols in (("occ_stage", OCCURRENCE_COLUMNS),
                                                                         ("att_stage", ATTEMPT_COLUMNS))}
            c.commit()
        except pg_errors.InsufficientPrivilege as exc:
            c.rollback()
            raise HistoryStoreError(
                f"{self!r}: this role may not create the history tables ({_first_line(exc)}): have the "
                "schema's owner run `ksched history` once, or grant CREATE on the schema"
            ) from exc
        except psycopg.Error:
            _rollback_quietly(c)
            raise

    def _copy_types(self, table: str, columns: tuple[str, ...]) -> list[str]:
        """The types of ``columns`` of ``table``, in that order: what a binary COPY is written as."""
        rows = self._conn.execute(_COLUMN_TYPES, (table,)).fetchall()  # type: ignore[arg-type]
        types = {str(name): str(kind) for name, kind in rows}
        return [types[c] for c in columns]

    def _check_schema(self) -> None:
        row = self._conn.execute(
            "SELECT " + ", ".join(f"to_regclass('{t}') IS NOT NULL" for t in sql.TABLES)  # type: ignore[arg-type]
        ).fetchone()
        self._conn.rollback()
        missing = [t for t, there in zip(sql.TABLES, row or (), strict=False) if not there]
        if missing:
            raise HistoryStoreError(
                f"{self!r}: no history table {', '.join(missing)} here: run `ksched history` once as the "
                "schema's owner (it creates them), or check the DSN's search_path"
            )

    def apply(self, group: str, batch: Batch, offsets: Mapping[TopicPartitionKey, int]) -> None:
        if self._read_only:
            raise HistoryStoreError(f"{self!r} was opened read-only: the indexer opens it to write")
        c = self._conn
        try:
            with c.cursor() as cur:
                cur.execute(_ASYNC_COMMIT)  # type: ignore[arg-type]
                if batch.occurrences:
                    with cur.copy(_COPY_OCC) as copy:  # type: ignore[arg-type]
                        copy.set_types(self._types["occ_stage"])
                        for r in batch.occurrences.values():
                            copy.write_row(r.as_tuple())
                    cur.execute(_OCC)  # type: ignore[arg-type]
                if batch.attempts:
                    with cur.copy(_COPY_ATT) as copy:  # type: ignore[arg-type]
                        copy.set_types(self._types["att_stage"])
                        for a in batch.attempts.values():
                            copy.write_row(a.as_tuple())
                    cur.execute(_ATT)  # type: ignore[arg-type]
                if batch.versions:
                    cur.executemany(_VER, [batch.versions[k].as_tuple() for k in sorted(batch.versions)])  # type: ignore[arg-type]
                    cur.execute(_UNTIL, (sorted({k[0] for k in batch.versions}),))  # type: ignore[arg-type]
                if batch.changes:
                    cur.executemany(_CHG, [batch.changes[k].as_tuple() for k in sorted(batch.changes)])  # type: ignore[arg-type]
                if batch.dlq:
                    cur.executemany(_DLQ, [batch.dlq[k].as_tuple() for k in sorted(batch.dlq)])  # type: ignore[arg-type]
                if batch.skipped:
                    cur.executemany(_SKIP, sorted(batch.skipped.items()))  # type: ignore[arg-type]
                cur.executemany(_OFF, [(group, t, p, n) for (t, p), n in sorted(offsets.items())])  # type: ignore[arg-type]
            c.commit()
        except pg_errors.UniqueViolation as exc:
            _rollback_quietly(c)
            why = _first_line(exc)
            raise HistoryConflictError(f"{self!r}: the batch breaks a unique key ({why})") from exc
        except BaseException:
            _rollback_quietly(c)
            raise

    def offsets(self, group: str) -> dict[TopicPartitionKey, int]:
        rows = self._conn.execute(sql.select_offsets(_D), (group,)).fetchall()  # type: ignore[arg-type]
        self._conn.rollback()
        return {(str(t), int(p)): int(n) for t, p, n in rows}

    def reset(self) -> None:
        try:
            self._conn.execute(f"TRUNCATE {', '.join(sql.TABLES)}")  # type: ignore[arg-type]
            self._conn.commit()
        except BaseException:
            _rollback_quietly(self._conn)
            raise

    def rows(self, table: str, order_by: str) -> list[tuple[Any, ...]]:
        query = f"SELECT * FROM {check_table(table)} ORDER BY {order_by}"
        out = [tuple(r) for r in self._conn.execute(query).fetchall()]  # type: ignore[arg-type]
        self._conn.rollback()
        return out

    @property
    def dialect(self) -> sql.Dialect:
        return _D

    def select(self, query: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        try:
            return [tuple(r) for r in self._conn.execute(query, tuple(params)).fetchall()]  # type: ignore[arg-type]
        finally:
            _rollback_quietly(self._conn)

    def count(self, table: str) -> int:
        row = self._conn.execute(f"SELECT count(*) FROM {check_table(table)}").fetchone()  # type: ignore[arg-type]
        self._conn.rollback()
        return int(row[0]) if row else 0

    def scan(self, query: str, params: Sequence[object]) -> Iterator[tuple[Any, ...]]:
        try:  # a server-side cursor: a million rows stream in batches instead of filling memory
            with self._conn.cursor(name=f"scan_{uuid.uuid4().hex[:12]}") as cur:
                cur.itersize = 10_000
                cur.execute(query.replace("?", "%s"), tuple(params))  # type: ignore[arg-type]
                for row in cur:
                    yield tuple(row)
        finally:
            self._conn.rollback()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(psycopg.Error):
                self._conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _rollback_quietly(conn: psycopg.Connection[TupleRow]) -> None:
    if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
