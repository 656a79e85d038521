"""The dispatch side of a worker: consume, run fast jobs / hand the rest to the pool, pause, commit.

Everything here runs on the worker's consumer thread: ``consume()`` (and the
rebalance callbacks it triggers), ``producer.poll()`` (and the report delivery
callbacks that mark offsets done) and the commits. So the per-partition
:class:`PartitionProgress` needs no lock. The commit order is written once, in
:meth:`Intake.commit`.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from scheduler.records import Occurrence, RecordDecodeError, decode
from scheduler.records.worker_scan import scan_occurrence
from scheduler.worker.execute import Executor, Job
from scheduler.worker.fast import FastRunner
from scheduler.worker.metrics import WorkerMetrics
from scheduler.worker.progress import PartitionProgress

log = logging.getLogger("ksched.worker")

COMMIT_EVERY_S = 0.1  # at most this often while running: a synchronous commit costs a round trip
MAX_BATCH = 2000  # records per consume(): a fast handler's batch
MAX_UNACKED = 20_000  # final reports produced and not yet acknowledged: consumption waits beyond
_REBALANCING = (
    KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID
)
MIN_PREFETCH = 256  # consumed records kept locally (not started): a few KB each at most


class Intake:
    """One worker's membership in ``<namespace>.tenant.<tenant>.worker`` on its dispatch topic."""

    def __init__(
        self, *, consumer: Consumer, producer: Producer, executor: Executor, fast: FastRunner,
        metrics: WorkerMetrics, topic: str, tenant: str, worker_id: str, revoke_wait_s: float,
    ) -> None:
        self.consumer, self.producer, self.executor, self.fast = consumer, producer, executor, fast
        self.metrics, self.topic, self.tenant, self.worker_id = metrics, topic, tenant, worker_id
        self.revoke_wait_s = revoke_wait_s
        self.progress: dict[int, PartitionProgress] = {}
        self.stopping = False
        self._epochs = itertools.count(1)
        self._backlog: deque[Job] = deque()  # consumed, not yet submitted
        self._batch: list[Job] = []  # consumed jobs of fast handlers, run at the end of consume
        self._paused: set[int] = set()
        self._last_commit = 0.0

    def subscribe(self) -> None:
        self.consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # -- the loop -----------------------------------------------------------------
    @property
    def prefetch(self) -> int:
        """Records held locally beyond the running ones, so that fast handlers do not wait
        for a fetch round trip after each resume."""
        return max(self.executor.concurrency, MIN_PREFETCH)

    @property
    def room(self) -> int:
        """Records this worker may still take: within the reports awaiting acknowledgment, and,
        while records wait for the pool (or only the pool runs handlers), within the free handler
        slots plus free prefetch slots."""
        acks = MAX_UNACKED - sum(len(p.submitted) for p in self.progress.values())
        if self._backlog or not self.fast.any:
            return min(acks, self.executor.free + self.prefetch - len(self._backlog))
        return acks

    def step(self) -> None:
        """One pass: consume, run the fast jobs, submit what fits to the pool, pause or resume,
        serve deliveries, commit."""
        ex = self.executor
        # Block in consume() only while waiting for records; with every handler busy (or
        # records queued locally) the wait is for a free slot instead: see the end of the pass.
        idle = 0.0 if self._backlog or ex.free <= 0 else 0.05
        for m in self.consumer.consume(num_messages=max(1, min(self.room, MAX_BATCH)), timeout=idle):
            self._take(m)
        if self._batch:
            batch, self._batch = self._batch, []
            for job in batch:
                self.progress[job.partition].submitted.add(job.offset)  # _take checked it is ours
            self.fast.run(batch)
        while self._backlog and ex.free > 0:
            job = self._backlog.popleft()
            prog = self.progress.get(job.partition)
            if prog is not None and prog.epoch == job.epoch:
                prog.submitted.add(job.offset)
                ex.submit(job)
        self._flow_control()
        self.producer.poll(0)  # report delivery callbacks: they mark offsets done
        ex.resend_failed()
        self.commit()
        if ex.free <= 0:
            ex.wait_free(0.05)

    def _take(self, m: Message) -> None:
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume error on %s: %s", self.topic, err)
            return
        p, off = m.partition() or 0, m.offset() or 0
        prog = self.progress.get(p)
        if prog is None or self.stopping or not prog.consumed(off):
            return  # not ours (any more), or shutting down: left for redelivery
        value = m.value() or b""
        try:
            scanned = scan_occurrence(value)
            if scanned is None:  # an older schema or the Confluent framing: the general decoder
                occ, ident = decode(value, Occurrence), b""
            else:
                occ, ident = scanned[0], value[10:scanned[1]]
            if occ.tenant != self.tenant:
                raise RecordDecodeError(f"occurrence of tenant {occ.tenant!r} on {self.tenant}'s topic")
        except RecordDecodeError as exc:
            log.warning("skipped malformed record %s[%d]@%d: %s", self.topic, p, off, exc)
            self.metrics.malformed.labels(tenant=self.tenant, topic="dispatch").inc()
            prog.finish(off)  # it can never run: counts as finished
            return
        job = Job(partition=p, offset=off, epoch=prog.epoch, occurrence=occ, ident=ident)
        (self._batch if self.fast.is_fast(occ.handler) else self._backlog).append(job)

    def _flow_control(self, *, stop: bool = False) -> None:
        """Pause fetching when the handlers are busy and the prefetch is full; keep polling
        meanwhile, so the member stays in the group. Resume once half the prefetch is free
        again (hysteresis: not one pause/resume per record), so the next records arrive
        before the handlers run dry."""
        room = self.room
        if stop or room <= 0:
            new = set(self.progress) - self._paused
            if new:
                self.consumer.pause([TopicPartition(self.topic, p) for p in new])
                self._paused |= new
                self.metrics.paused.labels(tenant=self.tenant).inc()
        elif self._paused and room >= max(1, self.prefetch // 2):
            tps = [TopicPartition(self.topic, p) for p in self._paused & set(self.progress)]
            self._paused.clear()
            self.consumer.resume(tps)
            self._wake_fetcher(tps)

    def _wake_fetcher(self, tps: list[TopicPartition]) -> None:
        """Seek resumed partitions to where they are. librdkafka's fetcher notices a resume
        only at its next idle wake-up, up to 1 s later when every partition was paused; a
        seek wakes it at once. Position = the next offset to read, so nothing is skipped or
        repeated; a partition not read yet (no position) starts from the committed offset."""
        try:
            for tp in self.consumer.position(tps):
                if tp.offset >= 0:
                    self.consumer.seek(tp)
        except KafkaException as exc:  # e.g. revoked meanwhile: the next fetch decides
            log.debug("seek after resume: %s", exc)

    def done(self, job: Job) -> None:
        """``job``'s final report was acknowledged by Kafka: its offset is finished."""
        prog = self.progress.get(job.partition)
        if prog is not None and prog.epoch == job.epoch:
            prog.submitted.discard(job.offset)
            prog.finish(job.offset)

    def commit(self, partitions: set[int] | None = None, *, force: bool = False) -> None:
        """Commit each partition up to its lowest unfinished offset. The only commit order:

        1. a job's final report is produced (by a pool thread, or by the fast batch it ran in);
           until it is acknowledged the job's offset stays *submitted*, unfinished;
        2. the broker acknowledges the report: its delivery callback (:meth:`done`, on this
           thread, from ``producer.poll``) finishes the offset; a failed delivery is produced
           again and step 2 waits for it;
        3. here (at most every ``COMMIT_EVERY_S``; forced at a revocation and at close) each
           partition is committed up to its lowest consumed offset not finished, so a batch's
           offsets are committed only after every report of it, and of all before it, was
           acknowledged.

        A crash between 2 and 3 re-runs the handlers (idempotency store); never the reverse."""
        now = time.monotonic()
        if not force and now - self._last_commit < COMMIT_EVERY_S:
            return
        offsets = []
        for p, prog in self.progress.items():
            point = prog.to_commit()
            if point is not None and (partitions is None or p in partitions):
                offsets.append(TopicPartition(self.topic, p, point))
        if not offsets:
            return
        self._last_commit = now
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            where = ", ".join(f"[{tp.partition}]@{tp.offset}" for tp in offsets)
            # A rebalance under way: the next pass retries what is still ours; for a partition
            # being revoked the records after the last good commit are redelivered (safe).
            level = logging.INFO if err.code() in _REBALANCING else logging.WARNING
            log.log(level, "offset commit %s failed: %s", where, err.str())
            return
        for tp in result or offsets:
            moved = self.progress.get(tp.partition)
            if moved is not None and tp.error is None:
                moved.committed = tp.offset
        self.metrics.commits.labels(tenant=self.tenant).inc()

    # -- rebalance ------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.progress[tp.partition] = PartitionProgress(epoch=next(self._epochs))
        if partitions:
            log.info("worker %s assigned %s", self.worker_id, sorted(tp.partition for tp in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Give up ``partitions``:

        1. drop their jobs not yet started (the next owner reads them from the commit);
        2. commit what finished, at once, while this member's generation is surely current;
        3. let their running handlers finish (up to ``revoke_wait_s``; not while stopping) and
           commit again. Waiting delays only this rebalance (cooperative) and spares the next
           owner a concurrent duplicate run. The second commit can fail with ILLEGAL_GENERATION
           when another member's join bumps the generation meanwhile (librdkafka #4059): those
           occurrences are then redelivered, which DESIGN.md §5 makes safe.
        """
        gone = {tp.partition for tp in partitions}
        if not gone:
            return
        self._backlog = deque(j for j in self._backlog if j.partition not in gone)
        log.info("worker %s: %s revoked", self.worker_id, sorted(gone))
        self.commit(gone, force=True)
        if not self.stopping and any(self._submitted_on(p) for p in gone):
            self.drain(lambda: any(self._submitted_on(p) for p in gone), self.revoke_wait_s)
            self.commit(gone, force=True)
        self._forget(gone)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Ownership already gone (session timeout): a commit would fail; just forget."""
        gone = {tp.partition for tp in partitions}
        log.warning("worker %s lost %s", self.worker_id, sorted(gone))
        self._backlog = deque(j for j in self._backlog if j.partition not in gone)
        self._forget(gone)

    def _forget(self, gone: set[int]) -> None:
        for p in gone:
            self.progress.pop(p, None)
        self._paused -= gone

    def _submitted_on(self, p: int) -> bool:
        prog = self.progress.get(p)
        return prog is not None and bool(prog.submitted)

    def drain(self, busy: Callable[[], bool], within_s: float, *, serve_group: bool = False) -> None:
        """Serve report deliveries (and, if asked, the group) until ``busy()`` is false
        or ``within_s`` passed."""
        deadline = time.monotonic() + within_s
        while busy() and time.monotonic() < deadline:
            if serve_group:
                self.consumer.consume(num_messages=1, timeout=0)  # ignored by stopping: not tracked
            self.producer.poll(0.05)
            self.executor.resend_failed()

    # -- shutdown -------------------------------------------------------------------
    def stop_taking(self) -> None:
        """Stop consuming: drop jobs not yet started (left uncommitted) and pause every partition."""
        self.stopping = True
        self._backlog.clear()
        try:
            self._flow_control(stop=True)
        except KafkaException as exc:
            log.warning("pause at shutdown failed: %s", exc)

    def close(self) -> None:
        """Deliver the reports of what finished, commit it, leave the group. Reports still
        undelivered after that are logged: their offsets were not committed, so their
        occurrences run again on the next owner (the idempotency store dedupes the effect)."""
        self.producer.flush(10)
        self.commit(force=True)
        self.consumer.close()  # the revocation it triggers commits nothing new
        # The closed consumer keeps this intake's rebalance callbacks: without this, the pair is a
        # cycle that only a collection frees (never, after gc.freeze()), and the producer with it.
        del self.consumer
        left = self.producer.flush(5)
        if left:
            log.warning("worker %s: %d reports undelivered at shutdown; their occurrences will run "
                        "again elsewhere", self.worker_id, left)
