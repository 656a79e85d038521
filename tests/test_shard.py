"""The shard model without Kafka: commands, the tick, lanes, fairness, misfire, restore."""

from __future__ import annotations

from scheduler.domain import ScheduleSpec, available_at, compile_spec, occurrence_id
from scheduler.domain.ids import jitter_within_s
from scheduler.processor.model import Lane
from scheduler.processor.shard import Shard
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)  # a top of the hour, UTC


def spec(cron: str = "* * * * *", **kw: object) -> ScheduleSpec:
    return ScheduleSpec(kind="cron", cron=cron, timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]


def shard(**tenants: Tenant) -> Shard:
    ts = tenants or {"a": Tenant(name="a"), "b": Tenant(name="b")}
    return Shard(0, ts, partitions=1)


def create(s: Shard, sid: str, sp: ScheduleSpec, now: int, tenant: str = "a") -> object:
    return s.apply(kind="CREATE", request_id=f"r-{sid}", tenant=tenant, schedule_id=sid,
                   idempotency_key=None, expected_version=None, spec=sp, issued_at=now, now=now)


def run(s: Shard, start: int, end: int, budget: int = 100_000) -> list[tuple[str, int]]:
    out = []
    for now in range(start, end + 1):
        o = s.due(now, budget, float(now))
        out += [(d.schedule_id, d.scheduled_for) for d in o.dispatch]
    return out


def test_every_minute_schedule_fires_on_each_minute_once() -> None:
    s = shard()
    assert create(s, "s1", spec(), T0 - 30).accepted  # type: ignore[attr-defined]
    fired = run(s, T0 - 30, T0 + 300)
    assert fired == [("s1", T0 + 60 * i) for i in range(6)]


def test_rejections_name_their_reason() -> None:
    s = shard()
    r = create(s, "x", spec(), T0, tenant="nobody")
    assert (r.accepted, r.code) == (False, "UNKNOWN_TENANT")  # type: ignore[attr-defined]
    assert "ksched tenants add nobody" in r.reason  # type: ignore[attr-defined]
    r = create(s, "x", spec("61 * * * *"), T0)
    assert r.code == "INVALID_SPEC" and "minute" in r.reason  # type: ignore[attr-defined]
    create(s, "x", spec(), T0)
    r = s.apply(kind="UPDATE", request_id="u", tenant="a", schedule_id="x", idempotency_key=None,
                expected_version=7, spec=spec("*/5 * * * *"), issued_at=T0, now=T0)
    assert r.code == "STALE_VERSION" and "version 1" in r.reason  # type: ignore[operator]
    r = s.apply(kind="PAUSE", request_id="p", tenant="a", schedule_id="nope", idempotency_key=None,
                expected_version=None, spec=None, issued_at=T0, now=T0)
    assert r.code == "NOT_FOUND"
    quota = Shard(0, {"a": Tenant(name="a", max_schedules=1)}, partitions=1)
    assert create(quota, "q1", spec(), T0).accepted  # type: ignore[attr-defined]
    assert create(quota, "q2", spec(), T0).code == "QUOTA_EXCEEDED"  # type: ignore[attr-defined]


def test_create_is_idempotent_and_conflicts_on_a_different_spec() -> None:
    s = shard()
    assert create(s, "x", spec(), T0).version == 1  # type: ignore[attr-defined]
    again = create(s, "x", spec(), T0)
    assert again.accepted and again.entry is None  # type: ignore[attr-defined]
    assert create(s, "x", spec("*/2 * * * *"), T0).code == "CONFLICT"  # type: ignore[attr-defined]


