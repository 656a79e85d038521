"""Standby shards: warm copies of the shards this processor does not own (issue 15, item 1).

The analogue of Kafka Streams' standby replicas. Without them a processor that is given a shard
(its owner died, or left) first reads the shard's ``ksched.state`` and ``ksched.schedules``
partitions from the start: about 17 s per million schedules, all of it after the group noticed
the death, so every strict occurrence of the shard due meanwhile is late. A warm copy has read
them already; the new owner reads only the tail written since.

How, in the processor's loop thread (the copies are touched by no other thread):

0. :meth:`Standby.warm_up`, before the processor joins the group: every shard read to its end,
   so that a restarted processor takes what it is given from warm copies too;
1. :meth:`Standby.follow`: keep a copy of every shard this processor does not own. A shard that
   is no longer owned (revoked, lost) starts a new copy from the beginning: an owned shard's
   memory is armed and moving, not what a reader of its records holds.
2. :meth:`Standby.poll`: apply what the copies' consumer has fetched, within a time budget, with
   the very code restore applies records with (:class:`~.restore.RecordApplier`): a copy at
   offsets O holds what a restore to O would.
3. :meth:`Standby.take`: at step 2 of :class:`~.ownership.Ownership`'s take, after the fence,
   the copy and the offsets it reached are handed over; restore reads from there to the end.

Which processor is given a shard is the group assignor's choice, and librdkafka runs only its
built-in assignors: none can prefer a processor holding a warm copy. So every processor keeps
every shard it does not own warm (``standby_replicas`` >= 1; 0 turns it off): with two
processors, the usual pair, that is exactly one standby per shard, and whoever takes a shard has
it warm. With more processors each shard has more copies than asked, at that memory's cost
(docs/operations.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from scheduler.kafka.reader import watermarks
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.restore import RecordApplier, RestoreStats, restore_consumer
from scheduler.processor.shard import Shard
from scheduler.settings import Settings

log = logging.getLogger("ksched.processor.standby")

BATCH = 2_000  # records per consume() while the budget lasts


@dataclass
class WarmCopy:
    """A shard read but not armed, and the next offset of each of its partitions read so far."""

    shard: Shard
    next: dict[tuple[str, int], int] = field(default_factory=dict)
    records: int = 0


class Standby:
    """The warm copies of one processor (module docstring)."""

    def __init__(
        self, settings: Settings, new_shard: Callable[[int], Shard], metrics: ProcessorMetrics | None = None
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.enabled = settings.standby_replicas > 0
        self.new_shard = new_shard
        self.copies: dict[int, WarmCopy] = {}
        self._shards: dict[int, Shard] = {}  # the copies' shards, as the applier reads them
        self._stats: dict[int, RestoreStats] = {}
        self._apply = RecordApplier(settings, self._shards, self._stats)
        self._consumer: Consumer | None = None
        self._tail: Consumer | None = None  # connected ahead: reads a taken copy's tail (step 3)

    def follow(self, owned: Collection[int]) -> None:
        """Step 1: a copy of every shard not in ``owned``; the copies of owned ones dropped."""
        if not self.enabled:
            return
        want = set(range(self.settings.partitions)).difference(owned)
        for p in sorted(want.difference(self.copies)):
            self._start(p)
        for p in sorted(set(self.copies).difference(want)):
            self._drop(p)

    def warm_up(self, timeout_s: float, stopping: Callable[[], bool] = lambda: False) -> int:
        """Before joining the group: a copy of every shard, each read to its end once, so that
        what the group then assigns is taken from a warm copy -- a restarted processor (a rolling
        restart) restores no shard from the start while another is left waiting for it. Returns
        the records read; gives up (logged) after ``timeout_s``, the copies staying warm."""
        if not self.enabled:
            return 0
        self.follow(owned=())
        pending = {(t, p) for t in self._apply.topics for p in self.copies}
        deadline = time.monotonic() + timeout_s
        n = 0
        while pending and time.monotonic() < deadline and not stopping():
            n += self._consume(0.2, 0.5, pending.discard)
        if pending:
            log.warning("standby: %d partitions not read to the end in %.0fs; joining anyway",
                        len(pending), timeout_s)
        elapsed = time.monotonic() - deadline + timeout_s
        if self.metrics is not None:  # a restore pass: with the tail read at the take, the shards' restore
            self.metrics.restore_wall_seconds.inc(elapsed)
        log.info("standby: %d shards warm (%d records) in %.2fs", len(self.copies), n, elapsed)
        return n

    def poll(self, budget_s: float) -> int:
        """Step 2: apply fetched records for at most about ``budget_s``; returns how many."""
        return self._consume(0, budget_s, None)

    def _consume(
        self, wait_s: float, budget_s: float, at_end: Callable[[tuple[str, int]], None] | None
    ) -> int:
        if not self.copies or self._consumer is None:
            return 0
        n = 0
        deadline = time.monotonic() + budget_s
        apply, copies = self._apply.apply, self.copies  # a warm-up runs this loop a million times
        while True:
            msgs = self._consumer.consume(BATCH, wait_s)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if at_end is not None:
                            at_end((m.topic() or "", m.partition() or 0))
                    else:
                        log.warning("standby: consume error: %s", err)
                    continue
                p, topic = m.partition() or 0, m.topic() or ""
                copy = copies.get(p)
                if copy is None:  # taken or dropped since it was fetched
                    continue
                apply(m, p, topic)
                copy.next[topic, p] = (m.offset() or 0) + 1
                copy.records += 1
                n += 1
            if len(msgs) < BATCH or time.monotonic() >= deadline:
                return n

    def take(self, p: int) -> WarmCopy | None:
        """Step 3: shard ``p``'s copy, handed over (no longer followed), or None."""
        copy = self.copies.get(p)
        if copy is not None:
            self._drop(p)
        return copy

    @property
    def tail_reader(self) -> Consumer | None:
        """A connected :func:`~.restore.restore_consumer` for reading taken copies' tails, if any."""
        return self._tail

    def close(self) -> None:
        for c in (self._consumer, self._tail):
            if c is not None:
                c.close()
        self._consumer = self._tail = None
        self.copies.clear()
        self._shards.clear()
        self._stats.clear()

    def _start(self, p: int) -> None:
        if self._consumer is None or self._tail is None:
            self._consumer = restore_consumer(self.settings)  # its end events serve warm_up
            self._tail = restore_consumer(self.settings)
        # Connected now to the partitions' leader, not at the take (asking costs a round trip).
        watermarks(self._tail, TopicPartition(self._apply.t_state, p), timeout_s=10)
        copy = WarmCopy(self.new_shard(p))
        self.copies[p], self._shards[p], self._stats[p] = copy, copy.shard, RestoreStats()
        self._consumer.incremental_assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for t in self._apply.topics]
        )
        log.info("standby: keeping shard %d warm", p)

    def _drop(self, p: int) -> None:
        del self.copies[p], self._shards[p], self._stats[p]
        assert self._consumer is not None
        self._consumer.incremental_unassign([TopicPartition(t, p) for t in self._apply.topics])
