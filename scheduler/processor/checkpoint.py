"""One shard's transaction for one tick: the only commit order.

A :class:`Checkpoint` has one method per step, and a step cannot run after a later one
(:class:`TransactionOrderError`):

1. begin: the checkpoint is open from here until it is committed, aborted or given up.
   ``begin_transaction()`` runs now when the tick consumed records (their offsets make it
   write), else at its first write; a tick that writes nothing has no transaction at all
   (each begin and each empty commit is a wait on librdkafka's main thread: 5 % of a held
   backlog's loop went to the idle shards', docs/decisions.md);
2. produce: what the commands and reports polled for the shard changed (results,
   schedules, history, versions, occurrence events, DLQ records; written by
   :class:`scheduler.processor.inbox.Inbox`), then the tick's due output:
   dispatch records to ``ksched.dispatch.<tenant>`` (failpoints ``before_produce``
   and ``after_produce`` around them), occurrence events, DLQ records, completed
   schedules, tombstones of purged ones;
3. write state: the changed runtime state, then the shard's cursors (its
   watermark) when anything was written or a second has passed, to ``ksched.state``;
4. send offsets: ``send_offsets_to_transaction`` for the consumed commands (past the last
   record taken from each tenant's ``commands.<tenant>[p]``), chosen here and sent on the
   commit thread right before the commit (a record polled always makes the commit run there);
5. commit: failpoint ``before_commit``; a tick with no transaction closes at once;
   one that wrote commits on a commit thread while the loop goes on to the
   next shard's steps 1-5 (a commit mostly waits for the broker's acks), and
   :meth:`Checkpoint.join` waits for it (then failpoint ``after_commit``).

A ``KafkaException`` from any step goes to :meth:`Checkpoint.fail`: it aborts the
transaction if one was begun (or, fenced, leaves it to the next owner) and says how the shard is
given up (:class:`scheduler.processor.ownership.Loss`). Nothing of the tick becomes visible.

No transaction is open across a poll or a rebalance callback: :class:`Checkpoints`
knows every open checkpoint, and the loop's poll and the ownership callbacks call
:meth:`Checkpoints.assert_none_open`, which raises :class:`TransactionOpenError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from scheduler.kafka.clients import Messages, produce_run, produce_waiting
from scheduler.processor import wire, wire_state
from scheduler.processor.attempts import Attempt
from scheduler.processor.clock_probe import ClockProbe
from scheduler.processor.emission_faults import EmissionFaults
from scheduler.processor.failpoints import FailpointHook
from scheduler.processor.model import DueOccurrence, Entry, Event
from scheduler.processor.outputs import CommandOutcome, TickOutput
from scheduler.processor.ownership import Loss, OwnedShard
from scheduler.records import CommandResult, DlqEntry, Occurrence, OccurrenceEvent, OccurrenceEvents, Record
from scheduler.records.framer import Framer
from scheduler.records.registry import RegistryClient
from scheduler.settings import Settings
from scheduler.topology import tenant_of, topic_name

log = logging.getLogger("ksched.processor")

# Producer errors that mean another owner has the shard's transactional id. A fenced producer's
# produce() raises _FATAL (its fatal() flag is not always set on that error object).
_FENCED_CODES = (KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
BEGIN, PRODUCE, STATE, OFFSETS, COMMIT = 1, 2, 3, 4, 5


class TransactionOpenError(RuntimeError):
    """A poll or a rebalance callback was reached while a shard's transaction was open."""


class TransactionOrderError(RuntimeError):
    """A checkpoint step ran after a later one, or after the checkpoint closed."""


# The records other services read, framed per the record_framing setting (docs/contract.md).
FRAMED: tuple[tuple[type[Record], str], ...] = (
    (Occurrence, "dispatch"), (CommandResult, "results"), (OccurrenceEvent, "occurrence-events"),
    (DlqEntry, "dlq"),
)


