"""Idempotency stores: run a side effect once per ``occurrence_id`` (DESIGN.md §5).

:class:`IdempotencyStore` is the contract (see :mod:`scheduler.idempotency.base`);
:class:`SQLiteStore` is the embedded default, :class:`PostgresStore` the
production store, :class:`MemoryStore` an in-process stub for unit tests.
"""

from __future__ import annotations

from scheduler.idempotency.base import MAX_OCCURRENCE_ID_LEN, TABLE, IdempotencyStore, Outcome
from scheduler.idempotency.errors import (
    EffectBrokeTransactionError,
    IdempotencyError,
    InvalidOccurrenceIdError,
    ReentrantCallError,
    StoreBusyError,
    StoreClosedError,
    StoreUnavailableError,
)
from scheduler.idempotency.memory import MemoryStore
from scheduler.idempotency.postgres import PostgresStore
from scheduler.idempotency.sqlite import SQLiteStore

__all__ = [
    "MAX_OCCURRENCE_ID_LEN",
    "TABLE",
    "EffectBrokeTransactionError",
    "IdempotencyError",
    "IdempotencyStore",
    "InvalidOccurrenceIdError",
    "MemoryStore",
    "Outcome",
    "PostgresStore",
    "ReentrantCallError",
    "SQLiteStore",
    "StoreBusyError",
    "StoreClosedError",
    "StoreUnavailableError",
]
