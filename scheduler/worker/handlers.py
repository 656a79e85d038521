"""What a handler sees: the registry, the :class:`Context` and the outcome exceptions.

A handler is any callable ``handler(ctx: Context) -> object``; its return value
is ignored. Its outcome is decided by how it ends:

- returns                       -> ``SUCCEEDED``
- raises :class:`PermanentError` -> ``FAILED`` retryable=False (no retry: DEAD, DLQ)
- raises :class:`Canceled`       -> ``FAILED`` retryable=False, error_class ``ksched.Canceled``
  (what :meth:`Context.raise_if_cancelled` raises)
- raises anything else (including :class:`RetryableError`) -> ``FAILED`` retryable=True

Retries are the processor's decision (DESIGN.md §5): a worker only reports.

*Fast* handlers -- ones that finish in milliseconds (a row in a database, a
message) -- can skip the thread pool: ``register(name, inline=True)`` runs the
handler on the worker's consumer thread, and ``register_batch(name)`` hands it
every occurrence of a consumed batch at once (e.g. to commit their effects in
one transaction with :meth:`~scheduler.idempotency.IdempotencyStore.run_batch`).
A fast attempt sends no ``STARTED`` and no heartbeat: its one final report
carries the start time (docs/contract.md §7). While a fast handler runs the
worker consumes nothing, so a handler that may block for seconds must stay a
plain one.
"""

from __future__ import annotations

import datetime as dt
import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from scheduler.vocabulary import AttemptReportKind, AttemptReportKindSymbol, ErrorClass

CANCELED_CLASS: str = ErrorClass.CANCELED.value
"""``error_class`` of a ``FAILED`` report that means the occurrence was CANCELED (not run or
stopped because its schedule was canceled, paused or superseded). The report kind enum has no
CANCELED symbol; this is the agreed encoding, mapped to the CANCELED state by the processor."""

UNKNOWN_HANDLER_CLASS: str = ErrorClass.UNKNOWN_HANDLER.value
"""``error_class`` of a retryable ``FAILED`` report for an occurrence naming a handler this
worker does not have."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EVENT_LOCK = threading.Lock()


class RetryableError(Exception):
    """The attempt failed and may succeed later; the processor schedules a retry (within budget)."""


class PermanentError(Exception):
    """The attempt failed and retrying cannot help (bad payload, rejected by the target)."""


class Canceled(Exception):
    """The occurrence's schedule was canceled, paused or superseded while the handler ran."""