def test_update_pause_resume_cancel() -> None:
    s = shard()
    create(s, "x", spec(), T0 - 1)
    assert run(s, T0 - 1, T0) == [("x", T0)]
    u = s.apply(kind="UPDATE", request_id="u", tenant="a", schedule_id="x", idempotency_key=None,
                expected_version=1, spec=spec("*/2 * * * *"), issued_at=T0 + 1, now=T0 + 1)
    assert u.version == 2
    assert run(s, T0 + 1, T0 + 240) == [("x", T0 + 120), ("x", T0 + 240)]
    s.apply(kind="PAUSE", request_id="p", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 + 241, now=T0 + 241)
    assert run(s, T0 + 241, T0 + 600) == []
    s.apply(kind="RESUME", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 + 601, now=T0 + 601)
    assert run(s, T0 + 601, T0 + 720) == [("x", T0 + 720)]  # nothing for the paused span
    c = s.apply(kind="CANCEL", request_id="c", tenant="a", schedule_id="x", idempotency_key=None,
                expected_version=None, spec=None, issued_at=T0 + 721, now=T0 + 721)
    assert c.accepted
    assert run(s, T0 + 721, T0 + 1000) == []
    again = s.apply(kind="RESUME", request_id="r2", tenant="a", schedule_id="x", idempotency_key=None,
                    expected_version=None, spec=None, issued_at=T0 + 1001, now=T0 + 1001)
    assert again.code == "TERMINAL"


def test_burst_of_one_tenant_does_not_delay_anothers_strict_occurrence() -> None:
    s = shard()
    for i in range(5000):
        create(s, f"a{i:05}", spec("0 * * * *"), T0 - 10)
    create(s, "b-one", spec("0 * * * *"), T0 - 10, tenant="b")
    first = s.due(T0, 1000, float(T0))
    ids = [d.schedule_id for d in first.dispatch]
    assert "b-one" in ids and len(ids) == 1000
    seen = set(ids)
    while True:
        o = s.due(T0, 1000, float(T0))
        if not o.dispatch:
            break
        new = {d.schedule_id for d in o.dispatch}
        assert not (new & seen)
        seen |= new
    assert len(seen) == 5001


def test_strict_before_flexible_and_jitter_inside_the_window() -> None:
    s = shard()
    create(s, "flex", spec("0 * * * *", window_minutes=10), T0 - 10)
    create(s, "strict", spec("0 * * * *"), T0 - 10)
    fired = run(s, T0 - 10, T0 + 600)
    assert fired[0] == ("strict", T0)
    assert ("flex", T0) in fired
    oid = occurrence_id("flex", 1, T0)
    hourly = compile_spec(spec("0 * * * *", window_minutes=10))
    assert T0 <= available_at(hourly, "flex", 1, T0, 600) < T0 + 600
    # uncapped, it is DESIGN.md's available_at; capped, it stays before the next fire
    assert available_at(hourly, "flex", 1, T0, 600) == T0 + jitter_within_s(oid, 600)
    every_2 = compile_spec(spec("*/2 * * * *", window_minutes=10))
    assert T0 <= available_at(every_2, "flex", 1, T0, 600) < T0 + 120


def test_cursor_restore_rederives_exactly_what_was_not_yet_emitted() -> None:
    s = shard()
    for i in range(300):
        create(s, f"s{i:03}", spec("0 * * * *"), T0 - 10)
    first = s.due(T0, 100, float(T0))  # committed: 100 of 300
    cursors = s.cursor_map()
    restored = Shard(0, s.tenants, partitions=1)
    restored.cursors = dict(cursors)
    for e in s.entries.values():
        from scheduler.processor.model import Entry, spec_parts

        restored.restore_entry(Entry(schedule_id=e.schedule_id, tenant=e.tenant, version=e.version,
                                     state="ACTIVE", parts=spec_parts(e.spec()), payload=e.payload,
                                     effective_from=T0 - 10, idempotency_key=None))
    restored.finish_restore()
    rest = run(restored, T0, T0)
    assert {d.schedule_id for d in first.dispatch}.isdisjoint({sid for sid, _ in rest})
    assert len(first.dispatch) + len(rest) == 300
    assert all(sf == T0 for _, sf in rest)
    assert {k[1] for k in cursors} == {Lane.STRICT}


