"""Review of 43480c6: a burst's COMPLETED records wait for a tick with budget left (no Kafka).

``Log`` stands for what the checkpoint writes to ``ksched.schedules[p]`` (and the history
topic) in commit order: per tick, the accepted commands' records, then the tick's completions,
then its purge tombstones (``Checkpoint.due``). A new owner is restored from that log through
the real record codec, with the lane cursors the last committed tick wrote.
"""

from __future__ import annotations

from scheduler.domain import ScheduleSpec
from scheduler.history.mapping import Batch, Source
from scheduler.processor import wire_state
from scheduler.processor.lanes import Cursor
from scheduler.processor.model import Entry
from scheduler.processor.outputs import CommandOutcome, TickOutput
from scheduler.processor.shard import Shard
from scheduler.tenants import Tenant
from scheduler.vocabulary import Lane

T0 = 1_800_000_000 - (1_800_000_000 % 3600)
ONCE = ScheduleSpec(kind="once", at="2027-01-15T10:00:00", timezone="UTC", handler="h")
LATER = ScheduleSpec(kind="once", at="2027-01-16T10:00:00", timezone="UTC", handler="h")
TENANTS = {"a": Tenant(name="a", max_schedules=10)}


class Log:
    """The shard's ``ksched.schedules`` partition (uncompacted) and its history records."""

    def __init__(self) -> None:
        self.recs: list[tuple[str, bytes | None, bytes | None]] = []  # (sid, schedule, history)

    def change(self, s: Shard, e: Entry, kind: str, rid: str, now: int) -> None:
        sched, hist, _ = wire_state.encode_schedule_change(e, kind, rid, now, s)
        self.recs.append((e.schedule_id, sched, hist))

    def command(self, s: Shard, o: CommandOutcome, now: int) -> CommandOutcome:
        if o.accepted and o.entry is not None:  # what Inbox writes
            self.change(s, o.entry, o.kind, o.request_id, now)
        return o

    def complete(self, e: Entry, now: int) -> None:
        """What Checkpoint.completions writes: the schedule's record, no history record."""
        sched = wire_state.encode_completion(e, now * 1000)
        self.recs.append((e.schedule_id, sched, None))

    def tick(self, s: Shard, out: TickOutput, now: int) -> TickOutput:
        for e in out.completed:  # Checkpoint.due's order: completions, then tombstones
            self.complete(e, now)
        for e in out.purged:
            self.recs.append((e.schedule_id, None, None))
        return out

    def story(self, sid: str) -> list[tuple[int, str] | None]:
        """(version, state) of each record of ``sid``, None for a tombstone."""
        out: list[tuple[int, str] | None] = []
        for k, v, _ in self.recs:
            if k == sid:
                e = None if v is None else wire_state.decode_schedule_entry(v)
                out.append(None if e is None else (e.version, e.state))
        return out

    def last(self, sid: str) -> tuple[int, str] | None:
        return self.story(sid)[-1]

    def restore(self, cursors: dict[tuple[str, Lane], Cursor], now: int, retention: int = 604_800) -> Shard:
        r = Shard(0, TENANTS, partitions=1, finished_retention_s=retention)
        for sid, v, _ in self.recs:
            if v is None:
                r.forget(sid)
            else:
                r.restore_entry(wire_state.decode_schedule_entry(v))
        r.cursors = dict(cursors)
        r.finish_restore(now)
        return r

    def history_store(self) -> Batch:
        """What the history indexer makes of every record (tombstones are skipped)."""
        b = Batch()
        for _, v, h in self.recs:
            b.add(Source.SCHEDULES, None, v, T0 * 1000)
            if h is not None:
                b.add(Source.HISTORY, None, h, T0 * 1000)
        return b


def cmd(s: Shard, log: Log, kind: str, sid: str, now: int, spec: ScheduleSpec | None = None,
        expected: int | None = None) -> CommandOutcome:
    prior = s.take_completion(sid)  # what Inbox._command writes first
    if prior is not None:
        log.complete(prior, now)
    o = s.apply(kind=kind, request_id=f"{kind}-{sid}-{now}", tenant="a", schedule_id=sid,
                idempotency_key=None, expected_version=expected, spec=spec, issued_at=now, now=now)
    return log.command(s, o, now)


def tick(s: Shard, log: Log, now: int, budget: int) -> TickOutput:
    return log.tick(s, s.due(now, budget, float(now)), now)


def burst(n: int, retention: int = 7 * 86_400) -> tuple[Shard, Log, int]:
    s, log = Shard(0, TENANTS, partitions=1, finished_retention_s=retention), Log()
    for i in range(n):
        assert cmd(s, log, "CREATE", f"o{i}", T0, ONCE).accepted
    at = s.entries["o0"].next_for
    assert at is not None
    return s, log, at


# -- what holds --------------------------------------------------------------------------


