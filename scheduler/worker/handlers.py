"""What a handler sees: the registry, the :class:`Context` and the outcome exceptions.

A handler is any callable ``handler(ctx: Context) -> object``; its return value
is ignored. Its outcome is decided by how it ends:

- returns                       -> ``SUCCEEDED``
- raises :class:`PermanentError` -> ``FAILED`` retryable=False (no retry: DEAD, DLQ)
- raises :class:`Canceled`       -> ``FAILED`` retryable=False, error_class ``ksched.Canceled``
  (what :meth:`Context.raise_if_cancelled` raises)
- raises anything else (including :class:`RetryableError`) -> ``FAILED`` retryable=True

Retries are the processor's decision (DESIGN.md §5): a worker only reports.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator, Mapping
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
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    _reason: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def scheduled_for(self) -> dt.datetime:
        """The nominal scheduled instant as an aware UTC datetime."""
        return _EPOCH + dt.timedelta(milliseconds=self.scheduled_for_ms)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why the flag was set (e.g. ``"schedule canceled"``), or None."""
        return self._reason[0] if self._reason else None

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Canceled` (reported as ``ksched.Canceled``) if the flag is set."""
        if self._cancel.is_set():
            raise Canceled(self.cancel_reason or "canceled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on cancellation; returns :attr:`cancelled`."""
        return self._cancel.wait(timeout)

    def cancel(self, reason: str) -> None:
        """Set the flag (the worker calls this; the first reason is kept)."""
        if not self._reason:
            self._reason.append(reason)
        self._cancel.set()


Handler: TypeAlias = Callable[[Context], object]


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
        for name, fn in (handlers or {}).items():
            self.add(name, fn)

    @classmethod
    def of(cls, handlers: Handlers | Mapping[str, Handler]) -> Handlers:
        return handlers if isinstance(handlers, Handlers) else cls(handlers)

    def add(self, name: str, fn: Handler) -> None:
        if not isinstance(name, str) or not name:
            raise HandlerError(f"handler name {name!r}: must be a non-empty string (the spec's handler)")
        if not callable(fn):
            raise HandlerError(f"handler {name!r}: {fn!r} is not callable; register a function(ctx)")
        if name in self._by_name:
            raise HandlerError(f"handler {name!r} is registered twice; give each handler its own name")
        self._by_name[name] = fn

    def register(self, name: str) -> Callable[[Handler], Handler]:
        """Decorator: ``@handlers.register("name")`` adds the function and returns it unchanged."""

        def deco(fn: Handler) -> Handler:
            self.add(name, fn)
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