def test_misfire_policies_after_a_ten_minute_outage() -> None:
    outage_end = T0 + 600
    for misfire, limit, expect_emit in (("SKIP", 0, 2), ("FIRE_ONCE", 0, 3), ("CATCH_UP", 3, 5)):
        s = shard()
        create(s, "x", spec(misfire=misfire, catch_up_limit=limit, max_lateness_s=60), T0 - 1)
        s.due(T0 - 1, 1000, float(T0 - 1))
        # the processor is down from T0 to T0+600: the next tick is at outage_end
        o = s.due(outage_end, 1000, float(outage_end))
        missed = [e.scheduled_for for e in o.events if e.state == "MISSED"]
        emitted = [d.scheduled_for for d in o.dispatch]
        assert sorted(missed + emitted) == [T0 + 60 * i for i in range(11)], misfire
        assert len(emitted) == expect_emit, (misfire, emitted)
        # within max_lateness: emitted as normal; the policy decides only for the later-than-lateness ones
        assert T0 + 600 in emitted and T0 + 540 in emitted
        if misfire != "SKIP":
            assert T0 + 480 in emitted  # FIRE_ONCE/CATCH_UP keep the latest late ones


def test_pending_catch_up_is_persisted_and_restored_exactly() -> None:
    from scheduler.processor.model import Entry, spec_parts
    from scheduler.processor.shard import ScheduleRuntimeView

    tenants = {"a": Tenant(name="a", catch_up_rate_per_s=1)}
    s = Shard(0, tenants, partitions=1)
    create(s, "x", spec(misfire="CATCH_UP", catch_up_limit=4, max_lateness_s=30), T0 - 1)
    s.due(T0 - 1, 1000, float(T0 - 1))
    s.runtime_changes()
    first = s.due(T0 + 600, 1000, float(T0 + 600))  # 4 kept late ones; the rate lets one out now
    caught = [d.scheduled_for for d in first.dispatch if d.lane == Lane.CATCH_UP]
    assert caught == [T0 + 360]
    changes = s.runtime_changes()
    assert [(sid, v and v.catch_up) for sid, v in changes] == [("x", (T0 + 420, T0 + 540))]
    # a new owner restores the entry, the cursors and the span: it emits exactly the rest
    r = Shard(0, tenants, partitions=1)
    r.cursors = dict(s.cursor_map())
    e = s.entries["x"]
    r.restore_entry(Entry(schedule_id="x", tenant="a", version=1, state="ACTIVE", parts=spec_parts(e.spec()),
                          payload=e.payload, effective_from=e.effective_from, idempotency_key=None))
    r.restored_runtime["x"] = ScheduleRuntimeView(version=1, catch_up=(T0 + 420, T0 + 540))
    r.finish_restore()
    rest = []
    for now in range(T0 + 601, T0 + 610):
        rest += [d.scheduled_for for d in r.due(now, 1000, float(now)).dispatch if d.lane == Lane.CATCH_UP]
    assert rest == [T0 + 420, T0 + 480, T0 + 540]
    assert r.runtime_changes()[-1] == ("x", None)  # drained: a tombstone


