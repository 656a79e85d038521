"""The checkpoint is the only commit order, and no transaction is open across a poll or a
rebalance callback (unit tests: a recording producer and consumer, no Kafka)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from scheduler.domain import ScheduleSpec
from scheduler.processor import runtime
from scheduler.processor.checkpoint import (
    Checkpoint,
    Checkpoints,
    TransactionOpenError,
    TransactionOrderError,
)
from scheduler.processor.ownership import Loss, OwnedShard
from scheduler.processor.runtime import Processor
from scheduler.processor.shard import Shard
from scheduler.settings import Settings
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)
TENANTS = {"a": Tenant(name="a")}


class RecordingProducer:
    """Records the transactional calls in order; ``fail`` makes one of them raise."""

    def __init__(self, fail: dict[str, KafkaError] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or {}

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise KafkaException(self.fail[name])

    def begin_transaction(self) -> None:
        self._call("begin")

    def produce(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int = -1, on_delivery: Any = None
    ) -> None:
        self._call(f"produce {topic.split('.', 1)[1]}")

    def produce_batch(self, topic: str, messages: list[dict[str, bytes]], partition: int = -1) -> int:
        for m in messages:  # as the real client: each record in order (the log names each)
            self.produce(topic, m.get("value"), m.get("key"), partition)
        return len(messages)

    def poll(self, timeout: float) -> int:
        return 0

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], meta: Any, timeout: float) -> None:
        self.offsets = offsets
        self._call(f"offsets {' '.join(str(tp.offset) for tp in offsets)}")

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort")


class RecordingConsumer:
    def __init__(self) -> None:
        self.polls = 0

    def consumer_group_metadata(self) -> object:
        return object()

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.polls += 1
        return []


class Record:
    """A consumed record of ``commands.<tenant>[p]`` (only what the checkpoint reads)."""

    def __init__(self, offset: int, topic: str = "ksched.commands.acme") -> None:
        self._offset = offset
        self._topic = topic

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return self._topic


def records(*offsets: int) -> list[Any]:
    return [Record(o) for o in offsets]


class Points:
    def __init__(self) -> None:
        self.hits: list[str] = []

    def hit(self, point: str) -> None:
        self.hits.append(point)


def owned_shard(producer: RecordingProducer, schedules: int = 0) -> OwnedShard:
    shard = Shard(0, TENANTS, partitions=1)
    for i in range(schedules):
        spec = ScheduleSpec(kind="cron", cron="0 * * * *", timezone="UTC", handler="h")
        shard.apply(kind="CREATE", request_id=f"r{i}", tenant="a", schedule_id=f"s{i}", idempotency_key=None,
                    expected_version=None, spec=spec, issued_at=T0 - 30, now=T0 - 30)
    return OwnedShard(shard, producer, TopicPartition("ksched.shards", 0))  # type: ignore[arg-type]


def tick(cps: Checkpoints, owned: OwnedShard, records: list[Any], points: Points) -> Checkpoint:
    """Steps 1-5 in order, as the runtime runs them; the commit may be in flight."""
    cp = cps.open(owned, records, float(T0 + 1), points)
    cp.begin()
    cp.due(owned.shard.due(T0 + 1, 100, float(T0 + 1)))
    cp.write_state()
    cp.send_offsets(RecordingConsumer())  # type: ignore[arg-type]
    if cp.commit():
        cp.join()
    return cp


def test_step_4_commits_past_the_last_record_of_each_tenants_commands_topic() -> None:
    """A shard reads partition p of every tenant's commands topic: one offset each, past its last."""
    producer, points = RecordingProducer(), Points()
    cps = Checkpoints(Settings(), commit_threads=1)
    mixed = [Record(7, "ksched.commands.a"), Record(41, "ksched.commands.b"), Record(8, "ksched.commands.a"),
             Record(42, "ksched.commands.b"), Record(3, "ksched.commands.c")]
    tick(cps, owned_shard(producer, schedules=0), mixed, points)
    got = {(tp.topic, tp.partition, tp.offset) for tp in producer.offsets}
    assert got == {("ksched.commands.a", 0, 9), ("ksched.commands.b", 0, 43), ("ksched.commands.c", 0, 4)}


