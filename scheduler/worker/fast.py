"""Fast handlers (inline or batch) run on the consumer thread, a consumed batch at a time.

The order for each batch, on the consumer thread (no thread hop, no lock per record)::

    1. recheck every job against the versions view, in memory: stale, canceled, paused, or
       pending through a pause -> final report FAILED ksched.Canceled, handler not called;
    2. group the rest by handler and call each handler's batch form once
       (``Handlers.fast``), noting the start time;
    3. one final report per job, the start time and a fresh token in it, and no ``STARTED``
       before it: the attempt ends well within its lease, so the final report alone carries
       what fencing needs (docs/contract.md §7);
    4. the final reports produced as one ``AttemptReports`` record per dispatch partition
       (:meth:`~scheduler.worker.reports.FinalReports.send_batch`), in job order: those of
       step 1 before the first handler is called, each handler's once it returned.

A job is *done* for the offset tracker when its final report is acknowledged
(:class:`~scheduler.worker.reports.FinalReports`), exactly as for a pool job.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Sequence

from scheduler.worker.execute import Job, reason_label
from scheduler.worker.handlers import (
    SUCCEEDED,
    Context,
    HandlerError,
    Handlers,
    Outcome,
    canceled,
    outcome_of,
)
from scheduler.worker.metrics import WorkerMetrics, observe_many
from scheduler.worker.reports import FinalReports, Reporter, now_ms
from scheduler.worker.view import VersionsView, verdict

log = logging.getLogger("ksched.worker")

SLOW_BATCH_S = 1.0  # a fast handler's batch longer than this is logged: it holds up consumption
SLOW_LOG_EVERY_S = 60.0  # at most one such line per minute: a loaded machine would log every batch


class FastRunner:
    """Runs the jobs of fast handlers on the consumer thread (see the module docstring)."""

    def __init__(
        self, *, handlers: Handlers, view: VersionsView, reporter: Reporter, finals: FinalReports[Job],
        metrics: WorkerMetrics, batch_reports: bool = True,
    ) -> None:
        self._handlers, self._view, self._reporter, self._finals = handlers, view, reporter, finals
        self._metrics = metrics
        self._batch_reports = batch_reports  # False: step 4 sends each report as its own record
        tenant = metrics.tenant
        # labels() looks a child up under a lock on every call: resolve the fixed ones once
        self._lag = metrics.lag_seconds.labels(tenant=tenant)
        self._seconds = metrics.handler_seconds.labels(tenant=tenant)
        self._succeeded = metrics.handled.labels(tenant=tenant, outcome="succeeded")
        self._slow_logged = -SLOW_LOG_EVERY_S
        # The batch's final reports by dispatch partition: its jobs and their reports, in order
        self._pending: dict[int, tuple[list[Job], list[bytes]]] = {}

    def is_fast(self, handler: str) -> bool:
        return self._handlers.fast(handler) is not None

    @property
    def any(self) -> bool:
        """Whether any handler is fast (else every job goes to the pool)."""
        return self._handlers.has_fast

    def run(self, jobs: Sequence[Job]) -> None:
        """Steps 1-4 of the module docstring for ``jobs`` (consumer thread)."""
        self._pending.clear()
        try:
            self._run(jobs)
        finally:  # what was decided is reported, also when a step raised (a bug) midway
            self._flush()

    def _flush(self) -> None:
        """Step 4 for the final reports decided since the last flush."""
        pending, self._pending = self._pending, {}
        for partition, (done, values) in pending.items():
            if self._batch_reports:
                self._finals.send_batch(done, partition, values, polling=True)
                continue
            for job, value in zip(done, values, strict=True):
                self._finals.send(job, job.occurrence.schedule_id, value, polling=True)

    def _run(self, jobs: Sequence[Job]) -> None:
        prefix = os.urandom(12).hex()  # + the job's index: a fresh, unique token per attempt
        groups: dict[str, list[tuple[Job, Context]]] = {}
        worker_id = self._reporter.worker_id
        states = self._view.states([job.occurrence.schedule_id for job in jobs])
        for i, job in enumerate(jobs):
            occ = job.occurrence
            token = f"{prefix}{i:08x}"
            reason = verdict(states[i], occ.version, occ.scheduled_for_ms)
            if reason is not None:
                log.info("not running %s: %s", occ.occurrence_id, reason)
                self._final(job, token, canceled(reason), None)
                continue
            groups.setdefault(occ.handler, []).append((job, Context(
                tenant=occ.tenant, schedule_id=occ.schedule_id, occurrence_id=occ.occurrence_id,
                attempt=occ.attempt, version=occ.version, scheduled_for_ms=occ.scheduled_for_ms,
                handler=occ.handler, payload=occ.payload, token=token, worker_id=worker_id,
                deadline_ms=occ.deadline_ms,
            )))
        self._flush()  # step 1's: not held while the handlers run
        for name, items in groups.items():
            self._call(name, items)
            self._flush()

    def _call(self, name: str, items: list[tuple[Job, Context]]) -> None:
        fn = self._handlers.fast(name)
        assert fn is not None  # only fast handlers' jobs come here (Intake routes them)
        started_ms, started = now_ms(), time.monotonic()
        contexts = [ctx for _, ctx in items]
        try:
            results = fn(contexts)
        except BaseException as exc:  # the whole batch failed with it
            log.warning("batch handler %s failed on %d occurrences: %r", name, len(items), exc)
            results = [exc] * len(items)
        if results is not None and len(results) != len(items):
            wrong = HandlerError(f"batch handler {name!r} returned {len(results)} results for {len(items)} "
                                 "occurrences: return None or one entry per context, in order")
            log.warning("%s", wrong)
            results = [wrong] * len(items)
        elapsed = time.monotonic() - started
        self._seconds.observe(elapsed)
        if elapsed > SLOW_BATCH_S and started - self._slow_logged >= SLOW_LOG_EVERY_S:
            self._slow_logged = started
            log.warning("fast handler %s took %.1fs for %d occurrences, holding up consumption: register "
                        "it as a plain handler if it can block", name, elapsed, len(items))
        # a burst's occurrences share a few instants: one observation per distinct one
        for due, n in Counter([job.occurrence.scheduled_for_ms for job, _ in items]).items():
            observe_many(self._lag, max(0.0, (started_ms - due) / 1000), n)
        ok = 0
        for k, (job, ctx) in enumerate(items):
            exc_k = None if results is None else results[k]
            if exc_k is None:
                ok += 1
                self._final(job, ctx.token, SUCCEEDED, started_ms, count=False)
            else:
                self._final(job, ctx.token, outcome_of(exc_k), started_ms)
        self._succeeded.inc(ok)

    def _final(self, job: Job, token: str, outcome: Outcome, started_ms: int | None, *,
               count: bool = True) -> None:
        occ = job.occurrence
        if count:
            self._metrics.outcome(outcome.label)
            if outcome.label == "canceled":
                self._metrics.canceled.labels(tenant=occ.tenant, reason=reason_label(outcome)).inc()
        value = self._reporter.build(occ, token, outcome.kind, outcome, started_at_ms=started_ms,
                                     ident=job.ident)
        pending = self._pending.get(job.partition)
        if pending is None:
            pending = self._pending[job.partition] = ([], [])
        pending[0].append(job)
        pending[1].append(value)