class Topics:
    """The topic names a checkpoint writes to (per-tenant names made once), and the header each
    framed record type carries on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        confluent = settings.record_framing == "confluent"
        self.framer = Framer(RegistryClient(url=settings.schema_registry_url) if confluent else None)
        self._framed_tenants: set[str] = set()
        self.schedules = topic_name(settings, "schedules")
        self.history = topic_name(settings, "schedule-history")
        self.state = topic_name(settings, "state")
        self._per_tenant: dict[tuple[str, str], str] = {}
        self._tenant_of: dict[str, str] = {}
        self._events: dict[str, tuple[str, bytes, bytes]] = {}

    def commands_tenant(self, topic: str) -> str:
        """The tenant whose ``<namespace>.commands.<tenant>`` ``topic`` is (the processor reads no other)."""
        tenant = self._tenant_of.get(topic)
        if tenant is None:
            tenant = tenant_of(self.settings, "commands", topic)
            if tenant is None:
                raise ValueError(f"{topic} is not a tenant's commands topic")
            self._tenant_of[topic] = tenant
        return tenant

    def of(self, name: str, tenant: str) -> str:
        """``<namespace>.<name>.<tenant>`` (dispatch, versions, dlq, results, occurrence-events)."""
        topic = self._per_tenant.get((name, tenant))
        if topic is None:
            topic = self._per_tenant[(name, tenant)] = topic_name(self.settings, name, tenant)
        return topic

    def header(self, cls: type[Record], name: str, tenant: str) -> bytes:
        return self.framer.header(cls, self.of(name, tenant))

    def events_of(self, tenant: str) -> tuple[str, bytes, bytes]:
        """``tenant``'s occurrence-events topic, its ``OccurrenceEvent`` header and its
        ``OccurrenceEvents`` header (empty when events go one a record: the ``batch_events``
        setting off, or Confluent framing, whose subject holds the one record type): one lookup
        per run of events written instead of four."""
        target = self._events.get(tenant)
        if target is None:
            name = "occurrence-events"
            batch = self.settings.batch_events and not self.framer.confluent
            target = (self.of(name, tenant), self.header(OccurrenceEvent, name, tenant),
                      self.header(OccurrenceEvents, name, tenant) if batch else b"")
            self._events[tenant] = target
        return target

    def dispatch_header(self, tenant: str) -> bytes:
        return self.framer.header(Occurrence, self.of("dispatch", tenant))

    def frame_tenants(self, tenants: Iterable[str]) -> None:
        """Confluent framing: register (or look up) the framed schemas under the subjects of the
        tenants' topics not met yet, before any of their records is written (RegistryError names
        the fix). Nothing to do in single-object framing."""
        if not self.framer.confluent:
            return
        for tenant in tenants:
            if tenant not in self._framed_tenants:
                for cls, name in FRAMED:
                    self.header(cls, name, tenant)
                self._framed_tenants.add(tenant)


class Checkpoint:
    """The transaction of one tick of one owned shard (steps in the module docstring)."""

    def __init__(
        self,
        owned: OwnedShard,
        records: list[Message],
        clock: float,
        failpoint: FailpointHook,
        registry: Checkpoints,
    ) -> None:
        self.owned = owned
        self.records = records  # the shard's inputs, in offset order per topic: step 4 commits past the last
        self.clock = clock
        self.started = time.monotonic()
        self.out = TickOutput()  # the due output (step 2), observed once committed
        self.events: dict[tuple[str, str], int] = {}  # occurrence events written, by (tenant, state)
        self._failpoint = failpoint
        self._registry = registry
        self._p = owned.partition.partition
        self._begun = False  # step 1's begin_transaction() ran (:meth:`_tx`)
        self._offsets: tuple[list[TopicPartition], object] | None = None  # step 4's, sent at step 5
        self._step = 0
        self._closed = False
        self._future: Future[None] | None = None

    @property
    def dispatched(self) -> bool:
        """The tick emits dispatch records (the failpoints fire only in such ticks)."""
        return bool(self.out.dispatch)

    def _at(self, step: int) -> None:
        if self._closed or step < self._step:
            raise TransactionOrderError(f"shard {self._p}: step {step} after step {self._step}"
                                        f"{' (closed)' if self._closed else ''}")
        self._step = step

    def _tx(self) -> Producer:
        """The shard's producer, its transaction begun: step 1's ``begin_transaction()`` at the
        tick's first write (marked begun first, so a refused begin is aborted as before)."""
        if not self._begun:
            self._begun = True
            self.owned.producer.begin_transaction()
        return self.owned.producer

    def _produce(self, topic: str, value: bytes | None, key: bytes, partition: int = -1) -> None:
        produce_waiting(self._tx(), topic, value, key, partition)

    def _produce_with(self, topic: str, value: bytes, key: bytes, on_delivery: Callable[..., None]) -> None:
        producer = self._tx()
        while True:
            try:
                producer.produce(topic, value, key, partition=self._p, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)

    def _close(self) -> None:
        self._closed = True
        self._registry._open.discard(self)

    # -- 1. begin -----------------------------------------------------------------
    def begin(self) -> None:
        self._at(BEGIN)
        self._registry._open.add(self)
        if self.records:
            self._tx()

    # -- 2. produce ---------------------------------------------------------------
    def result(self, outcome: CommandOutcome, now: int, tenant: str) -> None:
        """A command's answer on the results topic of ``tenant``, whose commands topic it came on.

        Keyed by request id but written to the shard's own partition, not the key's: librdkafka
        sends one partition per ProduceRequest and the broker writes a commit marker per
        partition, so a tick's results spread by key cost ~3 requests and markers more per
        transaction (docs/decisions.md). Callers read every partition of the topic anyway."""
        self._at(PRODUCE)
        header = self._registry.topics.header(CommandResult, "results", tenant)
        value = wire.encode_result(outcome, now, header)
        topic = self._registry.topics.of("results", tenant)
        self._produce(topic, value, outcome.request_id.encode(), self._p)

    def undecodable(self, offset: int | None, key: bytes | None, reason: str, now: int, tenant: str) -> None:
        """The answer to a record of ``commands.<tenant>[p]`` that is not a command or a report."""
        self._at(PRODUCE)
        rid = f"undecodable-{self._p}-{offset}"
        header = self._registry.topics.header(CommandResult, "results", tenant)
        value = wire.encode_undecodable_result(rid, self._p, offset or 0, key, reason, now, header)
        self._produce(self._registry.topics.of("results", tenant), value, rid.encode(), self._p)

    def schedule_change(self, entry: Entry, kind: str, request_id: str, now: int) -> None:
        """The schedules (the processors' and the tenant's copy), history and versions records of
        an accepted command's change (a completion's: :meth:`completions`)."""
        self._at(PRODUCE)
        topics, key = self._registry.topics, entry.schedule_id.encode()
        sched, hist, version = wire_state.encode_schedule_change(
            entry, kind, request_id, now, self.owned.shard
        )
        self._produce(topics.schedules, sched, key, self._p)
        self._produce(topics.of("schedules", entry.tenant), sched, key, self._p)
        self._produce(topics.history, hist, key, self._p)
        self._produce(topics.of("versions", entry.tenant), version, key, self._p)

    def completions(self, entries: list[Entry], now: int) -> None:
        """The COMPLETED records of schedules with no fire time left (the shard's own changes):
        the processors' and the tenant's schedules records, each topic's in one ``produce_batch``
        call (a burst of one-time schedules completes them all within seconds, one per final
        report). No versions record: a worker's recheck runs an occurrence of a COMPLETED
        schedule as it runs one of the ACTIVE version before it (docs/contract.md, "Workers"), so
        the record would change no verdict, and every process of the tenant's workers would apply
        one per occurrence of a one-time burst (docs/decisions.md, "A completion writes no versions
        record")."""
        self._at(PRODUCE)
        topics, p = self._registry.topics, self._p
        internal: Messages = []
        own: dict[str, Messages] = {}  # by tenant: its schedules records
        encode, now_ms = wire_state.encode_completion, now * 1000
        for entry in entries:
            sched = encode(entry, now_ms)
            key = entry.schedule_id.encode()
            internal.append({"value": sched, "key": key})
            run = own.get(entry.tenant)
            if run is None:
                run = own[entry.tenant] = []
            run.append({"value": sched, "key": key})  # a dict of its own: produce_batch marks refusals in it
        producer = self._tx()
        produce_run(producer, topics.schedules, internal, p)
        for tenant, schedules in own.items():
            produce_run(producer, topics.of("schedules", tenant), schedules, p)

    def lifecycle(self, events: list[Event], dead: list[Attempt], now: int) -> None:
        """Occurrence events, and the DLQ records of occurrences declared dead."""
        self._at(PRODUCE)
        topics, shard, p, counts = self._registry.topics, self.owned.shard, self._p, self.events
        for topic, run in wire.event_runs(events, now, topics.events_of, counts):  # a produce_batch a run
            produce_run(self._tx(), topic, run, p)
        for a in dead:
            header = topics.header(DlqEntry, "dlq", a.tenant)
            value = wire.encode_dead_letter(a, shard.entries.get(a.schedule_id), shard, now, header)
            self._produce(topics.of("dlq", a.tenant), value, a.schedule_id.encode(), self._p)

    def due(self, out: TickOutput) -> None:
        """The tick's due output: dispatch records, events, DLQ records, completions, purges."""
        self._at(PRODUCE)
        self.out = out
        now, p, topics = int(self.clock), self._p, self._registry.topics
        again: list[DueOccurrence] = []
        if out.dispatch:
            self._tx()  # begun even if an emission fault drops every record: the tick writes its state
            self._failpoint.hit("before_produce")
            if self._registry.fault is not None:  # tests only (emission_faults.py); None otherwise
                again = self._registry.fault.take(out.dispatch)
        stamp = wire.dispatch_stamp(int(self.clock * 1000))
        header_of = topics.dispatch_header
        rest = out.dispatch
        probe = self._registry.probe.on_delivery() if rest and self._registry.probe else None
        if probe is not None:  # the first record carries the clock probe (clock_probe.py)
            first, rest = rest[0], rest[1:]
            value = wire.encode_dispatch(first, stamp, header_of)
            self._produce_with(topics.of("dispatch", first.tenant), value, first.schedule_id.encode(), probe)
        if rest:
            wire.produce_dispatch(rest, stamp, lambda t: topics.of("dispatch", t), header_of,
                                  partial(produce_run, self._tx()), p)
        for occ in again:  # an emission fault's second copy, outside the transaction (tests only)
            assert self._registry.fault is not None
            value = wire.encode_dispatch(occ, stamp, header_of)
            self._registry.fault.produce_again(topics.settings, topics.of("dispatch", occ.tenant),
                                               value, occ.schedule_id.encode(), p)
        self.lifecycle(out.events, out.dead, now)
        if out.completed:
            self.completions(out.completed, now)
        for entry in out.purged:
            # Tombstones: the compacted topics forget the schedule (the history topic keeps its story).
            key = entry.schedule_id.encode()
            self._produce(topics.schedules, None, key, p)
            self._produce(topics.of("schedules", entry.tenant), None, key, p)
            self._produce(topics.of("versions", entry.tenant), None, key, p)
            self._produce(topics.state, None, key, p)
        self.owned.producer.poll(0)  # delivery callbacks (the clock probe's): no transaction needed
        if out.dispatch:
            self._failpoint.hit("after_produce")  # everything the tick produces is in the transaction

    # -- 3. write state -----------------------------------------------------------
    def write_state(self) -> None:
        self._at(STATE)
        owned, shard, p, now = self.owned, self.owned.shard, self._p, int(self.clock)
        t_state = self._registry.topics.state
        for sid, view in shard.runtime_changes():
            tenant = view and shard.entries[sid].tenant
            self._produce(t_state, wire_state.encode_runtime(sid, tenant or "", view, now), sid.encode(), p)
        if self._begun or self.clock - owned.last_state_write >= 1.0:
            value = wire_state.encode_shard_state(shard, self.clock)
            self._produce(t_state, value, wire_state.shard_state_key(p), p)
            owned.last_state_write = self.clock

    def quota_demand(self, topic: str, key: bytes, value: bytes) -> None:
        """The shard's demand per tenant (:mod:`scheduler.processor.quota_feed`), in the tick's
        transaction: visible with the tick it reflects, never from a fenced owner."""
        self._at(STATE)
        self._produce(topic, value, key)

    # -- 4. send offsets ----------------------------------------------------------
    def send_offsets(self, consumer: Consumer) -> None:
        self._at(OFFSETS)
        if self.records:
            last: dict[str, int] = {}
            for m in self.records:  # in offset order per topic: the last one wins
                last[m.topic() or ""] = m.offset() or 0
            tps = [TopicPartition(topic, self._p, offset + 1) for topic, offset in last.items()]
            # Sent on the commit thread, just before the commit: its two round trips (AddOffsetsToTxn,
            # TxnOffsetCommit) then overlap the other shards' instead of adding up on the loop.
            self._offsets = (tps, consumer.consumer_group_metadata())

    # -- 5. commit ----------------------------------------------------------------
    def commit(self) -> bool:
        """Commit; True when the commit runs on the commit thread (then :meth:`join` it)."""
        self._at(COMMIT)
        if self.dispatched:
            self._failpoint.hit("before_commit")
        if not self._begun:  # nothing written, no transaction: nothing to commit
            self._close()
            return False
        self._future = self._registry.submit(self._send_offsets_and_commit)
        return True

    def _send_offsets_and_commit(self, timeout_s: float) -> None:
        if self._offsets is not None:
            self.owned.producer.send_offsets_to_transaction(*self._offsets, timeout_s)
        self.owned.producer.commit_transaction(timeout_s)

    def join(self) -> None:
        """Wait for the commit started by :meth:`commit`; raises its KafkaException (then :meth:`fail`)."""
        assert self._future is not None and self._step == COMMIT
        self._future.result()
        self._close()
        if self.dispatched:
            self._failpoint.hit("after_commit")

    # -- any step failed ----------------------------------------------------------
    def fail(self, exc: KafkaException) -> Loss:
        """Close the checkpoint after ``exc``: abort its transaction unless the producer is fenced
        (never re-initialise it: that would fence the shard's rightful owner). Returns why the
        shard must be given up (:meth:`scheduler.processor.ownership.Ownership.give_up`)."""
        self._close()
        err: KafkaError = exc.args[0]
        if err.fatal() or err.code() in _FENCED_CODES:
            log.error("shard %d: producer fenced (%s): another processor owns it; dropping", self._p, err)
            return Loss.FENCED
        if not self._begun:
            log.warning("shard %d: tick failed before its first write: %s; restoring", self._p, err)
            return Loss.ABORTED
        log.warning("shard %d: tick aborted: %s; restoring", self._p, err)
        try:
            self.owned.producer.abort_transaction(30)
        except KafkaException as again:
            log.error("shard %d: abort failed (%s): dropping the shard and rejoining", self._p, again.args[0])
            return Loss.ABORT_FAILED
        return Loss.ABORTED