class HandlerError(ValueError):
    """A handler registration is invalid; the message names the handler and the fix."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """One attempt at one occurrence, as given to its handler.

    ``occurrence_id`` is stable across retries and redeliveries: use it as the
    idempotency key of the side effect. ``attempt`` is the processor's attempt
    number; ``token`` the fencing token of this try. ``scheduled_for`` is the
    nominal instant (aware, UTC). Cancellation is cooperative: the worker sets
    the flag when its view of ``ksched.versions.<tenant>`` says the schedule was
    canceled, paused or superseded after the handler started; a long handler
    should check :attr:`cancelled` or call :meth:`raise_if_cancelled` between steps.
    """

    tenant: str
    schedule_id: str
    occurrence_id: str
    attempt: int
    version: int
    scheduled_for_ms: int
    handler: str
    payload: bytes
    token: str
    worker_id: str
    deadline_ms: int | None = None
    # The flag is the reason list; the Event only wakes waiters and is made on first use (an Event
    # per context cost more than the rest of a fast handler's context).
    _reason: list[str] = field(default_factory=list, repr=False, compare=False)
    _events: list[threading.Event] = field(default_factory=list, repr=False, compare=False)

    @property
    def scheduled_for(self) -> dt.datetime:
        """The nominal scheduled instant as an aware UTC datetime."""
        return _EPOCH + dt.timedelta(milliseconds=self.scheduled_for_ms)

    @property
    def cancelled(self) -> bool:
        return bool(self._reason)

    @property
    def cancel_reason(self) -> str | None:
        """Why the flag was set (e.g. ``"schedule canceled"``), or None."""
        return self._reason[0] if self._reason else None

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Canceled` (reported as ``ksched.Canceled``) if the flag is set."""
        if self._reason:
            raise Canceled(self.cancel_reason or "canceled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on cancellation; returns :attr:`cancelled`."""
        return self._event().wait(timeout)

    def cancel(self, reason: str) -> None:
        """Set the flag (the worker calls this; the first reason is kept)."""
        if not self._reason:
            self._reason.append(reason)
        self._event().set()

    def _event(self) -> threading.Event:
        if not self._events:
            with _EVENT_LOCK:  # one Event however many threads ask at once
                if not self._events:
                    self._events.append(threading.Event())
        return self._events[0]


Handler: TypeAlias = Callable[[Context], object]
BatchResult: TypeAlias = Sequence[BaseException | None] | None
BatchHandler: TypeAlias = Callable[[Sequence[Context]], BatchResult]
"""A batch handler gets the contexts of one batch and returns None (all succeeded) or one entry per
context, in order: None for success, the exception that ended it otherwise (the outcome rules above
apply to it). Raising fails every context of the batch with that exception."""


class Handlers(Mapping[str, Handler]):
    """The handlers a worker can run, by the name a schedule's spec gives (``spec.handler``).

    >>> handlers = Handlers()
    >>> @handlers.register("send-report")
    ... def send_report(ctx: Context) -> None: ...

    A plain ``dict`` of name -> callable works wherever ``Handlers`` does
    (:meth:`of` converts it). Registering a name twice is an error.
    """

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._by_name: dict[str, Handler] = {}
        self._fast: dict[str, BatchHandler] = {}  # inline and batch handlers, in their batch form
        for name, fn in (handlers or {}).items():
            self.add(name, fn)

    @classmethod
    def of(cls, handlers: Handlers | Mapping[str, Handler]) -> Handlers:
        return handlers if isinstance(handlers, Handlers) else cls(handlers)

    def add(self, name: str, fn: Handler, *, inline: bool = False) -> None:
        """Register ``fn`` under ``name``; ``inline``: run it on the consumer thread (see the module
        docstring)."""
        self._check(name, fn)
        self._by_name[name] = fn
        if inline:
            self._fast[name] = functools.partial(_one_by_one, fn)

    def add_batch(self, name: str, fn: BatchHandler) -> None:
        """Register the batch handler ``fn`` under ``name`` (see :data:`BatchHandler`)."""
        self._check(name, fn)
        self._by_name[name] = functools.partial(_single, fn)
        self._fast[name] = fn

    def fast(self, name: str) -> BatchHandler | None:
        """The batch form of ``name`` if it is registered inline or as a batch handler, else None."""
        return self._fast.get(name)

    @property
    def has_fast(self) -> bool:
        return bool(self._fast)

    def _check(self, name: str, fn: object) -> None:
        if not isinstance(name, str) or not name:
            raise HandlerError(f"handler name {name!r}: must be a non-empty string (the spec's handler)")
        if not callable(fn):
            raise HandlerError(f"handler {name!r}: {fn!r} is not callable; register a function(ctx)")
        if name in self._by_name:
            raise HandlerError(f"handler {name!r} is registered twice; give each handler its own name")

    def register(self, name: str, *, inline: bool = False) -> Callable[[Handler], Handler]:
        """Decorator: ``@handlers.register("name")`` adds the function and returns it unchanged."""

        def deco(fn: Handler) -> Handler:
            self.add(name, fn, inline=inline)
            return fn

        return deco

    def register_batch(self, name: str) -> Callable[[BatchHandler], BatchHandler]:
        """Decorator: ``@handlers.register_batch("name")`` adds a :data:`BatchHandler`."""

        def deco(fn: BatchHandler) -> BatchHandler:
            self.add_batch(name, fn)
            return fn

        return deco

    def __getitem__(self, name: str) -> Handler:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """How an attempt ended, as it goes into the final report."""

    kind: AttemptReportKind | AttemptReportKindSymbol  # SUCCEEDED | FAILED
    retryable: bool | None = None
    error_class: str | None = None
    error_message: str | None = None

    @property
    def label(self) -> str:
        """The metrics label: succeeded, retryable, permanent, canceled or unknown_handler."""
        if self.kind == AttemptReportKind.SUCCEEDED:
            return "succeeded"
        if self.error_class == CANCELED_CLASS:
            return "canceled"
        if self.error_class == UNKNOWN_HANDLER_CLASS:
            return "unknown_handler"
        return "retryable" if self.retryable else "permanent"


def _one_by_one(fn: Handler, contexts: Sequence[Context]) -> list[BaseException | None]:
    """An inline handler in batch form: each context on its own, its exception its outcome."""
    out: list[BaseException | None] = []
    for ctx in contexts:
        try:
            fn(ctx)
            out.append(None)
        except BaseException as exc:  # a handler's exit() must not end the consumer thread
            out.append(exc)
    return out


def _single(fn: BatchHandler, ctx: Context) -> None:
    """A batch handler called with one context (where a plain handler is expected)."""
    result = fn([ctx])
    if result is not None and result[0] is not None:
        raise result[0]


SUCCEEDED = Outcome(kind=AttemptReportKind.SUCCEEDED.value)
MAX_MESSAGE = 1000


def canceled(reason: str) -> Outcome:
    return Outcome(
        kind=AttemptReportKind.FAILED.value, retryable=False, error_class=CANCELED_CLASS, error_message=reason
    )


def error_class_name(exc: BaseException) -> str:
    """``module.QualName`` of the exception's class; builtins without the module (``ValueError``)."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def outcome_of(exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc`` (see the module docstring)."""
    if isinstance(exc, Canceled):
        return canceled(str(exc)[:MAX_MESSAGE] or "canceled")
    return Outcome(
        kind=AttemptReportKind.FAILED.value,
        retryable=not isinstance(exc, PermanentError),
        error_class=error_class_name(exc),
        error_message=str(exc)[:MAX_MESSAGE],
    )
