"""The idempotency-store contract (DESIGN.md §5: dedupe on ``occurrence_id``).

A worker may receive the same occurrence more than once (redelivery after a
crash, a replay, a second consumer during a rebalance). The occurrence keeps
its id, so the worker runs its side effect through :meth:`IdempotencyStore.run_once`::

    with SQLiteStore("state/idempotency.db") as store:
        outcome = store.run_once(occurrence_id, lambda conn: conn.execute(
            "INSERT INTO invoices(occurrence_id, amount) VALUES (?, ?)", (occurrence_id, 42)))
        if not outcome.first:
            ...  # already done by an earlier delivery: acknowledge and move on

Guarantee: the effect's writes *on the connection it is given* and the record
of ``occurrence_id`` commit in one database transaction, so they happen
exactly once per id, across threads, processes and restarts. Effects outside
that database (an HTTP call, a message) are at-least-once: if the commit fails
after they ran, a redelivery runs them again -- make them idempotent
themselves (pass the occurrence id along as their idempotency key).

Rules for an effect:

* use only the connection it is given for transactional writes; never call
  ``commit()`` / ``rollback()`` on it (a SAVEPOINT is fine) and never swallow
  a database error on it -- the store detects both and raises
  :class:`~scheduler.idempotency.errors.EffectBrokeTransactionError`;
* never call back into the same store (:class:`ReentrantCallError`);
* keep it short: a concurrent delivery of the same id waits for it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Self, TypeVar

from scheduler.idempotency.errors import (
    IdempotencyError,
    InvalidOccurrenceIdError,
    ReentrantCallError,
    StoreClosedError,
)

T = TypeVar("T")
ConnT = TypeVar("ConnT")

#: The table every SQL store records processed ids in (unqualified: PostgreSQL resolves it on the
#: connection's ``search_path``).
TABLE = "ksched_processed"

#: Longest accepted ``occurrence_id``; ours are 32 hex characters (``scheduler.domain.ids``).
MAX_OCCURRENCE_ID_LEN = 256


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """What :meth:`IdempotencyStore.run_once` did.

    ``first`` is True when this call ran the effect and recorded the id; then
    ``value`` is the effect's return value. ``first`` is False when the id was
    already recorded: the effect was not called and ``value`` is None.
    """

    first: bool
    value: T | None


@dataclass(frozen=True, slots=True)
class Claim(Generic[ConnT]):
    """A backend's answer to "record this id": ``first`` and the connection the effect must use."""

    first: bool
    conn: ConnT


def check_occurrence_id(occurrence_id: object) -> str:
    """Return ``occurrence_id`` if it is a usable key, else raise :class:`InvalidOccurrenceIdError`."""
    if not isinstance(occurrence_id, str):
        raise InvalidOccurrenceIdError(
            f"occurrence_id must be a str, got {type(occurrence_id).__name__} {occurrence_id!r:.80}: "
            "pass the occurrence's id as text (decode bytes first)"
        )
    if not occurrence_id or len(occurrence_id) > MAX_OCCURRENCE_ID_LEN or "\x00" in occurrence_id:
        raise InvalidOccurrenceIdError(
            f"occurrence_id must be 1..{MAX_OCCURRENCE_ID_LEN} characters without NUL, got "
            f"{len(occurrence_id)} characters {occurrence_id!r:.80}: pass the occurrence's id "
            "(scheduler.domain.ids.occurrence_id), not a payload"
        )
    return occurrence_id