def test_the_steps_run_in_the_one_commit_order_and_the_failpoints_around_them() -> None:
    producer, points = RecordingProducer(), Points()
    cps = Checkpoints(Settings(), commit_threads=1)
    tick(cps, owned_shard(producer, schedules=2), records(41, 42), points)
    cps.assert_none_open("poll")
    assert producer.calls == [
        "begin", "produce dispatch.a", "produce dispatch.a",
        "produce state", "offsets 43", "commit",
    ]
    assert points.hits == ["before_produce", "after_produce", "before_commit", "after_commit"]
    cps.shutdown()


def test_an_idle_tick_has_no_transaction_and_hits_no_failpoint() -> None:
    """Nothing consumed, due or to write: no begin, no commit (each a wait on librdkafka)."""
    producer, points = RecordingProducer(), Points()
    cps = Checkpoints(Settings(), commit_threads=1)
    owned = owned_shard(producer)
    owned.last_state_write = float(T0 + 1)  # the shard state was written this second
    cp = tick(cps, owned, [], points)
    assert producer.calls == [] and not points.hits and not cp.dispatched
    cps.assert_none_open("poll")
    owned.last_state_write = float(T0)  # a second ago: the shard state is written, in a transaction
    tick(cps, owned, [], points)
    assert producer.calls == ["begin", "produce state", "commit"] and not points.hits
    cps.assert_none_open("poll")
    cps.shutdown()


def test_a_tick_begins_its_transaction_at_its_first_write() -> None:
    """No records: the transaction begins with the first record the tick writes, not before."""
    producer = RecordingProducer()
    cps = Checkpoints(Settings(), commit_threads=1)
    cp = cps.open(owned_shard(producer, schedules=1), [], float(T0 + 1), Points())
    cp.begin()
    assert producer.calls == []
    cp.due(cp.owned.shard.due(T0 + 1, 10, float(T0 + 1)))
    assert producer.calls == ["begin", "produce dispatch.a"]
    cp.write_state()
    cp.send_offsets(RecordingConsumer())  # type: ignore[arg-type]
    assert cp.commit()
    cp.join()
    assert producer.calls == ["begin", "produce dispatch.a", "produce state", "commit"]
    cps.shutdown()


def test_a_failure_before_any_write_aborts_nothing() -> None:
    producer = RecordingProducer()
    cps = Checkpoints(Settings(), commit_threads=1)
    cp = cps.open(owned_shard(producer), [], float(T0), Points())
    cp.begin()
    assert cp.fail(KafkaException(KafkaError(KafkaError._TIMED_OUT))) is Loss.ABORTED
    assert producer.calls == []
    cps.assert_none_open("poll")
    cps.shutdown()


def test_a_step_cannot_run_after_a_later_one_nor_after_the_commit() -> None:
    cps = Checkpoints(Settings(), commit_threads=1)
    owned = owned_shard(RecordingProducer())
    cp = cps.open(owned, [], float(T0), Points())
    cp.begin()
    cp.write_state()
    with pytest.raises(TransactionOrderError):
        cp.due(owned.shard.due(T0, 10, float(T0)))  # produce after the state step
    cp.send_offsets(RecordingConsumer())  # type: ignore[arg-type]
    cp.commit()
    with pytest.raises(TransactionOrderError):
        cp.write_state()
    cps.shutdown()


def test_no_poll_and_no_rebalance_callback_while_a_checkpoint_is_open() -> None:
    proc = Processor(Settings(), tenants=TENANTS)
    consumer = RecordingConsumer()
    proc.consumer = consumer  # type: ignore[assignment]
    cp = proc.checkpoints.open(owned_shard(RecordingProducer()), [], float(T0), Points())
    cp.begin()
    with pytest.raises(TransactionOpenError, match=r"poll while the transaction of shard\(s\) \[0\] is open"):
        proc._poll(0.0)
    assert consumer.polls == 0
    for callback in (proc.ownership.on_assign, proc.ownership.on_revoke, proc.ownership.on_lost):
        with pytest.raises(TransactionOpenError):
            callback(consumer, [TopicPartition("ksched.shards", 0)])  # type: ignore[arg-type]
    cp.write_state()
    cp.send_offsets(consumer)  # type: ignore[arg-type]
    if cp.commit():
        cp.join()
    proc._poll(0.0)
    assert consumer.polls == 1
    proc.checkpoints.shutdown()


def processor_with_due(producer: RecordingProducer, budget: int, **kw: Any) -> Processor:
    """A processor owning shard 0 with three schedules due at ``T0``, ticking ``budget`` a tick."""
    proc = Processor(Settings(), tenants=TENANTS, tick_budget=budget, **kw)
    proc.consumer = RecordingConsumer()  # type: ignore[assignment]
    proc.ownership.owned[0] = owned_shard(producer, schedules=3)
    return proc


