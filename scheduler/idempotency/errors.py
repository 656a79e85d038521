"""Errors of the idempotency stores.

Every error is an :class:`IdempotencyError` whose ``str()`` is one line that
names the offending field or value and the fix. Errors raised by the effect
itself are never wrapped: they propagate unchanged after the rollback.
"""

from __future__ import annotations


class IdempotencyError(Exception):
    """Base class of every error raised by :mod:`scheduler.idempotency` itself."""


class InvalidOccurrenceIdError(IdempotencyError, ValueError):
    """``occurrence_id`` is not a usable key (wrong type, empty, too long, contains NUL)."""


class StoreClosedError(IdempotencyError):
    """The store was used after :meth:`~scheduler.idempotency.IdempotencyStore.close`."""


class ReentrantCallError(IdempotencyError):
    """An effect called back into the store that is running it (it must use its connection)."""


class EffectBrokeTransactionError(IdempotencyError):
    """The effect ended or poisoned the store's transaction (commit, rollback, swallowed error).

    The store rolled back what it still could; whether the occurrence is
    recorded is whatever :meth:`~scheduler.idempotency.IdempotencyStore.seen`
    says afterwards.
    """


class StoreBusyError(IdempotencyError):
    """Waited longer than the configured timeout for a connection or the database's write lock."""


class StoreUnavailableError(IdempotencyError):
    """The database cannot be opened or reached (bad path or DSN, server down, no permission)."""
