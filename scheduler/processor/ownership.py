"""Shard ownership: the one path by which a processor takes and gives up shards.

Take (the group assigns partitions of ``ksched.shards``: partition p is shard p):

1. fence: per shard, a transactional producer (``transactional.id`` =
   ``<namespace>.processor.shard-<p>``) and ``init_transactions()``, every shard of an
   assignment at once: this fences the previous owner and aborts its open transaction,
   so ``read_committed`` readers are not held back by it;
2. restore: the shards from ``ksched.state`` (cursors, runtime state) and
   ``ksched.schedules``, ``read_committed``, to the end, in one pass over their
   partitions;
3. arm: every active schedule from the restored cursors; the shard is owned and
   ticks from the next loop;
4. resume: assign the shard's inputs, partition p of every registered tenant's
   ``ksched.commands.<tenant>`` (co-partitioned with the shard), from the group's
   committed offsets (a rebuild seeks there). A tenant registered later has its
   ``commands.<tenant>[p]`` added to every owned shard (:meth:`Ownership.follow_tenants`),
   a removed one's taken away.

Give up (revoked, lost, a failed tick, a fenced producer, a record that hit a bug, stop):

5. drop: close the shard and forget it; flush its producer unless it is kept; a
   revoked or lost shard's inputs are unassigned with it.
   No transaction is open: the rebalance callbacks assert it, and every other
   caller has just committed or aborted the shard's checkpoint, or closed it before
   its first write began one (or its producer is fenced, and nothing it wrote can
   become visible);
6. then, by why: revoked, lost or stopping: nothing more (whoever gets the shard
   fences us at its step 1). Rebuild (the tick aborted, or a record hit a bug and
   its answer is committed): steps 2-4 with the same producer (a new
   ``init_transactions`` could fence an owner we do not know we lost the shard
   to). Rejoin (fenced while the group still assigns the shard to us, or the
   abort failed): leave and rejoin the group, so that whoever the shard is given
   to starts again at step 1 (and fences the other).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from scheduler.kafka.clients import transactional_producer
from scheduler.kafka.errors import kafka_error
from scheduler.principals import as_processor
from scheduler.processor.heap import Heap
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.restore import restore_shards
from scheduler.processor.shard import Shard
from scheduler.processor.standby import Standby
from scheduler.settings import Settings
from scheduler.tenants import Tenant
from scheduler.topology import topic_name

log = logging.getLogger("ksched.processor")
# The next tick's AddOffsetsToTxn / AddPartitionsToTxn meets CONCURRENT_TRANSACTIONS while the
# coordinator still writes the last commit's markers (a few ms); librdkafka retries after
# retry.backoff.ms, 100 by default: 30-45 ms of every command tick went there (docs/api.md).
TXN_RETRY_BACKOFF_MS = 5


class Loss(enum.Enum):
    """Why a shard is given up (step 6 depends on it)."""

    REVOKED = "revoked"
    LOST = "lost"
    STOPPED = "stopped"
    ABORTED = "aborted"  # the tick's transaction was aborted: rebuild
    BUG = "bug"  # a record hit a bug; its answer is committed: rebuild
    FENCED = "fenced"  # another owner's init_transactions: rejoin if still assigned
    ABORT_FAILED = "abort failed"  # the producer is unusable: rejoin


_REBUILD = (Loss.ABORTED, Loss.BUG)


@dataclass
class OwnedShard:
    """A shard this processor owns, with the transactional producer that fenced its previous owner."""

    shard: Shard
    producer: Producer
    partition: TopicPartition  # shards[p]: p is the shard, and the partition of each of its inputs
    last_state_write: float = 0.0  # clock of the last shard state record (one at least every second)
    rebuild: bool = False  # a record hit a bug mid-apply: rebuild from Kafka once its answer is committed


class Ownership:
    """The shards owned (:attr:`owned`) and the group membership that decides them."""

    def __init__(
        self,
        settings: Settings,
        tenants: dict[str, Tenant],
        metrics: ProcessorMetrics,
        clock: Callable[[], float],
        heap: Heap,
        assert_no_transaction: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.tenants = tenants
        self.metrics = metrics
        self.clock = clock
        self.heap = heap
        self._assert_no_transaction = assert_no_transaction  # the checkpoints' guard (no import cycle)
        self.owned: dict[int, OwnedShard] = {}
        self.t_shards = topic_name(settings, "shards")
        self.group_id = f"{settings.namespace}.processor"
        self.consumer: Consumer | None = None
        self._rejoin = False
        self.assignments = 0  # assignments taken so far: one during a poll ends the poll (runtime)
        self._followed: frozenset[str] = frozenset()  # the tenants whose commands topics are read
        self.standby = Standby(settings, self._new_shard, metrics)  # warm copies of the shards not owned

    # -- group membership ---------------------------------------------------------
    def join(self, consumer: Consumer) -> None:
        """Subscribe ``consumer`` to the shards topic with this path as its rebalance callbacks."""
        self.consumer = consumer
        self._followed = frozenset(self.tenants)
        consumer.subscribe(
            [self.t_shards], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )

    def inputs(self, shards: list[int], tenants: frozenset[str] | None = None) -> list[TopicPartition]:
        """Partition p of each followed tenant's commands topic, for each p of ``shards``."""
        names = sorted(self._followed if tenants is None else tenants)
        return [TopicPartition(topic_name(self.settings, "commands", t), p) for t in names for p in shards]

    def follow_tenants(self) -> None:
        """Step 4 for tenants registered (or removed) since the last call: add (or take away) their
        commands topics' partitions of every owned shard, from the group's committed offsets. Called
        between polls, after the registry's poll, so a shard taken in the next poll's callback reads
        the same tenants."""
        now = frozenset(self.tenants)
        if now == self._followed:
            return
        added, removed = now - self._followed, self._followed - now
        self._followed = now
        if self.consumer is None or not self.owned:
            return
        shards = sorted(self.owned)
        if added:
            self.consumer.incremental_assign(self.inputs(shards, frozenset(added)))
            log.info("reading the commands of tenant(s) %s", ", ".join(sorted(added)))
        if removed:
            gone = {topic_name(self.settings, "commands", t) for t in removed}
            self.consumer.incremental_unassign([tp for tp in self.consumer.assignment() if tp.topic in gone])
            log.info("no longer reading the commands of tenant(s) %s", ", ".join(sorted(removed)))

    def rejoin_if_asked(self) -> None:
        """Step 6's rejoin, between polls: leave the group (dropping every shard) and join it again."""
        if not self._rejoin:
            return
        self._rejoin = False
        assert self.consumer is not None
        log.warning("leaving and rejoining group %s after a fenced shard", self.group_id)
        self._assert_no_transaction("rejoin")
        self.consumer.unsubscribe()  # revokes (and drops) every shard first
        self.join(self.consumer)

    # -- take: steps 1-4 ----------------------------------------------------------
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Steps 1-4 for the assigned shards."""
        self._assert_no_transaction("assign")
        if not partitions:
            return
        started = time.monotonic()
        self.metrics.restore_began([tp.partition for tp in partitions], time.time())
        producers = self._fence([tp.partition for tp in partitions])  # 1. fence
        log.info("fenced shard(s) %s in %.2fs", sorted(producers), time.monotonic() - started)
        self._restore(producers, started)
        # 4. resume (an offset-less partition starts at the group's committed offset).
        consumer.incremental_assign(partitions + self.inputs(sorted(producers)))
        self.assignments += 1

    def _fence(self, shards: list[int]) -> dict[int, Producer]:
        """Step 1 for ``shards``, all at once: ``init_transactions`` mostly waits (the client's
        connection set-up, the coordinator aborting the old owner's open transaction: 0.2-1 s
        each, measured), and it is a failover's time to first fire, so the shards wait together."""
        producers = {
            p: transactional_producer(
                as_processor(self.settings),
                f"{self.settings.namespace}.processor.shard-{p}",
                **{"transaction.timeout.ms": 30_000, "retry.backoff.ms": TXN_RETRY_BACKOFF_MS},
            )
            for p in shards
        }
        with ThreadPoolExecutor(max_workers=len(producers), thread_name_prefix="fence") as pool:
            for done in [pool.submit(pr.init_transactions, 60) for pr in producers.values()]:
                done.result()  # the first failure is raised, as the sequential loop did
        return producers

    def _new_shard(self, p: int) -> Shard:
        return Shard(
            p,
            self.tenants,
            partitions=self.settings.partitions,
            lease_s=self.settings.lease_s,
            start_lease_s=self.settings.start_lease_s,
            finished_retention_s=self.settings.finished_retention_s,
        )

    def _restore(self, producers: dict[int, Producer], started: float) -> None:
        """Steps 2-3 for the shards of ``producers`` (initialised): from a warm copy's offsets
        where :attr:`standby` holds one, else from the start."""
        shards: dict[int, Shard] = {}
        starts: dict[tuple[str, int], int] = {}
        for p in producers:
            warm = self.standby.take(p)
            shards[p] = self._new_shard(p) if warm is None else warm.shard
            if warm is not None:
                starts.update(warm.next)
                log.info("shard %d: warm copy of %d records, restoring its tail", p, warm.records)
            else:
                log.info("shard %d: no warm copy, restoring from the start", p)
        with self.heap.no_collections():
            # 2. restore (a warm copy's tail with the standby's connected reader)
            tail = self.standby.tail_reader if starts else None
            stats = restore_shards(self.settings, shards, starts, tail)
            for shard in shards.values():
                shard.finish_restore(int(self.clock()))  # 3. arm
        elapsed = time.monotonic() - started
        self.metrics.restore_wall_seconds.inc(elapsed)
        for p, shard in shards.items():
            self.metrics.restore_done(p, elapsed)
            log.info(
                "shard %d: restored %d schedules, %d state records; watermark %d",
                p, stats[p].schedules, stats[p].state_records, shard.watermark(),
            )
            self.owned[p] = OwnedShard(shard, producers[p], TopicPartition(self.t_shards, p))
        log.info("restored %d shards in %.2fs", len(shards), time.monotonic() - started)

    def _resume(self, p: int) -> None:
        """Step 4 of a rebuild: re-read shard ``p``'s inputs from the group's committed offsets."""
        assert self.consumer is not None
        tps = [tp for tp in self.consumer.assignment() if tp.partition == p and tp.topic != self.t_shards]
        for committed in self.consumer.committed(tps, 30) if tps else []:
            self.consumer.seek(TopicPartition(committed.topic, p, max(committed.offset, 0)))

    # -- give up: steps 5-6 -------------------------------------------------------
    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Give up the revoked shards. No transaction is open here: ticks run between polls,
        and every tick's checkpoint commits or aborts before the next poll (asserted)."""
        self._assert_no_transaction("revoke")
        for tp in partitions:
            self.give_up(tp.partition, Loss.REVOKED)
        self._unassign(consumer, partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Ownership already lost (session timeout): our producer is or will be fenced."""
        self._assert_no_transaction("lost")
        log.warning("shards lost: %s", [tp.partition for tp in partitions])
        for tp in partitions:
            self.give_up(tp.partition, Loss.LOST)
        self._unassign(consumer, partitions)

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Step 5's end for revoked or lost shards: their shard partitions and every input of them."""
        ps = {tp.partition for tp in partitions}
        consumer.incremental_unassign([tp for tp in consumer.assignment() if tp.partition in ps])

    def give_up(self, p: int, why: Loss) -> None:
        """Steps 5-6 for shard ``p`` (a no-op if it is not owned)."""
        owned = self.owned.pop(p, None)
        if owned is None:
            return
        owned.shard.close()  # 5. drop
        self.metrics.shard_dropped(p)
        if why in _REBUILD:  # 6. rebuild: steps 2-4, same producer
            self.metrics.restore_began([p], time.time())
            self._restore({p: owned.producer}, time.monotonic())
            self._resume(p)
            return
        try:
            owned.producer.flush(5)
        except (KafkaException, SystemError) as exc:
            # A fenced producer's last deliveries failing: a KafkaException, or a SystemError hiding
            # one. Once fenced, flush() may also return NULL with nothing set (a zombie whose
            # fencing surfaced in the produce() of a COMPLETED record, slow suite, session 12):
            # raising it would stop the processor instead of letting it rejoin the group.
            if kafka_error(exc) is None and why is not Loss.FENCED:
                raise
        log.info("shard %d: dropped", p)
        if why is Loss.ABORT_FAILED or (why is Loss.FENCED and self._assigned(p)):
            # Never re-initialise here: a new init_transactions would fence the shard's rightful
            # owner. If the group still assigns it to us, leave and rejoin the group so that
            # whoever it is given to restores it (and fences the other).
            self._rejoin = True  # 6. rejoin (between polls: rejoin_if_asked)

    def give_up_all(self) -> None:
        """Stopping: drop every shard, and the warm copies."""
        for p in list(self.owned):
            self.give_up(p, Loss.STOPPED)
        self.standby.close()

    def _assigned(self, p: int) -> bool:
        assert self.consumer is not None
        return any(tp.partition == p and tp.topic == self.t_shards for tp in self.consumer.assignment())
