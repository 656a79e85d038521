"""``Indexer``: the thin Kafka loop that feeds the history store (``ksched history``).

One consumer in the group ``<namespace>.history`` (many indexers may run: the group splits the
partitions), subscribed to ``<ns>.schedule-history``, ``<ns>.schedules`` and the regex of every
tenant's dispatch, occurrence-events, commands and dlq topics, so a new tenant's topics are picked up
live (librdkafka re-matches the regex at each metadata refresh, every
``topic.metadata.refresh.interval.ms``, 5 s here). ``read_committed``; cooperative rebalancing,
so a new tenant's partitions do not stop the others. Fetches take at most 64 KiB per partition (a
larger record comes whole), so in a replay one batch holds the same stretch of an occurrence's
dispatch, events and reports partitions, and its records merge into one row write instead of one each.

The loop, step by step:

1. consume up to ``max_batch`` records (waiting at most ``max_wait_s``);
2. map them into :class:`~scheduler.history.mapping.Batch` es of at most ``MAX_BATCH_BYTES`` of
   record values each (pure; bad records are skipped and counted, never raised): an
   ``OccurrenceEvents`` or ``AttemptReports`` record holds thousands of rows, so a count of
   records alone no longer bounds a database transaction;
3. :meth:`HistoryStore.apply`: the rows and the next offset of every partition read, in ONE
   database transaction -- on the :class:`~scheduler.history.writer.BatchWriter`'s thread, while
   this one consumes and maps the next batch (a rebalance first waits for the writer);
4. commit the same offsets to Kafka, asynchronously and only for monitoring (consumer lag):
   they are never read back.

On assignment each partition is positioned at the offset the *database* holds for it (the
beginning when it holds none), never at Kafka's committed offset: that is what makes a crash
anywhere exact -- the rows and the offsets are always of the same prefix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from scheduler.history.base import HistoryStore, TopicPartitionKey
from scheduler.history.mapping import Batch, Source, classify, subscription
from scheduler.history.metrics import HistoryMetrics
from scheduler.history.writer import BatchWriter, Job
from scheduler.kafka.clients import consumer as make_consumer
from scheduler.kafka.errors import denied, is_denial
from scheduler.principals import as_history
from scheduler.settings import Settings

log = logging.getLogger(__name__)

# A batch's record values, at most (one record more when a single one is larger): about what
# 16,000 records of one row each made, so a transaction stays ~16,000 rows with batched records.
MAX_BATCH_BYTES = 2_400_000

METADATA_REFRESH_MS = 5_000


def group_id(settings: Settings, name: str | None = None) -> str:
    """The indexers' consumer group: ``<namespace>.history``, or ``<namespace>.history.<name>`` for
    another set of indexers (another store): the history principal's groups (docs/security.md)."""
    return f"{settings.namespace}.history" + (f".{name}" if name else "")


@dataclass
class IndexerStats:
    """What a run did: records read, batches applied, records skipped by reason, and when the first
    batch arrived and the last was committed (``time.monotonic()``; 0 before any)."""

    records: int = 0
    batches: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    first_batch_at: float = 0.0
    last_batch_at: float = 0.0