class Checkpoints:
    """Makes the checkpoints of one processor, runs their commits, and knows which are open."""

    def __init__(self, settings: Settings, commit_threads: int, probe: ClockProbe | None = None) -> None:
        self.topics = Topics(settings)
        self.probe = probe  # samples the broker's clock on a dispatch record now and then
        self.fault = EmissionFaults.from_env()  # a test's emission fault; None in production
        self._open: set[Checkpoint] = set()
        self._committer = ThreadPoolExecutor(max_workers=commit_threads, thread_name_prefix="commit")

    def open(
        self, owned: OwnedShard, records: list[Message], clock: float, failpoint: FailpointHook
    ) -> Checkpoint:
        """A checkpoint for one tick of ``owned`` consuming ``records``; nothing is sent until ``begin``."""
        return Checkpoint(owned, records, clock, failpoint, self)

    def submit(self, commit: Callable[[float], None]) -> Future[None]:
        return self._committer.submit(commit, 30)

    def assert_none_open(self, where: str) -> None:
        """Raise TransactionOpenError if any checkpoint is open (before a poll or in a rebalance callback)."""
        if self._open:
            shards = sorted(cp.owned.partition.partition for cp in self._open)
            raise TransactionOpenError(f"{where} while the transaction of shard(s) {shards} is open")

    def shutdown(self) -> None:
        """Stopping: wait for the commits in flight (none may run on a dropped producer), forget the rest."""
        self._committer.shutdown(wait=True)
        self._open.clear()
