"""A tick's completion writes no versions record (docs/decisions.md, session 24): random command and
tick sequences through a shard (no Kafka), with one-time and ``max_runs`` cron schedules, pauses,
resumes, cancels and purges. Two worker views follow the versions records: one as the processor
writes them now, one that also gets a COMPLETED record at every tick's completion (the processor
before). The worker's verdict on every dispatched occurrence, and on made-up ones, is the same in
both; and at every tick's completion the record in place is the same version's ACTIVE record with
the entry's pause instants."""

from __future__ import annotations

import datetime as dt
import random

from scheduler.domain import ScheduleSpec
from scheduler.processor import wire_state
from scheduler.processor.model import Entry
from scheduler.processor.shard import Shard
from scheduler.records import VersionRecord, decode
from scheduler.tenants import Tenant
from scheduler.worker.view import VersionState, verdict, version_state

T0 = 1_800_000_000 - (1_800_000_000 % 3600)
SIDS = [f"s{i}" for i in range(4)]
KINDS, WEIGHTS = ["CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL", "TICK"], [15, 10, 15, 15, 5, 40]


def _record(e: Entry, now: int) -> VersionState:
    """What a view keeps of the versions record the processor encodes for ``e`` at ``now``."""
    _, value = wire_state.encode_schedule_and_version(e, now * 1000)
    r = decode(value, VersionRecord)
    return version_state(r.version, r.state, r.paused_at_ms, r.resumed_at_ms)


def test_a_ticks_completion_record_would_change_no_verdict() -> None:
    completed = paused = dispatched = 0
    for seed in range(60):
        c, p, d = _sequence(seed)
        completed, paused, dispatched = completed + c, paused + p, dispatched + d
    assert completed > 100 and paused > 0 and dispatched > 100  # the sequences reach the cases


def _sequence(seed: int) -> tuple[int, int, int]:
    """One random sequence, checked as it goes: its tick completions (all, after a pause) and
    dispatches."""
    rnd = random.Random(seed)
    shard = Shard(0, {"a": Tenant(name="a", max_schedules=10)}, partitions=1,
                  finished_retention_s=rnd.choice([30, 600]))
    now_view: dict[str, VersionState | None] = {}  # the versions records written now
    old_view: dict[str, VersionState | None] = {}  # ... and a COMPLETED one at every tick's completion
    dispatched: list[tuple[str, int, int]] = []
    now = T0
    start = dt.datetime.fromtimestamp(T0, dt.UTC)

    def spec() -> ScheduleSpec:
        if rnd.random() < 0.4:
            at = dt.datetime.fromtimestamp(now + rnd.randint(-30, 40), dt.UTC)
            return ScheduleSpec(kind="once", at=at.strftime("%Y-%m-%dT%H:%M:%S"), timezone="UTC", handler="h")
        return ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h", start=start,
                            max_runs=rnd.randint(1, 3))

    def command(kind: str, sid: str, sp: ScheduleSpec | None = None) -> None:
        prior = shard.take_completion(sid)  # as the inbox does: a queued completion goes first
        if prior is not None:
            old_view[sid] = _record(prior, now)
        out = shard.apply(kind=kind, request_id=f"{kind}-{sid}-{now}-{rnd.random()}", tenant="a",
                          schedule_id=sid, idempotency_key=None, expected_version=None, spec=sp,
                          issued_at=now, now=now)
        if out.accepted and out.entry is not None:  # a command writes its versions record
            old_view[sid] = now_view[sid] = _record(out.entry, now)

    counts = {"completed": 0, "paused": 0}

    def tick() -> None:
        out = shard.due(now, rnd.choice([1, 3, 100]), float(now))
        dispatched.extend((d.schedule_id, d.version, d.scheduled_for * 1000) for d in out.dispatch)
        for e in out.completed:
            old_view[e.schedule_id] = done = _record(e, now)
            assert now_view.get(e.schedule_id) == version_state(
                e.version, "ACTIVE", done.paused_at_ms, done.resumed_at_ms)
            counts["completed"] += 1
            counts["paused"] += done.resumed_at_ms is not None
        for e in out.purged:
            old_view[e.schedule_id] = now_view[e.schedule_id] = None

    for _ in range(200):
        kind, sid = rnd.choices(KINDS, WEIGHTS)[0], rnd.choice(SIDS)
        if kind == "TICK":
            now += rnd.choice([1, 5, 20, 60])
            tick()
        else:
            command(kind, sid, spec() if kind in ("CREATE", "UPDATE") else None)
        made_up = [(s, v, now * 1000) for s in SIDS for v in (1, 2, 3)]
        for s, v, sf in dispatched + made_up:
            assert verdict(now_view.get(s), v, sf) == verdict(old_view.get(s), v, sf), (s, v, sf)
    return counts["completed"], counts["paused"], len(dispatched)
