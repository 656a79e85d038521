"""Running one occurrence of a plain handler on the pool: recheck, STARTED, the handler with heartbeats,
the final report (fast handlers run on the consumer thread instead: scheduler/worker/fast.py).

The order for each job, on a pool thread::

    1. register the Context for cooperative cancellation (before the recheck,
       so a version record applied in between still reaches it);
    2. recheck against the versions view: stale, canceled, paused, or pending
       through a pause -> final report FAILED ksched.Canceled, handler not called;
    3. unknown handler name -> final report FAILED retryable ksched.UnknownHandler;
    4. STARTED with a fresh fencing token, heartbeats on;
    5. the handler; its outcome (``handlers.outcome_of``);
    6. heartbeats off, the final report (same token).

A job is *done* for the offset tracker only when its final report is
acknowledged by Kafka (:class:`~scheduler.worker.reports.FinalReports`: from the
report's delivery callback, on the thread that polls the producer, the consumer
thread). A report that failed delivery is produced again by
:meth:`Executor.resend_failed`. So an offset is never committed before its report is
durable; a crash in between re-runs the handler, which the idempotency store makes safe.

Pool threads are daemons: a handler that ignores cancellation and outlives
the shutdown grace does not keep the process alive.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from scheduler.records import Occurrence
from scheduler.vocabulary import AttemptReportKind
from scheduler.worker.handlers import (
    SUCCEEDED,
    UNKNOWN_HANDLER_CLASS,
    Canceled,
    Context,
    Handlers,
    Outcome,
    PermanentError,
    RetryableError,
    canceled,
    outcome_of,
)
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.reports import FinalReports, Heartbeats, Reporter, now_ms
from scheduler.worker.view import VersionState, VersionsView, verdict

log = logging.getLogger("ksched.worker")


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One consumed dispatch record to run."""

    partition: int
    offset: int
    epoch: int  # the assignment of ``partition`` it was consumed under (see PartitionProgress)
    occurrence: Occurrence
    # The dispatch record's bytes from occurrence_id to scheduled_for_ms, which begin every report
    # (scheduler/records/report.py); empty when it was decoded the general way (older schema).
    ident: bytes = b""