def test_a_handover_mid_burst_completes_each_fired_schedule_once_and_fires_none_again() -> None:
    a, log, at = burst(10)
    first = tick(a, log, at, 6)  # committed: 6 fired, their completions queued (budget full)
    assert len(first.dispatch) == 6 and first.completed == []
    assert a.active_count["a"] == 4
    # a crashes; b restores what a committed (records and cursors) and arms it
    b = log.restore(a.cursor_map(), at + 1)
    assert b.active_count["a"] == 4  # the 6 fired ones counted out again at once
    fired = [d.schedule_id for d in first.dispatch]
    rest = tick(b, log, at + 1, 6)
    assert sorted(fired + [d.schedule_id for d in rest.dispatch]) == sorted(f"o{i}" for i in range(10))
    assert sorted(e.schedule_id for e in rest.completed) == sorted(f"o{i}" for i in range(10))
    for i in range(10):
        assert [x for x in log.story(f"o{i}") if x == (1, "COMPLETED")] == [(1, "COMPLETED")]
    assert tick(b, log, at + 2, 6).completed == []
    # a third owner finds them COMPLETED: nothing queued, nothing armed
    c = log.restore(b.cursor_map(), at + 3)
    assert not c.completing and c.active_count["a"] == 0


def test_a_restore_that_finds_an_ended_schedule_active_queues_it_but_fires_nothing() -> None:
    """Restore through the real codec: the record says ACTIVE, the cursor is past its only fire."""
    a, log, at = burst(3)
    tick(a, log, at, 3)  # budget exactly full: no completion written
    assert [log.last(f"o{i}") for i in range(3)] == [(1, "ACTIVE")] * 3
    b = log.restore(a.cursor_map(), at + 5)
    assert list(b.completing) == ["o0", "o1", "o2"]
    out = tick(b, log, at + 5, 100)
    assert out.dispatch == [] and len(out.completed) == 3
    assert all(e.finished_at == at + 5 for e in out.completed)


def test_an_update_between_the_fire_and_the_completion_is_never_overwritten() -> None:
    a, log, at = burst(2)
    tick(a, log, at, 2)
    assert cmd(a, log, "UPDATE", "o0", at + 1, LATER, expected=1).version == 2
    out = tick(a, log, at + 1, 100)
    assert [e.schedule_id for e in out.completed] == ["o1"]
    # the UPDATE wrote v1's queued completion first: COMPLETED v1 before v2, never after it
    assert log.story("o0") == [(1, "ACTIVE"), (1, "COMPLETED"), (2, "ACTIVE")]
    b = log.restore(a.cursor_map(), at + 2)
    assert b.entries["o0"].version == 2 and b.entries["o0"].next_for is not None
    assert list(b.completing) == []


def test_a_cancel_between_the_fire_and_the_completion_stays_canceled() -> None:
    a, log, at = burst(2)
    tick(a, log, at, 2)
    assert cmd(a, log, "CANCEL", "o0", at + 1).accepted
    assert a.active_count["a"] == 0  # counted out once, not twice
    tick(a, log, at + 1, 100)
    assert log.story("o0") == [(1, "ACTIVE"), (1, "COMPLETED"), (1, "CANCELED")]
    b = log.restore(a.cursor_map(), at + 2)
    assert b.entries["o0"].state == "CANCELED" and b.active_count["a"] == 0


def test_a_pause_or_resume_between_the_fire_and_the_completion_writes_completed_twice() -> None:
    """Benign: the PAUSE's record already says COMPLETED (the entry is, in memory); the queued
    completion writes the same state again. Before 43480c6 there were two records as well."""
    a, log, at = burst(1)
    tick(a, log, at, 1)
    assert cmd(a, log, "PAUSE", "o0", at + 1).accepted
    assert cmd(a, log, "RESUME", "o0", at + 1).accepted
    tick(a, log, at + 1, 100)
    assert log.story("o0") == [(1, "ACTIVE"), (1, "COMPLETED"), (1, "COMPLETED"), (1, "COMPLETED")]
    assert a.entries["o0"].paused_at_ms is None  # no PAUSED state leaked into any record


def test_max_schedules_frees_a_fired_schedules_slot_before_its_record_says_completed() -> None:
    a, log, at = burst(10)  # the tenant's 10 slots
    assert cmd(a, log, "CREATE", "x", T0, ONCE).code == "QUOTA_EXCEEDED"
    tick(a, log, at, 10)
    assert cmd(a, log, "CREATE", "x", at, LATER).accepted  # freed in memory at the fire
    b = log.restore(a.cursor_map(), at + 1)  # records still ACTIVE: restore counts them out again
    assert b.active_count["a"] == 1
    assert cmd(b, log, "CREATE", "y", at + 1, LATER).accepted


def test_a_create_replayed_between_the_fire_and_the_completion_fires_nothing_again() -> None:
    a, log, at = burst(1)
    tick(a, log, at, 1)
    again = cmd(a, log, "CREATE", "o0", at + 1, ONCE)
    assert again.accepted and again.entry is None and "COMPLETED" in (again.reason or "")
    b = log.restore(a.cursor_map(), at + 2)  # the record says COMPLETED
    assert cmd(b, log, "CREATE", "o0", at + 2, ONCE).entry is None
    out = tick(b, log, at + 2, 100)
    assert out.dispatch == [] and out.completed == []