@pytest.mark.parametrize(("budget", "behind"), [(1, True), (10, False)])
def test_the_burst_rounds_say_whether_shards_are_still_behind(
    budget: int, behind: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards still filling their budget when the rounds' time runs out: the heap's settle waits."""
    monkeypatch.setattr(runtime, "BURST_ROUNDS_S", 0.0)
    producer = RecordingProducer()
    proc = processor_with_due(producer, budget)
    assert proc._burst_rounds([proc._tick(proc.owned[0], [], float(T0 + 1))]) is behind
    assert producer.calls.count("produce dispatch.a") == min(budget, 3)
    proc.checkpoints.assert_none_open("poll")
    proc.checkpoints.shutdown()


def test_burst_rounds_that_catch_up_say_the_shards_are_not_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer is the shards' state when the rounds end, not after the first tick."""
    monkeypatch.setattr(runtime, "BURST_ROUNDS_S", 5.0)
    producer = RecordingProducer()
    proc = processor_with_due(producer, 2)
    assert proc._burst_rounds([proc._tick(proc.owned[0], [], float(T0 + 1))]) is False  # full, then not
    assert producer.calls.count("produce dispatch.a") == 3
    proc.checkpoints.shutdown()


def test_the_loop_tells_the_heaps_settle_whether_shards_are_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "BURST_ROUNDS_S", 0.0)
    proc = processor_with_due(RecordingProducer(), 1, clock=lambda: float(T0 + 1))
    settles: list[bool] = []
    monkeypatch.setattr(proc.heap, "settle", lambda force=False, *, behind=False: settles.append(behind))
    monkeypatch.setattr(proc.ownership.standby, "follow", lambda owned: None)  # no warm copies here
    monkeypatch.setattr(proc.ownership.standby, "poll", lambda budget_s: None)
    proc._loop_once()  # one of three due dispatched: behind
    assert settles == [True]
    proc.tick_budget = 10
    proc._loop_once()  # the other two: caught up
    assert settles == [True, False]
    proc.checkpoints.shutdown()