class Indexer:
    """Replays the topics into ``store`` until :meth:`stop` (or, with ``until_end``, the end).

    ``until_end``: return once every assigned partition's position reached the high watermark
    it had when it was assigned (a replay or a benchmark; a long-running indexer never sets it).
    """

    def __init__(
        self,
        settings: Settings,
        store: HistoryStore,
        *,
        group: str | None = None,
        max_batch: int = 16_000,
        max_wait_s: float = 0.5,
        metrics: HistoryMetrics | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.settings, self.store = settings, store
        self.group = group_id(settings, group)
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.stats = IndexerStats()
        self.metrics = metrics or HistoryMetrics()
        self._sources: dict[str, tuple[Source, str | None] | None] = {}
        self._ends: dict[TopicPartitionKey, int] = {}
        self._next: dict[TopicPartitionKey, int] = {}  # the next offset the store holds, per partition
        self._stopping = False
        self._until_end = False
        self._kafka_offsets: Mapping[TopicPartitionKey, int] = {}
        self.writer = BatchWriter(store, self.group, self._applied)
        conn = as_history(settings)
        self.consumer_who = conn.who
        self.consumer: Consumer = make_consumer(
            conn, self.group,
            **{"partition.assignment.strategy": "cooperative-sticky",
               "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
               "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 65_536,
               # a fetch waits for 64 KB or 100 ms, not the first record: every transaction's
               # commit made one (~420 fetches/s at 840 creates/s); the store lags ≤ 0.1 s more
               "fetch.min.bytes": 65_536, "fetch.wait.max.ms": 100},
        )

    def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in hand (thread-safe: a flag)."""
        self._stopping = True

    def run(self, *, until_end: bool = False) -> IndexerStats:
        """Run the loop (module docstring) and close the consumer; returns the stats."""
        self._until_end = until_end
        self.consumer.subscribe(
            subscription(self.settings.namespace),
            on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke,
        )
        try:
            while not self._stopping:
                msgs = self.consumer.consume(self.max_batch, self.max_wait_s)
                if msgs:
                    self._submit(msgs)
                self._commit_to_kafka()
                if until_end and self._at_end():
                    break
            self.writer.drain()
        finally:
            self.writer.close()
            self.consumer.close()
        return self.stats

    def _submit(self, msgs: list[Message]) -> None:
        """Steps 2-3: map ``msgs`` into batches of at most ``MAX_BATCH_BYTES`` and hand each to the
        writer (which applies them in order)."""
        if not self.stats.first_batch_at:
            self.stats.first_batch_at = time.monotonic()
        for part in cut_by_bytes(msgs, MAX_BATCH_BYTES):
            batch, offsets = self._map(part, verify_ids=False)
            if offsets:
                self.writer.submit(Job(batch, offsets, partial(self._verified, part)))

    def _verified(self, msgs: list[Message]) -> Batch:
        """``msgs`` mapped again with every id checked (the writer's rebuild of a refused batch)."""
        return self._map(msgs, verify_ids=True)[0]

    def _commit_to_kafka(self) -> None:
        """Step 4, for monitoring only (lag): the offsets of the last committed batch, if new."""
        offsets, self._kafka_offsets = self._kafka_offsets, {}
        if not offsets:
            return
        try:
            self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=True
            )
        except KafkaException as exc:  # the database holds the truth
            log.debug("history: offset commit to Kafka failed: %s", exc)

    def _map(self, msgs: list[Message], *, verify_ids: bool) -> tuple[Batch, dict[TopicPartitionKey, int]]:
        batch = Batch(verify_ids=verify_ids)
        offsets: dict[TopicPartitionKey, int] = {}
        sources = self._sources
        add = batch.add
        for m in msgs:
            err = m.error()
            if err is not None:
                if is_denial(err):  # no retry makes an ACL appear: say which and stop
                    raise denied(self.consumer_who, err, self.group, "read")
                log.warning("history: consume error %s", err)
                continue
            topic = m.topic() or ""
            src = sources.get(topic, ...)
            if src is ...:
                src = sources[topic] = classify(self.settings.namespace, topic)
            offsets[(topic, m.partition() or 0)] = (m.offset() or 0) + 1
            if src is None:
                continue
            if src[0] is Source.DLQ:
                batch.add_dlq(src[1] or "", m.value(), m.partition() or 0, m.offset() or 0)
            else:
                add(src[0], src[1], m.value(), m.timestamp()[1])
        return batch, offsets

    def _applied(self, job: Job, batch: Batch, seconds: float) -> None:
        """On the writer's thread, after a commit: the stats, the skips logged, step 4."""
        self._next.update(job.offsets)
        now = time.monotonic()
        self.metrics.batch_seconds.observe(seconds)
        self.stats.records += batch.records
        self.stats.batches += 1
        self.stats.last_batch_at = now
        m = self.metrics
        m.records.inc(batch.records)
        m.batches.inc()
        m.last_commit.set_to_current_time()
        for table, rows in (("occurrences", batch.occurrences), ("attempts", batch.attempts),
                            ("schedules", batch.versions), ("schedule_changes", batch.changes),
                            ("dlq_entries", batch.dlq)):
            m.rows.labels(table=table).inc(len(rows))
        for reason, n in batch.skipped.items():
            self.stats.skipped[reason] = self.stats.skipped.get(reason, 0) + n
            m.skipped.labels(reason=reason).inc(n)
        for message in batch.errors:
            log.warning("history: skipped %s", message)
        self._kafka_offsets = job.offsets

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.writer.drain()  # the database's offsets must include every batch consumed so far
        stored = self.store.offsets(self.group)
        starts: dict[TopicPartitionKey, int] = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            tp.offset = stored.get(key, OFFSET_BEGINNING)
            self._next[key] = max(tp.offset, 0)
            new = key not in stored
            if not (new or self._until_end):
                continue  # one round trip a partition: only a new one or a run to the end needs it
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            except KafkaException:
                low, high = -1, -1  # unknown: not waited for, its start recorded with its first batch
            if self._until_end:
                self._ends[key] = high
            if new and low >= 0:
                starts[key] = low
        self._record_starts(starts)
        consumer.incremental_assign(partitions)
        if partitions:
            log.info("history: assigned %d partitions (from the database's offsets)", len(partitions))

    def _record_starts(self, starts: dict[TopicPartitionKey, int]) -> None:
        """Store where reading starts for partitions the database holds no offset of (their low
        watermark), before any record: the store then says this namespace is indexed even while
        its topics are empty -- readers answer "nothing yet", not "no indexer" (which an indexer
        of a new namespace would otherwise be until its first record)."""
        if starts:
            self.writer.submit(Job(Batch(), starts, Batch))
            self.writer.drain()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.writer.drain()
        for tp in partitions:
            self._ends.pop((tp.topic, tp.partition), None)
            self._next.pop((tp.topic, tp.partition), None)

    def _at_end(self) -> bool:
        """Every assigned partition's position reached its end as of its assignment."""
        assigned = self.consumer.assignment()
        if not assigned:
            return False
        for tp in self.consumer.position(assigned):
            key = (tp.topic, tp.partition)
            end = self._ends.get(key, -1)
            if end > 0 and max(tp.offset, self._next.get(key, 0)) < end:
                return False  # (the position passes a transaction's trailing commit marker)
        return True


def replay(
    settings: Settings, store: HistoryStore, *, from_beginning: bool, group: str | None = None,
    max_batch: int = 16_000,
) -> IndexerStats:
    """Run one indexer to the end of the topics (a rebuild when ``from_beginning``: the store is
    emptied first); returns its stats. Used by ``ksched history --until-end`` and the benchmark."""
    if from_beginning:
        store.reset()
    started = time.monotonic()
    stats = Indexer(settings, store, group=group, max_batch=max_batch).run(until_end=True)
    log.info("history: replayed %d records in %.1f s", stats.records, time.monotonic() - started)
    return stats


def cut_by_bytes(msgs: list[Message], max_bytes: int) -> list[list[Message]]:
    """``msgs`` in order, as consecutive runs of at most ``max_bytes`` of values each (a run of one
    when that one is larger)."""
    runs: list[list[Message]] = []
    run: list[Message] = []
    size = 0
    for m in msgs:
        n = len(m.value() or b"")
        if run and size + n > max_bytes:
            runs.append(run)
            run, size = [], 0
        run.append(m)
        size += n
    if run:
        runs.append(run)
    return runs
