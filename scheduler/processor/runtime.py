"""The processor process: one consumer group on ``ksched.shards``, one shard per partition.

The loop follows the tenant registry, polls the owned shards' inputs (partition p of every
tenant's ``ksched.commands.<tenant>``), then ticks every owned shard, each tick one
:class:`~scheduler.processor.checkpoint.Checkpoint` (the only commit order, numbered there);
shards are taken and given up only through :class:`~scheduler.processor.ownership.Ownership`
(the only ownership path, numbered there). Records are applied by
:class:`~scheduler.processor.inbox.Inbox`. This module decides when to poll and tick.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from scheduler.kafka.clients import consumer_config
from scheduler.kafka.errors import kafka_error
from scheduler.principals import as_processor
from scheduler.processor import wire
from scheduler.processor.checkpoint import Checkpoint, Checkpoints
from scheduler.processor.clock_probe import ClockProbe
from scheduler.processor.failpoints import Failpoint, FailpointHook
from scheduler.processor.heap import Heap
from scheduler.processor.inbox import Inbox
from scheduler.processor.metrics import ProcessorMetrics, TenantQuotas
from scheduler.processor.ownership import Loss, OwnedShard, Ownership
from scheduler.processor.quota_feed import QuotaFeed, demand_key
from scheduler.settings import Settings
from scheduler.tenant_registry import TenantRegistry
from scheduler.tenants import Tenant
from scheduler.topology import load_declarations
from scheduler.vocabulary import OccurrenceState

# Occurrence events counted in ksched_occurrences_total (MISSED has its own counter).
_COUNTED_BY_STATE = frozenset(
    {OccurrenceState.DEAD, OccurrenceState.RETRY_WAIT, OccurrenceState.SKIPPED_OVERLAP}
)
log = logging.getLogger("ksched.processor")
# Loop time a processor spends on its warm copies each iteration (a tick is every 100 ms): a
# copy being read from the start must not hold back the shards that fire.
STANDBY_BUDGET_S = 0.02
# Longest a burst's shards are ticked again without a poll (commands and reports wait meanwhile).
BURST_ROUNDS_S = 1.0
POLL_BATCH = 5000  # records taken per poll at most
# Record bytes taken per poll at most (~5,000 reports, one to a record or many): a worker's
# AttemptReports record holds a batch of reports, so a count of records alone no longer bounds a
# poll's work, and a burst's reports would hold its emission for seconds. The poll takes chunks
# sized from the largest record of this poll and the previous one (RecordSizes, _more).
POLL_BYTES = 640_000
# While no owned shard has work due within CLEAR_S of the poll's end, a poll takes up to
# POLL_BYTES_CLEAR: a backlog of reports is then applied in a quarter of the loop iterations, each
# of which ends waiting for its last commit (a held backlog's loop waited 10-11 % of its time
# instead of 16-21 %, docs/decisions.md). Applying 2.56 MB of reports took ~70-100 ms of ticks;
# of commands, POLL_BATCH bounds it as before. A shard assigned during the poll ends it
# (Ownership.assignments): it is usually due at once (a failover).
POLL_BYTES_CLEAR = 2_560_000
CLEAR_S = 1.0
FIRST_CHUNK = 8
FETCH_PARTITION_BYTES = 4 << 20  # a fetch's bytes per partition (librdkafka's default: 1 MB)
# A poll bringing this many records is a stream worth batching (command_linger_ms): 64 API clients
# bring ~25 a poll, one client sending command after command brings one.
LINGER_MIN_RECORDS = 16
WARM_UP_TIMEOUT_S = 600.0  # the shards read before joining: ~17 s per million schedules


def poll_bytes(due_in_s: float) -> int:
    """The bytes a poll takes at most (about: :func:`_more`) when the soonest work of the owned
    shards is due ``due_in_s`` seconds after the poll's wait (0: due by then or behind;
    ``math.inf``: nothing)."""
    return POLL_BYTES_CLEAR if due_in_s >= CLEAR_S else POLL_BYTES


class RecordSizes:
    """The largest record value of the previous poll and of this one: what a poll's chunks are
    sized by (:func:`_more`). A poll after large records starts with a small chunk; large records
    after small ones in a poll overshoot its bytes by one chunk, the records seen so far at most."""

    def __init__(self) -> None:
        self.previous = 0
        self.current = 0

    def next_poll(self) -> None:
        self.previous, self.current = self.current, 0

    def largest(self) -> int:
        return max(self.previous, self.current)


def linger_until(got: int, last_batch_at: float, linger_s: float, deadline: float) -> float:
    """Until when a poll that brought ``got`` records goes on taking more (monotonic seconds).

    Under a stream of commands and reports (a poll bringing ``LINGER_MIN_RECORDS`` or more), until
    ``linger_s`` after the previous poll that brought any: one transaction per shard every
    ``linger_s`` at most, not one per poll. Never past ``deadline`` (the poll's timeout: the next
    tick or the soonest due work). A smaller batch is not held: a client sending one command after
    another would wait out the linger on each for nothing to batch. Nor is a batch after a quiet
    spell (the time is past), and when a tick takes longer than ``linger_s`` nothing is added."""
    if got < LINGER_MIN_RECORDS:
        return -math.inf
    return min(deadline, last_batch_at + linger_s)


def take_records(
    consumer: Consumer, timeout: float, last_batch_at: float, linger_s: float, batch: int = POLL_BATCH,
    max_bytes: int = POLL_BYTES, sizes: RecordSizes | None = None, stop: Callable[[], bool] = lambda: False,
) -> tuple[list[Message], float]:
    """The records of one poll, at most ``batch`` and about ``max_bytes`` (:func:`_more`),
    and the new ``last_batch_at`` (the monotonic end of this poll if it brought any, else
    unchanged). Returns within ``timeout`` seconds.

    ``consume(n, timeout)`` waits for ``n`` records or the whole timeout: a command would wait for
    the next tick, and its caller with it. So: what is fetched already; else the first record
    within ``timeout`` and what is fetched with it; then, under a stream, more until
    :func:`linger_until`. Commands that arrive during a tick's commit make the next tick's batch.
    """
    started = time.monotonic()
    sizes = sizes or RecordSizes()
    sizes.next_poll()
    got: list[Message] = []
    size = _more(consumer, got, batch, max_bytes, 0, 0.0, sizes, stop)
    if not got:
        if timeout <= 0:
            return got, last_batch_at
        first = consumer.poll(timeout)
        if first is None:
            return [], last_batch_at
        got = [first]
        sizes.current = len(first.value() or b"")
        size = _more(consumer, got, batch, max_bytes, sizes.current, 0.0, sizes, stop)
    until = linger_until(len(got), last_batch_at, linger_s, started + timeout)
    while len(got) < batch and size < max_bytes and (left := until - time.monotonic()) > 0.001 and not stop():
        size = _more(consumer, got, batch, max_bytes, size, left, sizes, stop)
    return got, time.monotonic()


def _more(
    consumer: Consumer, got: list[Message], batch: int, max_bytes: int, size: int, wait: float,
    sizes: RecordSizes, stop: Callable[[], bool],
) -> int:
    """Append to ``got`` what is fetched, a chunk at a time (the first waiting up to ``wait`` s
    for its records), until ``batch`` records or ``max_bytes``; returns the bytes in ``got``. A
    chunk is as many records as fit if each were as large as the largest yet (of the previous
    poll too, for a poll's first chunk: ``sizes``), and at most twice the last chunk."""
    n = FIRST_CHUNK
    while len(got) < batch and size < max_bytes and not stop():
        largest = sizes.current if len(got) > 1 else sizes.largest()
        if largest:
            n = max(1, min(n, (max_bytes - size) // largest))
        chunk = consumer.consume(num_messages=min(n, batch - len(got)), timeout=wait)
        if not chunk:
            break
        got.extend(chunk)
        lengths = [len(m.value() or b"") for m in chunk]
        size += sum(lengths)
        sizes.current = max(sizes.current, *lengths)
        if len(chunk) < n:  # all that was fetched (or the wait is over)
            break
        wait = 0.0
        n = 2 * len(chunk)
    return size


class Processor:
    """Run with :meth:`run` until :meth:`stop` (or SIGTERM/SIGINT)."""

    def __init__(
        self,
        settings: Settings,
        *,
        tenants: dict[str, Tenant] | None = None,
        instance_id: str | None = None,
        tick_budget: int | None = None,
        metrics: ProcessorMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # Injected tenants are fixed (tests); otherwise the live registry fills and follows this
        # very dict, which the shards and the inbox share (updated in place, on the loop thread).
        self.registry: TenantRegistry | None = None
        if tenants is None:
            tenants = {}
            self.registry = TenantRegistry(settings, tenants, conn=as_processor(settings))
        self.tenants = tenants
        self.instance_id = instance_id or f"{os.uname().nodename}-{os.getpid()}"
        self.tick_budget = settings.tick_budget if tick_budget is None else tick_budget
        self.metrics = metrics or ProcessorMetrics()
        self.metrics.registry.register(TenantQuotas(self.tenants))
        self.metrics.shards.set(settings.partitions)
        self.clock = clock
        self.failpoint: FailpointHook = Failpoint.from_env()  # read at each tick: tests may replace it
        self.heap = Heap()
        # One commit thread per shard at most: every owned shard's commit may be in flight at once.
        self.checkpoints = Checkpoints(
            settings, commit_threads=settings.partitions, probe=ClockProbe(self.metrics.clock_sample)
        )
        self.ownership = Ownership(
            settings, self.tenants, self.metrics, clock, self.heap, self.checkpoints.assert_none_open
        )
        self.inbox = Inbox(self.tenants, self.metrics, self.checkpoints.topics)
        # Cluster-wide quotas: the shards' demand, shared through ksched.quota-demand.
        self.quotas = QuotaFeed(settings, self.instance_id)
        self.consumer: Consumer | None = None
        self._stop = threading.Event()
        self._last_batch_at = -1e9  # monotonic end of the last poll that brought records
        self._sizes = RecordSizes()  # the largest records of the last polls: a poll's chunks

    @property
    def owned(self) -> dict[int, OwnedShard]:
        """The shards owned now, by partition."""
        return self.ownership.owned

    # -- lifecycle --------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self) -> None:
        cfg = consumer_config(
            as_processor(self.settings),
            self.ownership.group_id,
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                # librdkafka's own thread heartbeats, so a busy tick does not look like a death.
                "session.timeout.ms": self.settings.processor_session_timeout_ms,
                "heartbeat.interval.ms": max(100, self.settings.processor_session_timeout_ms // 6),
                "max.poll.interval.ms": 300_000,
                # Under a stream of commands the broker holds a fetch until 16 KB or 10 ms, not
                # until the first record: ~370 fetches/s at 840 creates/s became ≤ 100, and each
                # request costs the broker as much as its records (docs/decisions.md). A lone
                # command waits the 10 ms; an idle consumer fetches as often as before.
                "fetch.wait.max.ms": 10,
                "fetch.min.bytes": 16_384,
                # The prefetch is resident memory: librdkafka fetches again while its queue holds
                # less than this, so it holds this plus at most one fetch response per broker.
                "queued.max.messages.kbytes": 16_384,
                # a response, whatever the tenants and shards (librdkafka's implicit bound, explicit)
                "fetch.max.bytes": 16 << 20,
                # A worker's AttemptReports record is ~100 kB: at the default 1 MB a partition, a
                # fetch brought ~9 records a partition, and a held backlog's loop polled nothing
                # in 2-15 % of its time; 4 MB took the held rate from ~165,000 to ~209,000
                # reports a second (docs/decisions.md).
                "max.partition.fetch.bytes": FETCH_PARTITION_BYTES,
                "client.id": f"ksched-processor-{self.instance_id}",
            },
        )
        self._warn_short_retention()
        self.quotas.start()  # raises DemandTopicMissing before anything else is opened
        try:
            if self.registry is not None:
                self.registry.start()  # the whole registry before the first shard: no command races it
            # confluent framing: the known tenants' subjects before the first record (fails fast)
            self.checkpoints.topics.frame_tenants(self.tenants)
            with self.heap.no_collections():
                self.ownership.standby.warm_up(WARM_UP_TIMEOUT_S, self._stop.is_set)
        except BaseException:
            self.ownership.standby.close()
            if self.registry is not None:
                self.registry.close()
            self.quotas.close()
            raise
        self.consumer = Consumer(cfg)
        self.ownership.join(self.consumer)
        log.info("processor %s joined group %s", self.instance_id, self.ownership.group_id)
        try:
            while not self._stop.is_set():
                self._loop_once()
                self.ownership.rejoin_if_asked()
        finally:
            self.checkpoints.shutdown()  # no commit may still run on a dropped producer
            self.ownership.give_up_all()
            self.consumer.close()
            if self.registry is not None:
                self.registry.close()
            self.quotas.close()
            log.info("processor %s stopped", self.instance_id)

    def _warn_short_retention(self) -> None:
        """A purged schedule's version record is tombstoned, and a worker runs an occurrence whose
        schedule it does not know: a canceled occurrence still waiting on a dispatch topic would
        run. Say so when finished schedules are kept for less than the dispatch topics keep them."""
        _, decls = load_declarations()
        keep_ms = max((d.retention_ms or 0 for d in decls if d.name == "dispatch"), default=0)
        if self.settings.finished_retention_s * 1000 < keep_ms:
            log.warning(
                "finished_retention_s=%d is shorter than the dispatch topics' retention (%d s): a "
                "canceled occurrence left unconsumed longer than that could run after the purge; "
                "raise finished_retention_s (KSCHED_FINISHED_RETENTION_S) for production",
                self.settings.finished_retention_s, keep_ms // 1000,
            )

    # -- the loop ---------------------------------------------------------------
    def _loop_once(self) -> None:
        """Follow the tenant registry, poll, then tick every owned shard with one clock value; join
        the commits before the next poll."""
        if self.registry is not None:
            self.registry.poll()  # never blocks; a change is in force for this iteration's ticks
        self.ownership.follow_tenants()  # a new tenant's commands are read from this poll on
        self.checkpoints.topics.frame_tenants(self.tenants)  # a new tenant's subjects, before its records
        self.quotas.poll(self.owned, self.clock())  # never blocks: the other shards' demand
        by_partition: dict[int, list[Message]] = defaultdict(list)
        due_in = self._due_in()
        timeout = min(self.settings.tick_interval_ms / 1000, due_in)  # the next tick, or the due work
        for m in self._poll(self._prepare_ahead(timeout), poll_bytes(due_in - timeout)):
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", err)
                continue
            by_partition[m.partition() or 0].append(m)
        now = self.clock()
        with self.heap.quiet():
            # Only _burst_rounds holds the checkpoints: their outputs (a burst's occurrences) are
            # freed before the GC is back on, not traversed by its first collection for nothing
            # (66 ms at 4 shards × 20,000, a gap in the burst's lag plot: docs/performance.md).
            behind = self._burst_rounds([self._tick(o, by_partition.get(p, []), now)
                                         for p, o in list(self.owned.items())])
        if by_partition:
            self.heap.changed = True
        self.heap.settle(behind=behind)
        self.ownership.standby.follow(self.owned)
        self.ownership.standby.poll(STANDBY_BUDGET_S)

    def _burst_rounds(self, commits: list[Checkpoint | None]) -> bool:
        """Join the iteration's commits; while shards fill their tick budget (a burst), tick them
        again first, without a poll in between, for up to ``BURST_ROUNDS_S``.

        A shard's next transaction waits only for its own previous commit, which ran while the
        other shards emitted: without these rounds every iteration of a burst ended waiting for
        its last shard's commit. Commands and reports wait for the next poll (at most
        ``BURST_ROUNDS_S`` longer); no transaction is open when this returns. Returns whether
        shards still filled their budget when the time ran out (the burst goes on).
        """
        pending = {cp.owned.partition.partition: cp for cp in commits if cp is not None}
        commits.clear()  # a joined checkpoint is dropped at once (see _loop_once)
        full = [p for p, cp in pending.items() if len(cp.out.dispatch) >= self.tick_budget]
        deadline = time.monotonic() + BURST_ROUNDS_S
        while full and time.monotonic() < deadline:
            now = self.clock()
            again: list[int] = []
            for p in full:
                self._join(pending.pop(p))
                owned = self.owned.get(p)
                if owned is None:  # given up by its commit
                    continue
                cp = self._tick(owned, [], now)
                if cp is not None:
                    pending[p] = cp
                    if len(cp.out.dispatch) >= self.tick_budget:
                        again.append(p)
            full = again
        for cp in pending.values():
            self._join(cp)
        return bool(full)

    def _poll(self, timeout: float, max_bytes: int = POLL_BYTES) -> list[Message]:
        """The loop's only poll (rebalance callbacks run inside it): never with a transaction open."""
        assert self.consumer is not None
        self.checkpoints.assert_none_open("poll")
        assigned = self.ownership.assignments
        got, self._last_batch_at = take_records(
            self.consumer, timeout, self._last_batch_at, self.settings.command_linger_ms / 1000,
            max_bytes=max_bytes, sizes=self._sizes, stop=lambda: self.ownership.assignments != assigned,
        )
        return got

    def _prepare_ahead(self, idle_s: float) -> float:
        """Spend the idle part of ``idle_s`` encoding the heads of dispatch records due within
        ``prepare_ahead_s``; returns the idle time left for the poll."""
        horizon = self.settings.prepare_ahead_s
        if horizon <= 0 or idle_s <= 0.002:
            return idle_s
        started = time.monotonic()
        deadline = started + idle_s - 0.002
        until = int(self.clock()) + horizon
        for owned in list(self.owned.values()):
            while time.monotonic() < deadline:
                batch = owned.shard.to_prepare(until, 500)
                wire.prepare_heads(batch)
                if len(batch) < 500:
                    break
        return max(0.0, idle_s - (time.monotonic() - started))

    def _due_in(self) -> float:
        """Seconds until the soonest work of the owned shards is due: a dispatch, a retry, a
        throttled catch-up's next turn (0 when due now or behind; ``math.inf`` when none)."""
        now = self._emit_clock(self.clock())
        soonest = math.inf
        for owned in self.owned.values():
            wait = owned.shard.catch_up_wait_s(now)
            if wait is not None:  # throttled catch-up: wake when its quota allows one more
                soonest = min(soonest, wait)
            retry = owned.shard.attempts.next_retry()
            if retry is not None:
                soonest = min(soonest, max(0.0, retry - now))
            for q in owned.shard.queues.values():
                nd = q.next_due()
                if nd is not None:
                    soonest = min(soonest, max(0.0, nd - now))
        return soonest

    def _emit_clock(self, now: float) -> float:
        """``now`` for emission: held one second before ``emit_until`` when that is set, so the old
        side of a repartition gives a fate to everything before the cutover and to nothing after
        (its lane cursors stop at ``(cutover - 1, DONE)``, which ``ksched repartition`` checks)."""
        until = self.settings.emit_until
        return min(now, until - 1) if until else now

    # -- one tick: the checkpoint's steps in order ------------------------------
    def _tick(self, owned: OwnedShard, msgs: list[Message], clock: float) -> Checkpoint | None:
        """Steps 1-5 of shard p's checkpoint (DESIGN.md §4). Returns it while its commit runs
        on the commit thread (the loop goes on to the next shard; :meth:`_join` before the
        next poll); None when it is closed already (nothing written, so no transaction; or failed)."""
        assert self.consumer is not None
        now = int(clock)
        cp = self.checkpoints.open(owned, msgs, clock, self.failpoint)
        try:
            cp.begin()  # 1
            if self.inbox.take_all(owned.shard, cp, msgs, now):  # 2. the commands and reports
                owned.rebuild = True
            self.quotas.attach(owned.shard)
            # 2. the occurrences now due
            cp.due(owned.shard.due(int(self._emit_clock(now)), self.tick_budget, clock))
            cp.write_state()  # 3
            p = owned.partition.partition
            if (demand := self.quotas.report(p, clock)) is not None:  # 3. about once a second
                cp.quota_demand(self.quotas.topic, demand_key(p), demand)
            cp.send_offsets(self.consumer)  # 4
            return cp if cp.commit() else None  # 5
        except (KafkaException, SystemError) as exc:
            err = kafka_error(exc)  # the clock probe's callback may turn a fencing into SystemError
            if err is None:
                raise
            self.ownership.give_up(owned.partition.partition, cp.fail(err))
            return None

    def _join(self, cp: Checkpoint) -> None:
        """Step 5's end: wait for the commit, then count what it made visible. A failed commit
        gives the shard up (aborted: rebuilt); a record that hit a bug rebuilds it now."""
        owned = cp.owned
        try:
            cp.join()
        except (KafkaException, SystemError) as exc:
            err = kafka_error(exc)
            if err is None:
                raise
            self.ownership.give_up(owned.partition.partition, cp.fail(err))
            return
        self.metrics.transaction_seconds.observe(time.monotonic() - cp.started)
        self._count_events(cp.events)
        self.metrics.observe_tick(owned.shard, cp.out, cp.clock)
        if owned.rebuild:
            self.ownership.give_up(owned.partition.partition, Loss.BUG)

    def _count_events(self, events: dict[tuple[str, str], int]) -> None:
        """Count a committed transaction's occurrence events (an aborted one's are re-derived)."""
        for (tenant, state), n in events.items():
            if state == OccurrenceState.MISSED:
                self.metrics.missed.labels(tenant=tenant).inc(n)
            elif state in _COUNTED_BY_STATE:
                self.metrics.lifecycle.labels(tenant=tenant, state=state).inc(n)
