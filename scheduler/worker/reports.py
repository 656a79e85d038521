"""Attempt reports to ``ksched.commands.<tenant>`` and the heartbeat thread (DESIGN.md §5).

Reports are keyed by ``schedule_id`` and produced with the shared idempotent
producer (``murmur2_random``), so they land on the same partition as the
schedule's commands and its processor shard. The final reports of a fast batch's
jobs go as ``AttemptReports`` records, one per dispatch partition they were consumed
from: the processor writes a schedule's dispatch records to its shard's partition,
so that partition is every one of those schedules' partition of the commands topic.
One producer serves every thread of the worker (confluent-kafka producers are
thread-safe); delivery callbacks run on the thread that polls it, which is the
worker's consumer thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from confluent_kafka import KafkaError, Message, Producer

from scheduler.records import AttemptReport, Occurrence, encode
from scheduler.records.report import ReportEncoder, batch_value
from scheduler.vocabulary import AttemptReportKind, AttemptReportKindSymbol
from scheduler.worker.handlers import Outcome

log = logging.getLogger("ksched.worker.reports")

Delivery = Callable[[KafkaError | None, Message], None]
# An AttemptReports record stays far below the processor's command limit (900 kB) and the
# producer's message limit (1 MB), whatever the error messages in it.
BATCH_BYTES = 256_000
J = TypeVar("J")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Reporter:
    """Builds and produces the :class:`AttemptReport` records of one worker."""

    def __init__(self, producer: Producer, topic: str, worker_id: str) -> None:
        self.producer = producer
        self.topic = topic
        self.worker_id = worker_id
        self._encoder = ReportEncoder(worker_id)

    def build(
        self, occ: Occurrence, token: str, kind: AttemptReportKind | AttemptReportKindSymbol,
        outcome: Outcome | None = None, started_at_ms: int | None = None, *, ident: bytes = b"",
    ) -> bytes:
        """The encoded report. ``ident``: the dispatch record's encoded leading fields
        (:attr:`scheduler.worker.execute.Job.ident`), copied into the report instead of encoding
        the record with fastavro; empty for an occurrence decoded the general way."""
        o = outcome or Outcome(kind=kind)
        if ident:
            return self._encoder.value(
                ident, occ.attempt, token, kind, now_ms(), retryable=o.retryable, error_class=o.error_class,
                error_message=o.error_message, started_at_ms=started_at_ms,
            )
        return encode(
            AttemptReport(
                occurrence_id=occ.occurrence_id,
                schedule_id=occ.schedule_id,
                tenant=occ.tenant,
                version=occ.version,
                scheduled_for_ms=occ.scheduled_for_ms,
                attempt=occ.attempt,
                token=token,
                kind=kind,
                retryable=o.retryable,
                error_class=o.error_class,
                error_message=o.error_message,
                worker_id=self.worker_id,
                reported_at_ms=now_ms(),
                started_at_ms=started_at_ms,
            )
        )

    def send(
        self, schedule_id: str | None, value: bytes, on_delivery: Delivery | None = None, *,
        partition: int = -1, polling: bool = False,
    ) -> None:
        """Produce one record, keyed by ``schedule_id`` (its partition the partitioner's), or
        unkeyed to ``partition`` (an ``AttemptReports`` record); waits (bounded) while the local
        queue is full. ``polling``: the caller is the consumer thread, which may serve delivery
        callbacks while it waits."""
        key = None if schedule_id is None else schedule_id.encode()
        deadline = time.monotonic() + 60
        while True:
            try:
                if on_delivery is None:
                    self.producer.produce(self.topic, value, key, partition=partition)
                else:
                    self.producer.produce(self.topic, value, key, partition=partition,
                                          on_delivery=on_delivery)
                return
            except BufferError:
                # The consumer thread polls the producer and drains the queue; never poll here,
                # or delivery callbacks would run on a handler thread.
                if time.monotonic() > deadline:
                    raise
                if polling:
                    self.producer.poll(0.05)
                else:
                    time.sleep(0.05)


class FinalReports(Generic[J]):
    """Final reports of jobs: ``on_done(job)`` once the broker acknowledged one (from the delivery
    callback, on the consumer thread); one whose delivery failed is produced again by
    :meth:`resend_failed`, so a job is never done before its report is durable. A record may
    carry the final reports of several jobs (:meth:`send_batch`): they are done together."""

    def __init__(self, reporter: Reporter, on_done: Callable[[J], None]) -> None:
        self._reporter = reporter
        self._on_done = on_done
        # (jobs, key, partition, value): appended by callbacks, swapped by resend_failed
        self._failed: list[tuple[tuple[J, ...], str | None, int, bytes]] = []
        self._lock = threading.Lock()

    def send(self, job: J, schedule_id: str, value: bytes, *, polling: bool = False) -> None:
        """Produce ``job``'s final report ``value`` keyed by its schedule id."""
        self._send((job,), schedule_id, -1, value, polling)

    def send_batch(self, jobs: Sequence[J], partition: int, values: Sequence[bytes], *,
                   polling: bool = False) -> None:
        """Produce the final reports ``values`` of ``jobs`` (in order) to ``partition`` of the
        commands topic, the partition of every one of their schedules, as ``AttemptReports``
        records of at most :data:`BATCH_BYTES` each (or of one report, when it is larger)."""
        start, size = 0, 0
        for i, v in enumerate(values):
            if size + len(v) > BATCH_BYTES and i > start:
                self._send(tuple(jobs[start:i]), None, partition, batch_value(values[start:i]), polling)
                start, size = i, 0
            size += len(v)
        if len(values) > start:
            self._send(tuple(jobs[start:]), None, partition, batch_value(values[start:]), polling)

    def _send(
        self, jobs: tuple[J, ...], key: str | None, partition: int, value: bytes, polling: bool
    ) -> None:
        on_done = self._on_done

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                for job in jobs:
                    on_done(job)
                return
            log.warning("final report of %d job(s) (%s) not delivered (%s): producing it again",
                        len(jobs), key or f"partition {partition}", err)
            with self._lock:
                self._failed.append((jobs, key, partition, value))

        self._reporter.send(key, value, delivered, partition=partition, polling=polling)

    def resend_failed(self) -> None:
        """Produce again the final reports whose delivery failed (consumer thread)."""
        if not self._failed:
            return
        with self._lock:
            failed, self._failed = self._failed, []
        for jobs, key, partition, value in failed:
            self._send(jobs, key, partition, value, True)


@dataclass(kw_only=True)
class _Beat:
    occ: Occurrence
    token: str
    due: float


class Heartbeats:
    """Sends ``HEARTBEAT`` every ``interval_s`` for each running attempt, from one thread."""

    def __init__(self, reporter: Reporter, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat_s = {interval_s}: must be positive (seconds between heartbeats)")
        self._reporter = reporter
        self._interval = interval_s
        self._running: dict[str, _Beat] = {}  # by token
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def add(self, occ: Occurrence, token: str) -> None:
        with self._lock:
            self._running[token] = _Beat(occ=occ, token=token, due=time.monotonic() + self._interval)

    def remove(self, token: str) -> None:
        with self._lock:
            self._running.pop(token, None)

    def _beat(self, beat: _Beat) -> None:
        try:
            report = self._reporter.build(beat.occ, beat.token, AttemptReportKind.HEARTBEAT)
            self._reporter.send(beat.occ.schedule_id, report)
            self.sent += 1
        except Exception as exc:  # a lost heartbeat is not fatal: the next one follows
            log.warning("heartbeat of %s failed: %s", beat.occ.occurrence_id, exc)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stopped:
            now = time.monotonic()
            # Produced under the lock: once remove() returned, no heartbeat of that attempt can
            # follow its final report on the partition. produce() only queues, so this is short.
            with self._lock:
                for beat in self._running.values():
                    if beat.due <= now:
                        beat.due = now + self._interval
                        self._beat(beat)
                soonest = min((b.due for b in self._running.values()), default=now + self._interval)
            # An attempt added while sleeping is due one interval after it started, never
            # before ``soonest`` was computed, so sleeping until ``soonest`` misses nothing.
            self._wake.wait(max(0.0, soonest - time.monotonic()))
