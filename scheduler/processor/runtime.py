"""The processor process: one consumer group on ``ksched.commands``, one shard per partition.

This module joins the shard model (no Kafka) with the Kafka layer through the
record codecs. The rebalance path and the commit order are written once, as
numbered steps, in :meth:`Processor._on_assign` / :meth:`Processor._on_revoke`
and :meth:`Processor._tick_shard`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from scheduler.kafka.clients import consumer_config, transactional_producer
from scheduler.kafka.clients import produce_waiting as _produce
from scheduler.processor import codec
from scheduler.processor.attempts import Attempt
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.model import Entry, Event
from scheduler.processor.restore import restore_shards
from scheduler.processor.shard import CommandOutcome, Shard, TickOutput
from scheduler.settings import Settings
from scheduler.tenants import Tenant, load_tenants
from scheduler.topology import load_declarations, topic_name

log = logging.getLogger("ksched.processor")

# A command record larger than this is refused before it is decoded: the schedules and history
# records derived from it must stay under the producer's message limit (1 MB), or the tick's
# transaction would fail on every retry. The spec's own payload bound is far below it.
MAX_COMMAND_BYTES = 900_000

FAILPOINTS = ("before_produce", "after_produce", "before_commit", "after_commit")


@dataclass
class Failpoint:
    """``KSCHED_FAILPOINT=<point>[:<n>]``: ``os._exit(137)`` the n-th time (default 1st)
    that ``point`` is reached in a tick that emits dispatch records. For crash tests only."""

    point: str | None = None
    remaining: int = 1

    @staticmethod
    def from_env() -> Failpoint:
        raw = os.environ.get("KSCHED_FAILPOINT", "")
        if not raw:
            return Failpoint()
        point, _, n = raw.partition(":")
        if point not in FAILPOINTS:
            raise ValueError(f"KSCHED_FAILPOINT: {point!r} is not one of {', '.join(FAILPOINTS)}")
        return Failpoint(point, int(n or 1))

    def hit(self, point: str) -> None:
        if point == self.point:
            self.remaining -= 1
            if self.remaining <= 0:
                log.warning("failpoint %s: exiting", point)
                os._exit(137)


@dataclass
class PendingCommit:
    """A tick whose transaction is being committed on the commit thread."""

    owned: OwnedShard
    future: Future[None]
    out: TickOutput
    clock: float
    started: float


@dataclass
class OwnedShard:
    shard: Shard
    producer: Producer
    partition: TopicPartition
    last_state_write: float = 0.0
    offsets: dict[int, int] = field(default_factory=dict)
    rebuild: bool = False  # a record hit a bug mid-apply: rebuild from Kafka once its answer is committed
    # Occurrence events written in the open transaction, by (tenant, state): counted once it commits.
    events: dict[tuple[str, str], int] = field(default_factory=dict)


# Producer errors that mean another owner has the shard's transactional id. A fenced producer's
# produce() raises _FATAL (its fatal() flag is not always set on that error object).
_FENCED_CODES = (KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


def _release_free_memory() -> None:
    """Hand memory freed by the restore back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    A restore decodes every record of the shard's compacted topics, including schedules that a
    later tombstone (a purge) drops again; without this the process keeps that peak as RSS.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


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
        self.tenants = tenants if tenants is not None else load_tenants(settings.tenants_file)
        self.instance_id = instance_id or f"{os.uname().nodename}-{os.getpid()}"
        self.tick_budget = settings.tick_budget if tick_budget is None else tick_budget
        self.metrics = metrics or ProcessorMetrics()
        self.clock = clock
        self.failpoint = Failpoint.from_env()
        self.owned: dict[int, OwnedShard] = {}
        self._stop = threading.Event()
        ns = settings.namespace
        self.t_commands = topic_name(settings, "commands")
        self.t_schedules = topic_name(settings, "schedules")
        self.t_history = topic_name(settings, "schedule-history")
        self.t_state = topic_name(settings, "state")
        self.t_results = topic_name(settings, "results")
        self.t_events = topic_name(settings, "occurrence-events")
        self.group_id = f"{ns}.processor"
        self.consumer: Consumer | None = None
        self._heap_changed = False
        self._last_freeze = 0.0
        self._rejoin = False
        self._committer = ThreadPoolExecutor(max_workers=settings.partitions, thread_name_prefix="commit")

    # -- lifecycle --------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self) -> None:
        cfg = consumer_config(
            self.settings.bootstrap_servers,
            self.group_id,
            **{
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": 300_000,
                "fetch.wait.max.ms": 10,
                "queued.max.messages.kbytes": 16_384,  # prefetch bounded: it is resident memory
                "client.id": f"ksched-processor-{self.instance_id}",
            },
        )
        self._warn_short_retention()
        self.consumer = Consumer(cfg)
        self._subscribe()
        log.info("processor %s joined group %s", self.instance_id, self.group_id)
        try:
            while not self._stop.is_set():
                self._loop_once()
                if self._rejoin:
                    self._rejoin = False
                    log.warning("leaving and rejoining group %s after a fenced shard", self.group_id)
                    self.consumer.unsubscribe()  # revokes (and drops) every shard first
                    self._subscribe()
        finally:
            self._committer.shutdown(wait=True)  # no commit may still run on a dropped producer
            for p in list(self.owned):
                self._drop(p)
            self.consumer.close()
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

    def _subscribe(self) -> None:
        assert self.consumer is not None
        self.consumer.subscribe(
            [self.t_commands], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _loop_once(self) -> None:
        assert self.consumer is not None
        timeout = self._prepare_ahead(self._poll_timeout())
        msgs = self.consumer.consume(num_messages=5000, timeout=timeout)  # rebalance callbacks run here
        by_partition: dict[int, list[Message]] = defaultdict(list)
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", err)
                continue
            by_partition[m.partition() or 0].append(m)
        now = self.clock()
        commits = [self._tick_shard(o, by_partition.get(p, []), now) for p, o in list(self.owned.items())]
        for pending in commits:
            if pending is not None:
                self._finish_commit(pending)
        if by_partition:
            self._heap_changed = True
        self._settle_heap()

    def _settle_heap(self, force: bool = False) -> None:
        """Take the long-lived schedule entries out of the cyclic GC's sight (``gc.freeze``).

        A shard holds up to millions of entries; a burst promotes many short-lived
        objects, and each full collection that follows would traverse every entry
        (~0.3 s per 500,000: pauses measured in the burst's lag plot). Entries are
        freed by reference counting as before; only cycles among frozen objects
        would leak, so the young generations are collected first. At most once a
        second, and only after commands (new entries) or a restore.
        """
        now = time.monotonic()
        if force or (self._heap_changed and now - self._last_freeze >= 1.0):
            gc.collect(1)
            gc.freeze()
            self._heap_changed = False
            self._last_freeze = now

    def _prepare_ahead(self, idle_s: float) -> float:
        """Spend the idle part of ``idle_s`` encoding dispatch heads due within
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
                codec.prepare_heads(batch)
                if len(batch) < 500:
                    break
        return max(0.0, idle_s - (time.monotonic() - started))

    def _poll_timeout(self) -> float:
        tick = self.settings.tick_interval_ms / 1000
        now = self.clock()
        soonest = tick
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

    # -- the rebalance path (the only one) --------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Take ownership of the assigned shards:

        1. per shard, create its transactional producer (``transactional.id`` =
           ``<namespace>.processor.shard-<p>``) and ``init_transactions()``: this
           fences the previous owner and aborts its open transaction, so
           ``read_committed`` readers are not held back by it;
        2. restore the shards from ``ksched.state`` (cursors, runtime state) and
           ``ksched.schedules``, ``read_committed``, to the end, in one pass over
           their partitions;
        3. arm every active schedule from the restored cursors;
        4. commands resume from the group's committed offset of ``commands[p]``
           (the consumer does this after the callback returns).
        """
        if not partitions:
            return
        started = time.monotonic()
        producers: dict[int, Producer] = {}
        for tp in partitions:
            p = tp.partition
            producers[p] = transactional_producer(
                self.settings.bootstrap_servers,
                f"{self.settings.namespace}.processor.shard-{p}",
                **{"transaction.timeout.ms": 30_000},
            )
            producers[p].init_transactions(60)
        self._restore(producers, started)

    def _restore(self, producers: dict[int, Producer], started: float) -> None:
        """Steps 2-3 of :meth:`_on_assign` for the shards of ``producers`` (initialised)."""
        shards = {
            p: Shard(
                p,
                self.tenants,
                partitions=self.settings.partitions,
                lease_s=self.settings.lease_s,
                start_lease_s=self.settings.start_lease_s,
                finished_retention_s=self.settings.finished_retention_s,
            )
            for p in producers
        }
        stats = restore_shards(self.settings, shards)
        elapsed = time.monotonic() - started
        self.metrics.restore_wall_seconds.inc(elapsed)
        for p, shard in shards.items():
            shard.finish_restore(int(self.clock()))
            self.metrics.restore_seconds.labels(shard=str(p)).set(elapsed)
            log.info(
                "shard %d: restored %d schedules, %d state records; watermark %d",
                p,
                stats[p].schedules,
                stats[p].state_records,
                shard.watermark(),
            )
            self.owned[p] = OwnedShard(shard, producers[p], TopicPartition(self.t_commands, p))
        log.info("restored %d shards in %.2fs", len(shards), time.monotonic() - started)
        self._settle_heap(force=True)
        _release_free_memory()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Give up shards. No transaction is open here: ticks run between polls,
        and every tick commits or aborts before the next poll. Drop the shard."""
        for tp in partitions:
            self._drop(tp.partition)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Ownership already lost (session timeout): our producer is or will be fenced."""
        log.warning("shards lost: %s", [tp.partition for tp in partitions])
        self._on_revoke(consumer, partitions)

    def _drop(self, p: int) -> None:
        owned = self.owned.pop(p, None)
        if owned is None:
            return
        owned.shard.close()
        with contextlib.suppress(KafkaException):
            owned.producer.flush(5)
        log.info("shard %d: dropped", p)

    # -- the tick (the only commit order) ---------------------------------------
    def _tick_shard(self, owned: OwnedShard, msgs: list[Message], clock: float) -> PendingCommit | None:
        """One transaction for shard p:

        1. apply the commands and reports polled for p (results, schedules,
           history, versions records);
        2. emit the occurrences now due — strict, flexible, then catch-up —
           to ``ksched.dispatch.<tenant>``, up to the tick budget;
        3. write the advanced cursors and changed runtime state to ``ksched.state``;
        4. ``send_offsets_to_transaction`` for the consumed commands; commit.

        The commit of a transaction that wrote anything runs on a commit thread
        while the loop goes on to the next shard's steps 1-4 (a commit mostly
        waits for the broker's acks); :meth:`_finish_commit` joins it before the
        loop polls again, so no transaction is ever open across a poll or a
        rebalance callback. Any Kafka error aborts the transaction; a fenced
        producer drops the shard (another owner has it) — nothing of this tick
        becomes visible.
        """
        shard, producer, p = owned.shard, owned.producer, owned.partition.partition
        now = int(clock)
        started = time.monotonic()
        try:
            producer.begin_transaction()
            # 1. commands
            for m in msgs:
                self._apply_message(owned, m, now)
            # 2. due occurrences
            out = shard.due(now, self.tick_budget, clock)
            if out.dispatch:
                self.failpoint.hit("before_produce")
            self._write_tick(owned, out, clock)
            if out.dispatch:
                self.failpoint.hit("after_produce")
            # 3. cursors and changed runtime state
            wrote = bool(msgs or out.dispatch or out.events or out.completed or out.purged)
            for sid, view in shard.runtime_changes():
                tenant = view and shard.entries[sid].tenant
                value = codec.encode_runtime(sid, tenant or "", view, now)
                _produce(producer, self.t_state, value, sid.encode(), p)
                wrote = True
            if wrote or clock - owned.last_state_write >= 1.0:
                _produce(
                    producer,
                    self.t_state,
                    codec.encode_shard_state(shard, clock),
                    codec.shard_state_key(p),
                    p,
                )
                owned.last_state_write = clock
                wrote = True
            # 4. offsets, commit
            if msgs:
                offsets = [TopicPartition(self.t_commands, p, (msgs[-1].offset() or 0) + 1)]
                assert self.consumer is not None
                producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 30)
            if out.dispatch:
                self.failpoint.hit("before_commit")
            if not wrote:
                producer.commit_transaction(30)  # empty: settled locally, nothing to wait for
                return None
        except KafkaException as exc:
            self._tick_failed(owned, exc)
            return None
        commit = self._committer.submit(producer.commit_transaction, 30)
        return PendingCommit(owned, commit, out, clock, started)

    def _finish_commit(self, pending: PendingCommit) -> None:
        """Join a tick's commit (step 4's end); a failed commit aborts and restores the shard."""
        try:
            pending.future.result()
        except KafkaException as exc:
            self._tick_failed(pending.owned, exc)
            return
        if pending.out.dispatch:
            self.failpoint.hit("after_commit")
        self.metrics.transaction_seconds.observe(time.monotonic() - pending.started)
        self._count_events(pending.owned)
        self.metrics.observe_tick(pending.owned.shard, pending.out, pending.clock)
        if pending.owned.rebuild:
            self._rebuild(pending.owned)

    def _tick_failed(self, owned: OwnedShard, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        p = owned.partition.partition
        if err.fatal() or err.code() in _FENCED_CODES:
            # Never re-initialise here: a new init_transactions would fence the shard's rightful
            # owner. Drop the shard; if the group still assigns it to us, leave and rejoin the
            # group so that whoever it is given to restores it (and fences the other).
            log.error("shard %d: producer fenced (%s): another processor owns it; dropping", p, err)
            self._drop(p)
            assert self.consumer is not None
            if any(tp.partition == p for tp in self.consumer.assignment()):
                self._rejoin = True
            return
        log.warning("shard %d: tick aborted: %s; restoring", p, err)
        try:
            owned.producer.abort_transaction(30)
        except KafkaException as again:
            log.error("shard %d: abort failed (%s): dropping the shard and rejoining", p, again.args[0])
            self._drop(p)
            self._rejoin = True
            return
        self._rebuild(owned)

    def _count_events(self, owned: OwnedShard) -> None:
        """Count the committed transaction's occurrence events (an aborted one's are re-derived)."""
        for (tenant, state), n in owned.events.items():
            if state == "MISSED":
                self.metrics.missed.labels(tenant=tenant).inc(n)
            elif state in ("DEAD", "RETRY_WAIT", "SKIPPED_OVERLAP"):
                self.metrics.lifecycle.labels(tenant=tenant, state=state).inc(n)
        owned.events.clear()

    def _rebuild(self, owned: OwnedShard) -> None:
        """Restore shard p from Kafka and re-read its commands from the committed offset: the
        in-memory shard ran ahead of (or apart from) what was committed. Uses the same producer
        (a new init_transactions could fence an owner we do not know we lost the shard to)."""
        p = owned.partition.partition
        self.owned.pop(p, None)
        owned.shard.close()
        assert self.consumer is not None
        self._restore({p: owned.producer}, time.monotonic())
        committed = self.consumer.committed([owned.partition], 30)[0]
        self.consumer.seek(TopicPartition(self.t_commands, p, max(committed.offset, 0)))

    def _apply_message(self, owned: OwnedShard, m: Message, now: int) -> None:
        """Step 1 for one record of ``commands[p]``. A record that cannot be applied is answered
        (a command: REJECTED with the reason) or counted (a report) and committed past: nothing a
        client sends may raise out of the tick, abort it in a loop, or stall other tenants."""
        shard, producer, p = owned.shard, owned.producer, owned.partition.partition
        raw = m.value() or b""
        try:
            if len(raw) > MAX_COMMAND_BYTES:
                raise codec.RecordDecodeError(
                    f"record of {len(raw)} bytes is over the command limit of {MAX_COMMAND_BYTES} bytes: "
                    "keep the payload under the spec's payload limit"
                )
            decoded = codec.decode_command_topic(raw)
        except codec.RecordDecodeError as exc:
            self.metrics.rejected.labels(tenant="?", code="UNDECODABLE").inc()
            rid = f"undecodable-{p}-{m.offset()}"
            key = m.key()
            value = codec.encode_undecodable_result(rid, p, m.offset() or 0, key, str(exc), now)
            _produce(producer, self.t_results, value, rid.encode())
            return
        if isinstance(decoded, codec.AttemptReport):
            self.metrics.reports.labels(kind=decoded.kind).inc()
            # A report is applied only to a schedule this shard holds (lifecycle.invalid_report), so
            # one produced to another partition than its schedule id's is ignored there.
            try:
                res = codec.apply_report(shard, decoded, now)
            except Exception:  # a bug must not turn one report into a crash loop of the shard
                log.exception("report %s %s not applied: ignored; the shard is rebuilt from Kafka",
                              decoded.kind, decoded.occurrence_id[:100])
                self.metrics.reports_ignored.labels(kind=decoded.kind).inc()
                owned.rebuild = True
                return
            if res.ignored is not None:
                self.metrics.reports_ignored.labels(kind=decoded.kind).inc()
                log.debug("report %s %s ignored: %s", decoded.kind, decoded.occurrence_id, res.ignored)
            self._write_lifecycle(owned, res.events, res.dead, now)
            return
        try:
            outcome = codec.apply_command(shard, decoded, now)
        except Exception as exc:  # a bug must not turn one command into a crash loop of the shard
            log.exception("command %s not applied; the shard is rebuilt from Kafka", decoded.request_id[:100])
            owned.rebuild = True  # memory may be half-changed: after this commit, restore it
            outcome = CommandOutcome(
                decoded.request_id[: codec.MAX_ID_CHARS], decoded.tenant[: codec.MAX_ID_CHARS],
                decoded.schedule_id or "", False, code="INTERNAL", kind=decoded.kind,
                reason=f"the processor could not apply this command ({type(exc).__name__}: {exc}); "
                "it is in the processor's log: please report it",
            )
        _produce(producer, self.t_results, codec.encode_result(outcome, now), outcome.request_id.encode())
        if not outcome.accepted:
            tenant = self._tenant_label(outcome.tenant)
            self.metrics.rejected.labels(tenant=tenant, code=outcome.code or "?").inc()
            return
        if outcome.entry is None:
            return  # idempotent replay: nothing changed
        self._write_schedule_change(owned, outcome.entry, outcome.kind, outcome.request_id, now)
        self._write_lifecycle(owned, outcome.events, [], now)

    def _tenant_label(self, tenant: str) -> str:
        """A metric label for ``tenant``: unregistered names collapse to one value (bounded labels)."""
        return tenant if tenant in self.tenants else "?"

    def _write_schedule_change(
        self, owned: OwnedShard, entry: Entry, kind: str, request_id: str, now: int
    ) -> None:
        producer, p = owned.producer, owned.partition.partition
        key = entry.schedule_id.encode()
        sched, hist, version = codec.encode_schedule_change(entry, kind, request_id, now)
        _produce(producer, self.t_schedules, sched, key, p)
        if hist is not None:
            _produce(producer, self.t_history, hist, key, p)
        _produce(producer, topic_name(self.settings, "versions", entry.tenant), version, key, p)

    def _write_lifecycle(self, owned: OwnedShard, events: list[Event], dead: list[Attempt], now: int) -> None:
        """Occurrence events, and the DLQ records of occurrences declared dead."""
        producer, p, shard = owned.producer, owned.partition.partition, owned.shard
        for ev in events:
            _produce(producer, self.t_events, codec.encode_event(ev, now), ev.schedule_id.encode(), p)
            k = (ev.tenant, ev.state)
            owned.events[k] = owned.events.get(k, 0) + 1
        for a in dead:
            _produce(
                producer,
                topic_name(self.settings, "dlq", a.tenant),
                codec.encode_dead_letter(a, shard.entries.get(a.schedule_id), shard, now),
                a.schedule_id.encode(),
                p,
            )

    def _write_tick(self, owned: OwnedShard, out: TickOutput, clock: float) -> None:
        producer, p = owned.producer, owned.partition.partition
        stamp = codec.dispatch_stamp(int(clock * 1000))
        topics: dict[str, str] = {}
        produce = producer.produce
        encode_dispatch = codec.encode_dispatch
        for occ in out.dispatch:
            topic = topics.get(occ.tenant)
            if topic is None:
                topic = topics[occ.tenant] = topic_name(self.settings, "dispatch", occ.tenant)
            value = encode_dispatch(occ, stamp)
            while True:
                try:
                    produce(topic, value, occ.schedule_id.encode(), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
        self._write_lifecycle(owned, out.events, out.dead, int(clock))
        for entry in out.completed:
            self._write_schedule_change(owned, entry, "COMPLETE", f"complete-{entry.schedule_id}", int(clock))
        for entry in out.purged:
            # Tombstones: the compacted topics forget the schedule (the history topic keeps its story).
            key = entry.schedule_id.encode()
            _produce(producer, self.t_schedules, None, key, p)
            _produce(producer, topic_name(self.settings, "versions", entry.tenant), None, key, p)
            _produce(producer, self.t_state, None, key, p)
        producer.poll(0)