def test_with_budget_left_a_completion_precedes_its_tombstone_in_the_same_tick() -> None:
    a, log, at = burst(3, retention=0)
    out = tick(a, log, at, 4)  # room left: written in the dispatch's transaction, as before
    assert len(out.completed) == 3 and len(out.purged) == 3
    assert log.story("o0") == [(1, "ACTIVE"), (1, "COMPLETED"), None]


# -- the holes a review found in the first version (43480c6) ----------------------------


def test_a_purge_never_tombstones_a_schedule_whose_completion_is_still_queued() -> None:
    a, log, at = burst(3, retention=0)
    out = tick(a, log, at, 3)  # the burst fills the budget exactly
    assert out.purged == [] or out.completed, "tombstoned with no COMPLETED record ever written"


def test_a_second_burst_one_retention_later_does_not_purge_uncompleted_schedules() -> None:
    a, log, at = burst(3, retention=60)
    for i in range(3):  # a second burst due one retention later
        assert cmd(a, log, "CREATE", f"p{i}", T0,
                   ScheduleSpec(kind="once", at="2027-01-15T10:01:00", timezone="UTC", handler="h")).accepted
    tick(a, log, at, 3)  # first burst: budget full
    tick(a, log, at + 60, 3)  # second burst: budget full; the first's retention ends now
    b = log.history_store()
    assert [b.versions[(f"o{i}", 1)].state for i in range(3)] == ["COMPLETED"] * 3


def test_an_update_after_the_fire_still_records_the_fired_version_completed() -> None:
    a, log, at = burst(1)
    tick(a, log, at, 1)
    cmd(a, log, "UPDATE", "o0", at + 1, LATER, expected=1)
    tick(a, log, at + 1, 100)
    b = log.history_store()
    assert b.versions[("o0", 2)].state == "ACTIVE"
    assert b.versions[("o0", 1)].state == "COMPLETED"


class _Recorder:
    """A checkpoint's producer that keeps what it is given, in order (nothing leaves the process)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []

    def begin_transaction(self) -> None:
        pass

    def produce(  # partition positional too, as the checkpoint passes it
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
        **_: object,
    ) -> None:
        self.records.append((topic, value))

    def produce_batch(self, topic: str, messages: list[dict[str, bytes]], partition: int = -1) -> int:
        self.records.extend((topic, m.get("value")) for m in messages)
        return len(messages)

    def poll(self, _timeout: float = 0) -> int:
        return 0


def test_the_inbox_writes_a_queued_completion_before_the_command_and_never_for_another_tenant() -> None:
    """Through the real Inbox and Checkpoint: a CANCEL of a fired one-time schedule whose
    COMPLETED record is still queued writes that record first (encoded before the cancel changes
    the entry); the same schedule id named on another tenant's commands topic writes nothing of it."""
    from confluent_kafka import Message, TopicPartition

    from scheduler.processor.checkpoint import Checkpoints
    from scheduler.processor.inbox import Inbox
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.ownership import OwnedShard
    from scheduler.records import ScheduleCommand, encode
    from scheduler.settings import load_settings
    from scheduler.topology import topic_name

    tenants = {"a": Tenant(name="a", max_schedules=10), "b": Tenant(name="b", max_schedules=10)}
    s = Shard(0, tenants, partitions=1)
    assert cmd(s, Log(), "CREATE", "o0", T0, ONCE).accepted
    at = s.entries["o0"].next_for
    assert at is not None and s.due(at, 1, float(at)).completed == []  # fired, its completion queued
    settings = load_settings(env={})
    schedules = topic_name(settings, "schedules")

    def take(tenant: str) -> list[tuple[int, str]]:
        topic = topic_name(settings, "commands", tenant)
        value = encode(ScheduleCommand(request_id=f"cancel-{tenant}", tenant=tenant, schedule_id="o0",
                                       kind="CANCEL", issued_at_ms=(at + 1) * 1000))
        msgs = [Message(topic=topic, partition=0, offset=0, value=value)]
        rec = _Recorder()
        checkpoints = Checkpoints(settings, 1)
        owned = OwnedShard(shard=s, producer=rec, partition=TopicPartition(topic, 0))  # type: ignore[arg-type]
        cp = checkpoints.open(owned, msgs, float(at + 1), lambda _name: None)  # type: ignore[arg-type]
        cp.begin()
        Inbox(tenants, ProcessorMetrics(), checkpoints.topics).take_all(s, cp, msgs, at + 1)
        out = []
        for t, v in rec.records:
            if t == schedules and v is not None:
                e = wire_state.decode_schedule_entry(v)
                assert e is not None
                out.append((e.version, e.state))
        return out

    assert take("b") == [] and list(s.completing) == ["o0"]  # b's command: nothing of a's schedule
    assert take("a") == [(1, "COMPLETED"), (1, "CANCELED")] and not s.completing