class Executor:
    """A fixed pool of ``concurrency`` daemon threads running :class:`Job` s."""

    def __init__(
        self,
        *,
        handlers: Handlers,
        view: VersionsView,
        reporter: Reporter,
        heartbeats: Heartbeats,
        metrics: WorkerMetrics,
        concurrency: int,
        finals: FinalReports[Job],
    ) -> None:
        self._handlers = handlers
        self._view = view
        self._reporter = reporter
        self._beats = heartbeats
        self._metrics = metrics
        self.concurrency = concurrency
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._running: dict[str, set[Context]] = defaultdict(set)  # schedule_id -> contexts
        self._finals = finals
        self._freed = threading.Event()  # set whenever a job ends: wakes the consumer thread
        self.closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"handler-{i}", daemon=True) for i in range(concurrency)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    @property
    def in_flight(self) -> int:
        """Jobs submitted whose handler (or recheck) has not returned yet."""
        with self._lock:
            return self._in_flight

    @property
    def free(self) -> int:
        return self.concurrency - self.in_flight

    def wait_free(self, timeout: float) -> None:
        """Return once a handler slot is free, or after ``timeout`` seconds."""
        self._freed.clear()  # before the check: a job ending after it sets the event again
        if self.free <= 0:
            self._freed.wait(timeout)

    def submit(self, job: Job) -> None:
        with self._lock:
            self._in_flight += 1
        self._metrics.in_flight.labels(tenant=self._metrics.tenant).inc()
        self._queue.put(job)

    def close(self) -> None:
        """Stop taking jobs; a handler still running is abandoned and never reported
        (its offset stays uncommitted, so the occurrence is redelivered)."""
        self.closed = True
        with self._lock:
            running = [ctx for peers in self._running.values() for ctx in peers]
        for ctx in running:  # only now: during the grace a cancel would be reported as ksched.Canceled
            ctx.cancel("worker shutting down")
        for _ in self._threads:
            self._queue.put(None)

    def on_version(self, schedule_id: str, state: VersionState | None) -> None:
        """The view applied a record: flag running handlers of a now stale schedule."""
        with self._lock:
            contexts = list(self._running.get(schedule_id, ()))
        for ctx in contexts:
            reason = verdict(state, ctx.version, ctx.scheduled_for_ms)
            if reason is not None:
                log.info("cancelling running %s: %s", ctx.occurrence_id, reason)
                ctx.cancel(reason)

    def resend_failed(self) -> None:
        """Produce again the final reports whose delivery failed (consumer thread)."""
        self._finals.resend_failed()

    # -- pool threads -----------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if not self.closed:  # queued just before shutdown: left for redelivery
                    self._run(job)
            except Exception:  # reporting itself failed: leave the offset open for redelivery
                log.exception("job %s[%d]@%d could not be reported", job.occurrence.tenant, job.partition,
                              job.offset)
            finally:
                with self._lock:
                    self._in_flight -= 1
                self._metrics.in_flight.labels(tenant=self._metrics.tenant).dec()
                self._freed.set()

    def _run(self, job: Job) -> None:
        occ, token = job.occurrence, secrets.token_hex(16)
        ctx = Context(
            tenant=occ.tenant, schedule_id=occ.schedule_id, occurrence_id=occ.occurrence_id,
            attempt=occ.attempt, version=occ.version, scheduled_for_ms=occ.scheduled_for_ms,
            handler=occ.handler, payload=occ.payload, token=token, worker_id=self._reporter.worker_id,
            deadline_ms=occ.deadline_ms,
        )
        with self._lock:
            self._running[occ.schedule_id].add(ctx)
        try:
            outcome = self._attempt(job, ctx)
        finally:
            with self._lock:
                peers = self._running[occ.schedule_id]
                peers.discard(ctx)
                if not peers:
                    del self._running[occ.schedule_id]
        if self.closed:
            log.warning("%s finished (%s) after shutdown: not reported, it will be redelivered",
                        occ.occurrence_id, outcome.label)
            return
        self._metrics.outcome(outcome.label)
        if outcome.label == "canceled":
            self._metrics.canceled.labels(tenant=occ.tenant, reason=reason_label(outcome)).inc()
        self._finals.send(job, occ.schedule_id, self._reporter.build(occ, token, outcome.kind, outcome,
                                                                           ident=job.ident))

    def _attempt(self, job: Job, ctx: Context) -> Outcome:
        occ = job.occurrence
        reason = self._view.verdict(occ.schedule_id, occ.version, occ.scheduled_for_ms)
        if reason is not None:
            log.info("not running %s: %s", occ.occurrence_id, reason)
            return canceled(reason)
        fn = self._handlers.get(occ.handler)
        if fn is None:
            log.warning("no handler %r for %s (known: %s)", occ.handler, occ.occurrence_id,
                        ", ".join(sorted(self._handlers)) or "none")
            return Outcome(
                kind=AttemptReportKind.FAILED.value, retryable=True, error_class=UNKNOWN_HANDLER_CLASS,
                error_message=f"no handler named {occ.handler!r} on worker {self._reporter.worker_id}",
            )
        started_report = self._reporter.build(occ, ctx.token, AttemptReportKind.STARTED, ident=job.ident)
        self._reporter.send(occ.schedule_id, started_report)
        self._beats.add(occ, ctx.token)
        started = time.monotonic()
        self._metrics.lag_seconds.labels(tenant=occ.tenant).observe(
            max(0.0, (now_ms() - occ.scheduled_for_ms) / 1000)
        )
        try:
            fn(ctx)
            return SUCCEEDED
        except BaseException as exc:  # a handler's exit() or KeyboardInterrupt must not wedge a thread
            expected = isinstance(exc, RetryableError | PermanentError | Canceled)
            log.log(logging.INFO if expected else logging.WARNING, "handler %s failed on %s: %r",
                    occ.handler, occ.occurrence_id, exc, exc_info=not expected)
            return outcome_of(exc)
        finally:
            self._beats.remove(ctx.token)
            self._metrics.handler_seconds.labels(tenant=occ.tenant).observe(time.monotonic() - started)

def reason_label(outcome: Outcome) -> str:
    """A bounded label for the canceled counter (the message carries the version number)."""
    msg = outcome.error_message or ""
    for label in ("superseded", "canceled", "paused", "shutting down"):
        if label in msg:
            return label.replace(" ", "_")
    return "other"