def test_a_completed_one_time_schedule_can_still_be_canceled_or_rescheduled() -> None:
    s = shard()
    once = ScheduleSpec(kind="once", at="2027-01-15T10:00:00", timezone="UTC", handler="h")
    for sid in ("c", "u"):
        create(s, sid, once, T0)
    at = s.entries["c"].next_for
    assert at is not None
    out = s.due(at, 100, float(at))
    assert {d.schedule_id for d in out.dispatch} == {"c", "u"} and s.entries["c"].state == "COMPLETED"
    assert s.active_count["a"] == 0
    c = s.apply(kind="CANCEL", request_id="x", tenant="a", schedule_id="c", idempotency_key=None,
                expected_version=None, spec=None, issued_at=at, now=at)
    assert c.accepted and s.entries["c"].state == "CANCELED" and s.active_count["a"] == 0
    later = ScheduleSpec(kind="once", at="2027-01-16T10:00:00", timezone="UTC", handler="h")
    u = s.apply(kind="UPDATE", request_id="y", tenant="a", schedule_id="u", idempotency_key=None,
                expected_version=1, spec=later, issued_at=at, now=at)
    assert u.accepted and u.version == 2 and s.entries["u"].state == "ACTIVE" and s.active_count["a"] == 1
    again = s.apply(kind="CANCEL", request_id="z", tenant="a", schedule_id="c", idempotency_key=None,
                    expected_version=None, spec=None, issued_at=at, now=at)
    assert again.code == "TERMINAL"


def test_a_burst_of_one_time_schedules_writes_their_completions_once_the_budget_has_room() -> None:
    """A COMPLETED record costs ~10x a dispatch: none while the emission fills the tick budget,
    then each once, in a tick with room; one changed meanwhile (canceled, updated) is not written."""
    s = shard()
    once = ScheduleSpec(kind="once", at="2027-01-15T10:00:00", timezone="UTC", handler="h")
    for i in range(10):
        create(s, f"o{i}", once, T0)
    at = s.entries["o0"].next_for
    assert at is not None
    full = s.due(at, 6, float(at))
    assert len(full.dispatch) == 6 and full.completed == []  # the budget is full: later
    assert sum(e.state == "COMPLETED" for e in s.entries.values()) == 6  # in memory at once
    s.apply(kind="CANCEL", request_id="x", tenant="a", schedule_id="o0", idempotency_key=None,
            expected_version=None, spec=None, issued_at=at, now=at)
    later = ScheduleSpec(kind="once", at="2027-01-16T10:00:00", timezone="UTC", handler="h")
    assert s.apply(kind="UPDATE", request_id="y", tenant="a", schedule_id="o1", idempotency_key=None,
                   expected_version=1, spec=later, issued_at=at, now=at).accepted
    rest = s.due(at, 6, float(at))
    assert len(rest.dispatch) == 4
    assert sorted(e.schedule_id for e in rest.completed) == [f"o{i}" for i in range(2, 10)]
    assert s.due(at + 1, 6, float(at + 1)).completed == []  # each written once


def test_due_backlog_counts_what_a_budget_left_behind() -> None:
    s = shard()
    for i in range(50):
        create(s, f"s{i:02}", spec("0 * * * *"), T0 - 10)
    assert s.due_backlog(T0 - 1) == 0
    assert s.due_backlog(T0) == 50
    s.due(T0, 20, float(T0))
    assert s.due_backlog(T0) == 30
    s.due(T0, 100, float(T0))
    assert s.due_backlog(T0) == 0


def test_throttled_catch_up_says_when_it_may_go_on() -> None:
    s = Shard(0, {"a": Tenant(name="a", catch_up_rate_per_s=2)}, partitions=1)
    assert s.catch_up_wait_s(float(T0)) is None
    create(s, "x", spec(misfire="CATCH_UP", catch_up_limit=9, max_lateness_s=30), T0 - 1)
    s.due(T0 - 1, 1000, float(T0 - 1))
    s.due(T0 + 600, 1000, float(T0 + 600))  # 9 late ones kept; the rate lets 2 out now
    wait = s.catch_up_wait_s(float(T0 + 600))
    assert wait is not None and 0.4 <= wait <= 0.5  # half a second for the next token at 2/s
    assert s.catch_up_wait_s(float(T0 + 601)) == 0.0


