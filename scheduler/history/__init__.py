"""The history store and its indexer (DESIGN.md §6; ``docs/history.md``).

:mod:`~scheduler.history.rows` and :mod:`~scheduler.history.mapping` are pure (records → rows,
the merge rules); :class:`HistoryStore` (``base.py``) is the contract, :class:`SQLiteHistoryStore`
the embedded default and :class:`PostgresHistoryStore` the production store;
:mod:`~scheduler.history.indexer` is the thin Kafka loop (imported on its own: it needs Kafka).
The read queries (SDK, CLI, API) are methods of every store: :mod:`~scheduler.history.queries`,
answering the frozen values of :mod:`~scheduler.history.views`.
"""

from __future__ import annotations

import os
from pathlib import Path

from scheduler.history.base import HistoryConflictError, HistoryStore, HistoryStoreError
from scheduler.history.mapping import Batch, Source, classify
from scheduler.history.postgres import PostgresHistoryStore
from scheduler.history.sqlite import SQLiteHistoryStore

__all__ = [
    "Batch",
    "HistoryConflictError",
    "HistoryStore",
    "HistoryStoreError",
    "PostgresHistoryStore",
    "SQLiteHistoryStore",
    "Source",
    "classify",
    "open_store",
    "sqlite_path",
]

_PG_PREFIXES = ("postgresql://", "postgres://")
_SQLITE_PREFIX = "sqlite:///"


def sqlite_path(dsn: str, default_sqlite: Path) -> Path | None:
    """The SQLite file ``dsn`` names (``default_sqlite`` when empty), or None for a PostgreSQL DSN."""
    if not dsn:
        return default_sqlite
    if dsn.startswith(_PG_PREFIXES) or ("=" in dsn and not dsn.startswith(_SQLITE_PREFIX)):
        return None
    path = dsn[len(_SQLITE_PREFIX) - 1:] if dsn.startswith(_SQLITE_PREFIX) else dsn
    return Path(os.path.expanduser(path))


def open_store(dsn: str, default_sqlite: Path, *, read_only: bool = False) -> HistoryStore:
    """The store ``dsn`` names: empty → SQLite at ``default_sqlite``; ``sqlite:///PATH`` or a plain
    path → SQLite there; ``postgresql://…`` / ``postgres://…`` or a libpq ``key=value`` string →
    PostgreSQL. Raises :class:`HistoryStoreError` naming the setting when it cannot be opened.

    ``read_only`` (readers: queries, the reconciler): PostgreSQL creates nothing, so a role with
    SELECT only may read; SQLite, a local file of the user's, creates the tables only when they
    are missing (no write lock taken per reader)."""
    path = sqlite_path(dsn, default_sqlite)
    return PostgresHistoryStore(dsn, read_only=read_only) if path is None else \
        SQLiteHistoryStore(path, read_only=read_only)
