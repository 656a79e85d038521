"""The worker SDK (DESIGN.md §5): run registered handlers for one tenant's occurrences.

>>> from scheduler.worker import Handlers, Context, PermanentError, Worker
>>> handlers = Handlers()
>>> @handlers.register("send-report")
... def send_report(ctx: Context) -> None:
...     if not ctx.payload:
...         raise PermanentError("empty payload")
...     deliver(ctx.occurrence_id, ctx.payload)      # occurrence_id: the idempotency key
>>> Worker(settings, tenant="demo", handlers=handlers).run()   # until stop() / SIGTERM

What a worker does, per dispatch record of ``ksched.dispatch.<tenant>``
(consumer group ``<namespace>.tenant.<tenant>.worker``, read_committed):

1. decode it (a malformed record is logged, counted and skipped);
2. recheck against the local view of ``ksched.versions.<tenant>``: a stale,
   canceled or paused occurrence is not run and is reported ``FAILED`` with
   ``error_class="ksched.Canceled"`` (:data:`CANCELED_CLASS`);
3. report ``STARTED`` with a fresh fencing token, ``HEARTBEAT`` every
   ``heartbeat_s`` while the handler runs, then ``SUCCEEDED`` or ``FAILED``
   (retryable unless :class:`PermanentError`) to ``ksched.commands.<tenant>``;
   a *fast* handler (``register(name, inline=True)`` or ``register_batch(name)``)
   runs a consumed batch on the consumer thread and sends only the final report,
   carrying its start time (docs/contract.md §7);
4. commit the partition's offset up to its lowest unfinished record, only
   after that record's final report was acknowledged.

At most ``concurrency`` plain handlers run at once; redelivery after a crash or a
rebalance is expected, so a handler must make its side effect idempotent on
``ctx.occurrence_id``.
"""

from __future__ import annotations

from scheduler.worker.errors import TopicMissingError, WorkerConfigError
from scheduler.worker.handlers import (
    CANCELED_CLASS,
    UNKNOWN_HANDLER_CLASS,
    BatchHandler,
    Canceled,
    Context,
    Handler,
    HandlerError,
    Handlers,
    PermanentError,
    RetryableError,
)
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.runtime import Worker

__all__ = [
    "CANCELED_CLASS",
    "UNKNOWN_HANDLER_CLASS",
    "BatchHandler",
    "Canceled",
    "Context",
    "Handler",
    "HandlerError",
    "Handlers",
    "PermanentError",
    "RetryableError",
    "TopicMissingError",
    "Worker",
    "WorkerConfigError",
    "WorkerMetrics",
]