class IdempotencyStore(ABC, Generic[ConnT]):
    """Runs an effect at most once per ``occurrence_id`` (see the module docstring).

    ``ConnT`` is what the effect receives: a ``sqlite3.Connection``, a psycopg
    connection, or None for :class:`~scheduler.idempotency.MemoryStore`.
    Every method is safe to call from several threads at once. The schema is
    created on first use (idempotently). A store is a context manager that
    closes itself.

    Subclasses call ``super().__init__()`` and implement :meth:`_claim`,
    :meth:`_seen` and :meth:`_release`; this class enforces the argument checks, the closed state, the
    no-reentrancy rule and the wait for in-flight calls on close.
    """

    def __init__(self) -> None:
        self._state = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._released = False
        self._local = threading.local()

    # -- public API -------------------------------------------------------------------------------

    def run_once(self, occurrence_id: str, effect: Callable[[ConnT], T]) -> Outcome[T]:
        """Run ``effect(conn)`` and record ``occurrence_id`` in one transaction, unless already recorded.

        - Not yet recorded: calls ``effect`` once, commits its writes together
          with the record, returns ``Outcome(first=True, value=<effect's result>)``.
        - Already recorded: does not call ``effect``, returns ``Outcome(first=False, value=None)``.
        - ``effect`` raises: rolls back its writes and the record (the id stays
          unrecorded, a later call runs the effect again) and re-raises the
          exception unchanged.
        - Concurrent calls with the same id (threads or processes): exactly one
          runs the effect; the others wait for it to finish, then return
          ``first=False`` -- or, if it failed, one of them runs the effect.

        Raises :class:`InvalidOccurrenceIdError`, :class:`StoreClosedError`,
        :class:`ReentrantCallError`, :class:`EffectBrokeTransactionError`,
        :class:`StoreBusyError`, :class:`StoreUnavailableError`.
        """
        check_occurrence_id(occurrence_id)
        with self._call("run_once"), self._claim(occurrence_id) as claim:
            if not claim.first:
                return Outcome(first=False, value=None)
            value = effect(claim.conn)
        return Outcome(first=True, value=value)

    def run_batch(self, items: Sequence[tuple[str, Callable[[ConnT], T]]]) -> list[Outcome[T] | Exception]:
        """:meth:`run_once` for each ``(occurrence_id, effect)``, in order, as one group commit.

        Each effect still commits together with its id, exactly as in :meth:`run_once`; the
        slot of an effect that raised holds its exception (its writes and its id rolled back,
        the other items unaffected) instead of raising it. An id repeated in ``items`` runs once
        (a later repeat is ``first=False``, unless the earlier one raised). A backend with group
        commit (SQLite) commits the batch in one transaction, one durable write instead of one
        per id; the others run one transaction per item. A store error (busy, unavailable) is
        raised: with group commit, none of the batch is recorded.
        """
        for occurrence_id, _ in items:
            check_occurrence_id(occurrence_id)
        with self._call("run_batch"):
            return self._run_batch(items)

    def seen(self, occurrence_id: str) -> bool:
        """True if ``occurrence_id`` is recorded (committed) as processed.

        Advisory: an effect still running for the id is not visible yet, so use
        :meth:`run_once` to decide whether to act; ``seen`` is for reporting.
        """
        check_occurrence_id(occurrence_id)
        with self._call("seen"):
            return self._seen(occurrence_id)

    def close(self) -> None:
        """Refuse new calls, wait for the running ones to finish, then release the connections.

        Idempotent. Must not be called from inside an effect (it would wait for itself).
        """
        if getattr(self._local, "depth", 0):
            raise ReentrantCallError(
                f"{type(self).__name__}.close() was called from inside an effect: "
                "close the store after run_once returns"
            )
        with self._state:
            self._closed = True
            while self._in_flight:
                self._state.wait()
            if self._released:
                return
            self._released = True
        self._release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- backend hooks ----------------------------------------------------------------------------

    @abstractmethod
    def _claim(self, occurrence_id: str) -> AbstractContextManager[Claim[ConnT]]:
        """Open a transaction and try to record ``occurrence_id``; yield the :class:`Claim`.

        On normal exit: commit if ``first`` (after checking the effect left the
        transaction open and healthy), else end the transaction without
        writing. On an exception: roll back and let it propagate.
        """

    def _run_batch(self, items: Sequence[tuple[str, Callable[[ConnT], T]]]) -> list[Outcome[T] | Exception]:
        """One transaction per item; backends with group commit override it."""
        out: list[Outcome[T] | Exception] = []
        for occurrence_id, effect in items:
            try:
                with self._claim(occurrence_id) as claim:
                    value = effect(claim.conn) if claim.first else None
                out.append(Outcome(first=claim.first, value=value))
            except IdempotencyError:  # the store's own (busy, unavailable, a broken transaction)
                raise
            except Exception as exc:
                out.append(exc)
        return out

    @abstractmethod
    def _seen(self, occurrence_id: str) -> bool:
        """Whether ``occurrence_id`` is committed in the store."""

    @abstractmethod
    def _release(self) -> None:
        """Close every connection; called once, when no call is in flight."""

    # -- internals --------------------------------------------------------------------------------

    @contextmanager
    def _call(self, method: str) -> Iterator[None]:
        """Admit one public call: not closed, not from inside this store's effect; count it in flight."""
        if getattr(self._local, "depth", 0):
            raise ReentrantCallError(
                f"{type(self).__name__}.{method}() was called from inside an effect of the same store: "
                "use the connection the effect was given instead"
            )
        with self._state:
            if self._closed:
                raise StoreClosedError(
                    f"{type(self).__name__}.{method}() on a closed store: create a new store "
                    "or call close() only after the last use"
                )
            self._in_flight += 1
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._state:
                self._in_flight -= 1
                if not self._in_flight:
                    self._state.notify_all()
