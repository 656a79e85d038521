"""The worker process: one tenant's dispatch topic in a consumer group, handlers on a pool
(fast ones on the consumer thread).

All Kafka consumer calls, rebalance callbacks, producer polls (hence report
delivery callbacks) and offset bookkeeping happen on the thread that calls
:meth:`Worker.run`; handlers, the heartbeat sender and the versions view run
on their own threads. The commit order is written once, in
:meth:`scheduler.worker.intake.Intake.commit`.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import secrets
import signal
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer

from scheduler.kafka.clients import consumer_config, producer
from scheduler.kafka.connection import KafkaConnection
from scheduler.principals import as_tenant
from scheduler.settings import Settings
from scheduler.tenant_registry import RegistryMissing, read_registry, tenants_topic
from scheduler.tenants import Tenant
from scheduler.topology import topic_name
from scheduler.worker.errors import WorkerConfigError
from scheduler.worker.execute import Executor, Job
from scheduler.worker.fast import FastRunner
from scheduler.worker.handlers import Handler, Handlers
from scheduler.worker.intake import Intake
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.reports import FinalReports, Heartbeats, Reporter
from scheduler.worker.view import VersionsView, partitions_of

log = logging.getLogger("ksched.worker")
DEFAULT_CONCURRENCY = 64  # handlers per process when neither --concurrency nor max_running says


class Worker:
    """Runs ``handlers`` for ``tenant``'s occurrences until :meth:`stop` (or SIGTERM/SIGINT).

    ``concurrency`` (default: the tenant's ``max_running``, or :data:`DEFAULT_CONCURRENCY`
    when it sets none) bounds the handlers running at once in this process: a local bound;
    the cluster-wide ``max_running`` is the processor's, at dispatch. ``grace_s`` is how long a stop or a
    partition revocation waits for running handlers before leaving their
    offsets uncommitted (redelivered elsewhere). ``heartbeat_s`` must stay well
    below the processor's lease (setting ``lease_s``). Raises
    :class:`WorkerConfigError` for a bad limit, or an unknown or disabled tenant of the
    injected ``tenants``; :meth:`run` raises it for missing topics and, without injected
    ``tenants``, for a tenant the registry (``ksched.tenants`` over the seed file) does not
    have or has disabled.

    ``freeze_gc``: once the versions view caught up and the clients started, :meth:`run` calls
    ``gc.collect()`` and ``gc.freeze()``, so the full collections that the reports awaiting
    acknowledgement trigger no longer walk the view's map of every schedule, the clients and
    the modules (docs/decisions.md, "the worker's cyclic GC"). Only for a process that runs
    nothing but this worker (``ksched worker`` sets it): every object then alive is frozen, and
    one that later becomes cyclic garbage is never collected.

    ``batch_reports``: the final reports of a fast handlers' batch go as one ``AttemptReports``
    record per dispatch partition (docs/contract.md §7); False sends each as its own
    ``AttemptReport``, for processors older than that record (upgrade processors first).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        tenant: str,
        handlers: Handlers | Mapping[str, Handler],
        concurrency: int | None = None,
        worker_id: str | None = None,
        grace_s: float = 30.0,
        heartbeat_s: float = 5.0,
        metrics: WorkerMetrics | None = None,
        tenants: Mapping[str, Tenant] | None = None,
        freeze_gc: bool = False,
        batch_reports: bool = True,
    ) -> None:
        self.settings, self.tenant = settings, tenant
        self.freeze_gc = freeze_gc
        self.batch_reports = batch_reports
        self._tenants = tenants  # None: the registry (ksched.tenants) is read when run() starts
        self._concurrency = concurrency
        self.concurrency = concurrency or 0  # the tenant's max_running unless given: set by the check
        if concurrency is not None and concurrency < 1:
            raise WorkerConfigError(f"concurrency = {concurrency}: must be at least 1")
        if tenants is not None:
            self._check_tenant(tenants)
        if grace_s < 0 or heartbeat_s <= 0:
            raise WorkerConfigError(
                f"grace_s = {grace_s}, heartbeat_s = {heartbeat_s}: grace must be >= 0, heartbeat > 0 seconds"
            )
        if heartbeat_s >= settings.lease_s:
            # the processor would expire the lease between two heartbeats and retry a running attempt
            raise WorkerConfigError(
                f"heartbeat_s = {heartbeat_s}: must be well below the setting lease_s = {settings.lease_s} "
                f"(e.g. {settings.lease_s / 6:g}), or raise KSCHED_LEASE_S"
            )
        self.handlers = Handlers.of(handlers)
        self.worker_id = worker_id or f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(3)}"
        self.grace_s, self.heartbeat_s = grace_s, heartbeat_s
        self.metrics = metrics or WorkerMetrics(tenant)
        # Under the tenant's group prefix: the only group ids its ACLs allow (scheduler.access).
        self.group_id = f"{settings.namespace}.tenant.{tenant}.worker"
        self.topic = topic_name(settings, "dispatch", tenant)
        self.view = VersionsView(settings, tenant, on_malformed=self._malformed_version)
        self._stop = threading.Event()
        self._abandon = threading.Event()  # a second signal: do not wait out the grace
        self._ready = threading.Event()
        self._intake: Intake | None = None
        self._beats: Heartbeats | None = None

    @functools.cached_property
    def conn(self) -> KafkaConnection:
        """The tenant's own principal (explicit ``sasl_username`` wins); its password is looked up
        when the worker first connects, not when it is made."""
        return as_tenant(self.settings, self.tenant)

    def _check_tenant(self, registry: Mapping[str, Tenant]) -> None:
        """The tenant must be registered and enabled; its ``max_running`` is the default concurrency."""
        t = registry.get(self.tenant)
        if t is None:
            raise WorkerConfigError(
                f"tenant {self.tenant!r} is not registered (not in the {tenants_topic(self.settings)} "
                f"topic nor the seed file {self.settings.tenants_file}); add it with "
                f"`ksched tenants add {self.tenant}`"
            )
        if not t.active:
            raise WorkerConfigError(
                f"tenant {self.tenant!r} is disabled: its schedules do not fire; enable it with "
                f"`ksched tenants enable {self.tenant}`, then start the worker"
            )
        default = t.max_running or DEFAULT_CONCURRENCY
        self.concurrency = self._concurrency if self._concurrency is not None else default
        if self.concurrency < 1:
            raise WorkerConfigError(
                f"concurrency = {self.concurrency} (tenant {self.tenant}'s max_running): must be at least 1; "
                f"pass --concurrency or `ksched tenants update {self.tenant} --max-running N`"
            )

    def _read_registry(self) -> None:
        """At start, without injected tenants: the registry as it is now (the worker does not follow
        it: a tenant disabled later keeps its running workers, which finish what was dispatched).
        Read as the worker's own principal (its tenant's ACLs allow reading the registry)."""
        try:
            self._check_tenant(read_registry(self.settings, conn=self.conn).target)
        except RegistryMissing as exc:
            raise WorkerConfigError(str(exc)) from None

    # -- lifecycle --------------------------------------------------------------
    def stop(self, *, abandon: bool = False) -> None:
        """Ask :meth:`run` to shut down (thread- and signal-safe). ``abandon``: do not wait
        for running handlers (a second SIGTERM/SIGINT does this)."""
        if abandon:
            self._abandon.set()
        self._stop.set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """True once the versions view caught up and the worker subscribed to its group
        (its partitions arrive with the group's next rebalance)."""
        return self._ready.wait(timeout)

    @property
    def assigned(self) -> set[int]:
        """The dispatch partitions this worker owns now."""
        return set(self._intake.progress) if self._intake is not None else set()

    def run(self) -> None:
        """Block until :meth:`stop`; on the main thread SIGTERM/SIGINT also stop it.

        Start-up: the versions view is read to its end before anything runs.
        Shutdown: stop consuming, wait up to ``grace_s`` for running handlers,
        deliver their reports, commit what finished, leave the group."""
        if self._tenants is None:
            self._read_registry()
        previous = self._install_signals()
        try:
            self.view.start()
            while not self.view.wait_caught_up(0.2):
                self._check_view()
                if self._stop.is_set():
                    return
            log.info("worker %s: versions view of %s caught up (%d schedules)",
                     self.worker_id, self.tenant, len(self.view))
            intake = self._start_clients()
            if self.freeze_gc:  # the view's map is filled by now: frozen with it (an empty dict is untracked)
                gc.collect()
                gc.freeze()
            self._ready.set()
            try:
                while not self._stop.is_set():
                    self._check_view()
                    intake.step()
            finally:
                self._shutdown(intake)
        finally:
            self.view.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _install_signals(self) -> dict[signal.Signals, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[signal.Signals, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: self.stop(abandon=self._stop.is_set()))
        return previous

    def _check_view(self) -> None:
        if self.view.error is not None:
            raise RuntimeError(
                f"versions view of tenant {self.tenant} failed: {self.view.error}; the worker stops "
                "rather than run occurrences unchecked (restart it)"
            )

    def _start_clients(self) -> Intake:
        client_id = f"ksched-worker-{self.worker_id}"
        commands = topic_name(self.settings, "commands", self.tenant)
        cfg = consumer_config(
            self.conn,
            self.group_id,
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1_000,
                # a revocation may wait grace_s for handlers inside the callback
                "max.poll.interval.ms": int(max(300.0, self.grace_s + 60) * 1000),
                "fetch.wait.max.ms": 50,
                "client.id": client_id,
            },
        )
        cons = Consumer(cfg)
        try:
            _same_partition_count(cons, self.topic, commands, self.tenant)
        except WorkerConfigError:
            cons.close()
            raise
        prod = producer(self.conn, **{"client.id": client_id})  # made once the topics are known good
        reporter = Reporter(prod, commands, self.worker_id)
        self._beats = beats = Heartbeats(reporter, self.heartbeat_s)
        finals: FinalReports[Job] = FinalReports(reporter, self._done)
        executor = Executor(
            handlers=self.handlers, view=self.view, reporter=reporter, heartbeats=beats,
            metrics=self.metrics, concurrency=self.concurrency, finals=finals,
        )
        fast = FastRunner(handlers=self.handlers, view=self.view, reporter=reporter, finals=finals,
                          metrics=self.metrics, batch_reports=self.batch_reports)
        self._intake = intake = Intake(
            consumer=cons, producer=prod, executor=executor, fast=fast, metrics=self.metrics,
            topic=self.topic, tenant=self.tenant, worker_id=self.worker_id, revoke_wait_s=self.grace_s,
        )
        self.view.set_on_change(executor.on_version)
        beats.start()
        executor.start()
        intake.subscribe()
        log.info("worker %s joined %s on %s (concurrency %d)", self.worker_id, self.group_id, self.topic,
                 self.concurrency)
        return intake

    def _done(self, job: Job) -> None:
        if self._intake is not None:
            self._intake.done(job)

    def _malformed_version(self) -> None:
        self.metrics.malformed.labels(tenant=self.tenant, topic="versions").inc()

    def _shutdown(self, intake: Intake) -> None:
        """Stop consuming, wait up to ``grace_s`` for running handlers, deliver their reports,
        commit what finished, leave the group. Still running after that: abandoned, their
        offsets uncommitted, so their occurrences are redelivered to another worker."""
        ex = intake.executor
        intake.stop_taking()
        log.info("worker %s stopping: waiting up to %.0fs for %d running handlers",
                 self.worker_id, self.grace_s, ex.in_flight)
        intake.drain(lambda: ex.in_flight > 0 and not self._abandon.is_set(), self.grace_s, serve_group=True)
        abandoned = ex.in_flight
        ex.close()
        if self._beats is not None:
            self._beats.stop()
        intake.close()
        # The clients go with their last reference: a stopped worker that its caller keeps (an
        # embedding service, a test) or that a gc.freeze() made uncollectable holds no producer,
        # its librdkafka threads or its connections. The view's callback held the executor.
        self.view.set_on_change(None)
        self._intake = self._beats = None
        if abandoned:
            log.warning("worker %s: %d handlers still running after the grace: their offsets stay "
                        "uncommitted and will be redelivered", self.worker_id, abandoned)
        log.info("worker %s stopped", self.worker_id)


def _same_partition_count(cons: Consumer, dispatch: str, commands: str, tenant: str) -> None:
    """Both topics exist with as many partitions: a report goes to the partition number of the
    dispatch partition its occurrence came from (an ``AttemptReports`` record, unkeyed, holds a
    partition's reports; docs/contract.md §7), which is its schedule's commands partition only
    when the counts agree. Raises :class:`WorkerConfigError` naming the fix otherwise."""
    got = len(partitions_of(cons, dispatch, tenant)), len(partitions_of(cons, commands, tenant))
    if got[0] != got[1]:
        raise WorkerConfigError(
            f"topic {dispatch} has {got[0]} partitions and {commands} {got[1]}: a schedule's reports "
            "must reach the commands partition of its dispatch partition's number; give both the "
            "same count (`ksched topics apply` creates them with the setting partitions; to change "
            "it, `ksched repartition` moves the namespace: docs/operations.md)"
        )