def test_an_entry_keeps_its_rare_fields_its_own_and_its_effective_time_exact() -> None:
    from scheduler.processor.model import Entry, spec_parts

    parts = spec_parts(spec())
    a = Entry("a", "t", 1, "ACTIVE", parts, b"", T0 + 7, None, created_at_ms=T0 * 1000 + 999)
    b = Entry("b", "t", 1, "ACTIVE", parts, b"", T0 - 10**9, None, created_at_ms=0)
    a.paused_at_ms = 5
    a.last_request_id = "r-9"
    # the entries without any share one empty holder: a write to one never shows in another
    assert (b.paused_at_ms, b.resumed_at_ms, b.last_request_id, b.finished_at) == (None, None, None, None)
    assert (a.paused_at_ms, a.last_request_id, a.resumed_at_ms) == (5, "r-9", None)
    b.finished_at = None  # a None write keeps the shared holder
    assert Entry("c", "t", 1, "ACTIVE", parts, b"", 0, None).finished_at is None
    assert (a.effective_from, b.effective_from) == (T0 + 7, T0 - 10**9)
    a2 = Entry("a2", "t", 1, "ACTIVE", parts, b"", T0 + 7, None, created_at_ms=T0 * 1000 + 999)
    assert a2._times is a._times  # the entries created alike share their times
    a.effective_from = T0 + 3600
    assert a2.effective_from == T0 + 7
    assert a.effective_from == T0 + 3600 and a.created_at_ms == T0 * 1000 + 999
    assert (a.lane, a.handler, a.compiled, a.policy, a.base) == (
        Lane.STRICT, "h", parts.compiled, parts.policy, parts.base)
    properties = {"created_at_ms", "effective_from", "paused_at_ms", "resumed_at_ms", "last_request_id",
                  "finished_at"}
    public = {n for n in Entry.__slots__ if not n.startswith("_")} | properties
    assert set(Entry.FIELDS) == public


def test_a_tick_re_arms_each_schedule_at_its_own_next_time() -> None:
    """Schedules of mixed cadences, strict and flexible, interleaved in one bucket: each emitted
    one is re-armed (batched by next time) at its own next ``available_at``, is emitted on its
    lane, and fires at exactly its fire times over two hours, never early, never twice."""
    s = shard()
    cadences = {"0 * * * *": 3600, "*/30 * * * *": 1800, "0,20,40 * * * *": 1200, "*/15 * * * *": 900}
    specs = {}
    for i in range(40):
        cron = list(cadences)[i % 4]
        specs[f"s{i:02d}"] = spec(cron, window_minutes=5) if i % 3 == 0 else spec(cron)
        assert create(s, f"s{i:02d}", specs[f"s{i:02d}"], T0 - 10).accepted  # type: ignore[attr-defined]
    out = s.due(T0, 100_000, float(T0))
    strict = {sid for sid, sp in specs.items() if not sp.window_minutes}
    assert {d.schedule_id for d in out.dispatch} == strict
    for sid, sp in specs.items():
        if not sp.window_minutes:  # emitted at T0, re-armed at its own next time
            nxt = T0 + cadences[sp.cron or ""]
            assert (s.entries[sid].next_for, s.entries[sid].armed_at) == (nxt, nxt), sid
    end = T0 + 7199
    # (schedule, scheduled_for, available_at, lane, the tick that emitted it): ticks every second,
    # so each occurrence is emitted at its available_at exactly.
    fired = [(d.schedule_id, d.scheduled_for, d.available_at, d.lane, T0) for d in out.dispatch]
    fired += [(d.schedule_id, d.scheduled_for, d.available_at, d.lane, now)
              for now in range(T0 + 1, end + 1) for d in s.due(now, 100_000, float(now)).dispatch]
    for sid, sp in specs.items():
        window = 60 * (sp.window_minutes or 0)
        compiled = compile_spec(sp)
        want = []
        for sf in range(T0, end + 1, cadences[sp.cron or ""]):
            avail = available_at(compiled, sid, 1, sf, window) if window else sf
            if avail <= end:
                want.append((sid, sf, avail, int(Lane.FLEXIBLE if window else Lane.STRICT), avail))
        assert sorted(f for f in fired if f[0] == sid) == want, sid