@pytest.mark.parametrize(
    ("clock", "due_in", "max_bytes"),
    [
        (T0 - 30.0, 30.0, runtime.POLL_BYTES_CLEAR),  # nothing due for a while: a backlog goes faster
        (T0 - 2.0, 2.0, runtime.POLL_BYTES_CLEAR),
        (T0 - 1.05, 1.05, runtime.POLL_BYTES),  # due within a second of the poll's end (its 0.1 s wait)
        (T0 - 0.5, 0.5, runtime.POLL_BYTES),  # due soon: the poll's ticks must not hold it back
        (T0 + 1.0, 0.0, runtime.POLL_BYTES),  # due now (a burst, a shard behind)
    ],
)
def test_a_poll_takes_more_only_while_nothing_is_due_within_a_second(
    clock: float, due_in: float, max_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = processor_with_due(RecordingProducer(), 10, clock=lambda: clock)
    assert proc._due_in() == pytest.approx(due_in)
    assert loop_polls(proc, monkeypatch) == [(min(0.1, due_in), max_bytes)]  # waiting no longer than a tick
    proc.checkpoints.shutdown()


def loop_polls(proc: Processor, monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """The (timeout, max_bytes) of the polls of one ``_loop_once`` of ``proc``."""
    polls: list[tuple[float, int]] = []
    monkeypatch.setattr(proc, "_poll", lambda timeout, max_bytes: polls.append((timeout, max_bytes)) or [])
    monkeypatch.setattr(proc.ownership.standby, "follow", lambda owned: None)
    monkeypatch.setattr(proc.ownership.standby, "poll", lambda budget_s: None)
    monkeypatch.setattr(proc, "_prepare_ahead", lambda idle_s: idle_s)  # the poll gets the whole wait
    proc._loop_once()
    return polls


@pytest.mark.parametrize("schedules", [None, 0], ids=["no-shard", "empty-shard"])
def test_with_no_work_due_a_poll_waits_a_tick_and_takes_the_larger_size(
    schedules: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = Processor(Settings(), tenants=TENANTS, clock=lambda: float(T0))
    proc.consumer = RecordingConsumer()  # type: ignore[assignment]
    if schedules is not None:
        proc.ownership.owned[0] = owned_shard(RecordingProducer(), schedules=schedules)
    assert proc._due_in() == math.inf
    assert loop_polls(proc, monkeypatch) == [(0.1, runtime.POLL_BYTES_CLEAR)]
    proc.checkpoints.shutdown()


@pytest.mark.parametrize(
    ("code", "loss", "last_call"),
    [
        (KafkaError._FENCED, Loss.FENCED, "commit"),  # never aborted: the next owner's init does it
        (KafkaError._FATAL, Loss.FENCED, "commit"),
        (KafkaError._TIMED_OUT, Loss.ABORTED, "abort"),
    ],
)
def test_a_failed_commit_closes_the_checkpoint_and_names_the_loss(
    code: int, loss: Loss, last_call: str
) -> None:
    producer = RecordingProducer(fail={"commit": KafkaError(code)})
    cps = Checkpoints(Settings(), commit_threads=1)
    cp = cps.open(owned_shard(producer, schedules=1), records(0), float(T0 + 1), Points())
    cp.begin()
    cp.due(cp.owned.shard.due(T0 + 1, 10, float(T0 + 1)))
    cp.write_state()
    cp.send_offsets(RecordingConsumer())  # type: ignore[arg-type]
    assert cp.commit()
    with pytest.raises(KafkaException):
        cp.join()
    with pytest.raises(TransactionOpenError):
        cps.assert_none_open("poll")  # open until the failure is handled
    assert cp.fail(KafkaException(KafkaError(code))) is loss
    assert producer.calls[-1] == last_call
    cps.assert_none_open("poll")
    cps.shutdown()


def test_an_abort_that_fails_asks_for_a_rejoin() -> None:
    refused = KafkaError(KafkaError._STATE)
    producer = RecordingProducer(fail={"begin": refused, "abort": refused})
    cps = Checkpoints(Settings(), commit_threads=1)
    cp = cps.open(owned_shard(producer), records(0), float(T0), Points())
    with pytest.raises(KafkaException) as exc:
        cp.begin()  # a record consumed: the transaction begins at once
    assert cp.fail(exc.value) is Loss.ABORT_FAILED
    cps.assert_none_open("poll")
    cps.shutdown()


class PartitionRecorder(RecordingProducer):
    """Records where each record went: (topic, key, partition)."""

    def __init__(self) -> None:
        super().__init__()
        self.placed: list[tuple[str, bytes | None, int]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int = -1) -> None:
        self.placed.append((topic, key, partition))
        super().produce(topic, value, key, partition)


@pytest.mark.parametrize("shard", [0, 3])
def test_a_result_goes_to_its_shards_partition_not_its_keys(shard: int) -> None:
    """One partition of results.<tenant> per transaction, not ~3.5 spread by request id
    (librdkafka sends one partition per ProduceRequest; the broker marks each at commit):
    every reader reads all of the topic's partitions, so nobody looks a result up by key."""
    from scheduler.processor.outputs import CommandOutcome

    producer = PartitionRecorder()
    cps = Checkpoints(Settings(), commit_threads=1)
    owned = owned_shard(producer, schedules=0)
    owned.partition = TopicPartition("ksched.shards", shard)
    cp = cps.open(owned, [], float(T0 + 1), Points())
    cp.begin()
    for rid in ("r-1", "r-2", "r-3", "r-4", "r-5", "r-6"):
        cp.result(CommandOutcome(request_id=rid, tenant="a", schedule_id="s", accepted=False,
                                 reason="test"), T0 + 1, "a")
    cp.undecodable(7, b"k", "not a command", T0 + 1, "a")
    results = [(t, k, p) for t, k, p in producer.placed if t == "ksched.results.a"]
    assert len(results) == 7 and {p for _, _, p in results} == {shard}
    assert [k for _, k, _ in results][:2] == [b"r-1", b"r-2"]  # still keyed by request id
    cps.shutdown()


class ValueRecorder(RecordingProducer):
    """Records each record whole: (topic, key, value, partition)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, bytes | None, bytes | None, int]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int = -1) -> None:
        self.records.append((topic, key, value, partition))
        super().produce(topic, value, key, partition)

    def on(self, topic: str) -> list[bytes | None]:
        return [k for t, k, _, _ in self.records if t == topic]


def test_a_ticks_events_and_completions_go_to_each_tenants_topics_in_order() -> None:
    """Events of tenants a, b, a: each tenant's on its own events topic, in order. Completions of
    entries of both tenants: the processors' schedules topic gets all of them in order, each
    tenant's schedules topic its own entries' records (a run per topic each), and no versions
    topic anything (a COMPLETED changes no worker's verdict)."""
    from scheduler.processor.model import Event
    from scheduler.records import Schedule, decode, occurrence_events

    producer = ValueRecorder()
    cps = Checkpoints(Settings(), commit_threads=1)
    tenants = {"a": Tenant(name="a"), "b": Tenant(name="b")}
    shard = Shard(0, tenants, partitions=1)
    spec = ScheduleSpec(kind="cron", cron="0 * * * *", timezone="UTC", handler="h")
    for tenant, sid in (("a", "a1"), ("b", "b1"), ("a", "a2")):
        shard.apply(kind="CREATE", request_id=f"r-{sid}", tenant=tenant, schedule_id=sid,
                    idempotency_key=None, expected_version=None, spec=spec, issued_at=T0 - 30, now=T0 - 30)
    owned = OwnedShard(shard, producer, TopicPartition("ksched.shards", 0))  # type: ignore[arg-type]
    cp = cps.open(owned, [], float(T0 + 1), Points())
    cp.begin()
    events = [Event(f"o-{sid}", sid, t, 1, T0, "SUCCEEDED") for t, sid in
              (("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3"))]
    cp.lifecycle(events, [], T0 + 1)
    # a run of two: one OccurrenceEvents record, unkeyed; a run of one: its keyed OccurrenceEvent
    assert producer.on("ksched.occurrence-events.a") == [None, b"a3"]
    assert producer.on("ksched.occurrence-events.b") == [b"b1"]
    for tenant, sids in (("a", ["a1", "a2", "a3"]), ("b", ["b1"])):
        values = [v for t, _, v, _ in producer.records if t == f"ksched.occurrence-events.{tenant}"]
        assert [e.schedule_id for v in values for e in occurrence_events(v)] == sids
    entries = [shard.entries[sid] for sid in ("a1", "b1", "a2")]
    cp.completions(entries, T0 + 1)
    assert producer.on("ksched.schedules") == [b"a1", b"b1", b"a2"]
    for tenant, sids in (("a", ["a1", "a2"]), ("b", ["b1"])):
        got = [(k, v) for t, k, v, _ in producer.records if t == f"ksched.schedules.{tenant}"]
        assert [k for k, _ in got] == [s.encode() for s in sids]
        assert [decode(v or b"", Schedule).schedule_id for _, v in got] == sids
    assert not [t for t, *_ in producer.records if t.startswith("ksched.versions.")]
    assert {p for *_, p in producer.records} == {0}
    cps.shutdown()


def test_events_go_in_batches_unless_the_setting_is_off_or_the_framing_is_confluents() -> None:
    """``Topics.events_of``: the ``OccurrenceEvents`` header by default; none (an event a record)
    with ``batch_events`` off, or in Confluent framing, whose subject holds one record type."""
    from scheduler.processor.checkpoint import Topics
    from scheduler.records import OccurrenceEvent, OccurrenceEvents, schema_header

    topic, header, batch = Topics(Settings()).events_of("a")
    assert (topic, header, batch) == ("ksched.occurrence-events.a", schema_header(OccurrenceEvent),
                                      schema_header(OccurrenceEvents))
    assert Topics(Settings(batch_events=False)).events_of("a")[1:] == (schema_header(OccurrenceEvent), b"")

    class Confluent:  # a registry's framer: every record type gets its id's header
        confluent = True

        def header(self, cls: type, topic: str) -> bytes:
            return b"\x00\x00\x00\x00\x07" if cls is OccurrenceEvent else b"\x00\x00\x00\x00\x08"

    topics = Topics(Settings())
    topics.framer = Confluent()  # type: ignore[assignment]
    assert topics.events_of("a")[1:] == (b"\x00\x00\x00\x00\x07", b"")


def test_a_tick_whose_dispatch_a_fault_drops_still_writes_its_state() -> None:
    """A tick with dispatch records begins its transaction even when an emission fault (tests
    only) drops every one: it writes the shard's state as any dispatching tick does."""
    from scheduler.processor.emission_faults import EmissionFaults

    producer = RecordingProducer()
    cps = Checkpoints(Settings(), commit_threads=1)
    cps.fault = EmissionFaults({"s0": "drop"})
    owned = owned_shard(producer, schedules=1)
    owned.last_state_write = float(T0 + 1)  # the shard state was written this second
    tick(cps, owned, [], Points())
    assert producer.calls == ["begin", "produce state", "commit"]
    cps.shutdown()
