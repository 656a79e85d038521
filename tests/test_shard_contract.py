"""Issue 9's contract holes, at the shard model (no Kafka): past one-time schedules, idempotency
keys across versions, null schedule ids, the wrong partition, replayed requests."""

from __future__ import annotations

import time

from scheduler.domain import ScheduleSpec, occurrence_id, schedule_id_for
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.model import COMPLETED, Lane
from scheduler.processor.shard import CommandOutcome, Shard
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)


def once(ts: int, **kw: object) -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]


def cron(expr: str = "* * * * *") -> ScheduleSpec:
    return ScheduleSpec(kind="cron", cron=expr, timezone="UTC", handler="h")


def cmd(s: Shard, kind: str, sid: str | None, now: int, sp: ScheduleSpec | None = None,
        key: str | None = None, rid: str | None = None, tenant: str = "a") -> CommandOutcome:
    return s.apply(kind=kind, request_id=rid or f"{kind}-{sid}-{now}", tenant=tenant, schedule_id=sid,
                   idempotency_key=key, expected_version=None, spec=sp, issued_at=now, now=now)


def shard(partitions: int = 1, p: int = 0) -> Shard:
    return Shard(p, {"a": Tenant(name="a")}, partitions=partitions)


def tick(s: Shard, now: int) -> list[tuple[str, int, int]]:
    out = s.due(now, 10_000, float(now))
    return [(o.schedule_id, o.scheduled_for, o.lane) for o in out.dispatch]


# -- 1. a one-time schedule at or before the moment it is applied ----------------------------------
def test_a_past_one_time_within_lateness_fires_at_once() -> None:
    s = shard()
    r = cmd(s, "CREATE", "x", T0, once(T0 - 10, max_lateness_s=60))
    assert r.accepted and r.entry is not None and r.entry.state == COMPLETED
    assert r.events == []
    assert tick(s, T0) == [("x", T0 - 10, int(Lane.CATCH_UP))]
    assert s.runtime_view("x") is None  # the persisted catch-up span is gone once emitted


def test_run_once_now_fires_in_the_next_tick() -> None:
    s = shard()
    assert cmd(s, "CREATE", "x", T0, once(T0)).accepted
    assert tick(s, T0) == [("x", T0, int(Lane.CATCH_UP))]


def test_a_past_one_time_beyond_lateness_follows_the_misfire_policy() -> None:
    s = shard()
    r = cmd(s, "CREATE", "skip", T0, once(T0 - 600, max_lateness_s=60, misfire="SKIP"))
    assert r.accepted and [(e.state, e.scheduled_for) for e in r.events] == [("MISSED", T0 - 600)]
    assert r.events[0].occurrence_id == occurrence_id("skip", 1, T0 - 600)
    r = cmd(s, "CREATE", "once", T0, once(T0 - 600, max_lateness_s=60, misfire="FIRE_ONCE"))
    assert r.accepted and r.events == []
    assert tick(s, T0) == [("once", T0 - 600, int(Lane.CATCH_UP))]


def test_a_past_one_time_survives_a_restart_before_it_is_emitted() -> None:
    s = shard()
    cmd(s, "CREATE", "x", T0, once(T0 - 5))
    view = s.runtime_view("x")
    assert view is not None and view.catch_up == (T0 - 5, T0 - 5)
    restored = shard()
    restored.restore_entry(s.entries["x"])
    restored.restored_runtime["x"] = view
    restored.finish_restore()
    assert tick(restored, T0 + 1) == [("x", T0 - 5, int(Lane.CATCH_UP))]


def test_a_one_time_far_in_the_past_is_refused_naming_the_field() -> None:
    r = cmd(shard(), "CREATE", "x", T0, once(T0 - 3 * 86_400))
    assert (r.accepted, r.code) == (False, "INVALID_SPEC")
    assert r.reason is not None and r.reason.startswith("at: ")


def test_a_client_clock_ahead_does_not_skip_a_one_time() -> None:
    s = shard()
    r = s.apply(kind="CREATE", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
                expected_version=None, spec=once(T0 + 30), issued_at=T0 + 200, now=T0)
    assert r.accepted and r.entry is not None and r.entry.next_for == T0 + 30
    assert tick(s, T0 + 29) == [] and tick(s, T0 + 30) == [("x", T0 + 30, int(Lane.STRICT))]


def test_updating_a_one_time_to_now_runs_it_once_now() -> None:
    s = shard()
    cmd(s, "CREATE", "x", T0, once(T0 + 3600))
    r = cmd(s, "UPDATE", "x", T0 + 10, once(T0 + 10))
    assert r.accepted and r.version == 2
    assert tick(s, T0 + 10) == [("x", T0 + 10, int(Lane.CATCH_UP))]


# -- 8 and 20. idempotency keys across versions; a create after cancel -------------------------------
def test_the_same_key_after_update_and_cancel_is_never_a_second_life() -> None:
    s = shard()
    sid = schedule_id_for("a", "k1")
    assert cmd(s, "CREATE", sid, T0, cron(), key="k1").version == 1
    assert cmd(s, "UPDATE", sid, T0, cron("*/5 * * * *")).version == 2
    # the same spec as the current version: a replay, answered with the schedule as it is
    again = cmd(s, "CREATE", sid, T0, cron("*/5 * * * *"), key="k1")
    assert again.accepted and again.version == 2 and again.entry is None
    # the original create's spec after an update: a conflict, not an ACCEPTED v2
    assert cmd(s, "CREATE", sid, T0, cron(), key="k1").code == "CONFLICT"
    assert cmd(s, "CANCEL", sid, T0).accepted
    for sp in (cron(), cron("*/5 * * * *"), cron("0 * * * *")):
        r = cmd(s, "CREATE", sid, T0, sp, key="k1")
        assert (r.accepted, r.code) == (False, "TERMINAL"), r
        assert "never reused" in (r.reason or "")
    assert s.entries[sid].state == "CANCELED"


def test_a_keyed_create_must_carry_the_derived_id() -> None:
    r = cmd(shard(), "CREATE", "not-derived", T0, cron(), key="k1")
    assert (r.accepted, r.code) == (False, "INVALID_COMMAND")
    assert schedule_id_for("a", "k1") in (r.reason or "")


def test_a_replayed_update_or_pause_changes_nothing() -> None:
    s = shard()
    sid = schedule_id_for("a", "k")
    cmd(s, "CREATE", sid, T0, cron(), key="k")
    first = cmd(s, "UPDATE", sid, T0, cron("*/2 * * * *"), rid="u1")
    assert first.version == 2 and first.entry is not None
    replay = cmd(s, "UPDATE", sid, T0 + 5, cron("*/2 * * * *"), rid="u1")
    assert replay.accepted and replay.version == 2 and replay.entry is None
    assert "already applied" in (replay.reason or "")
    assert s.entries[sid].version == 2
    # replays are recognised after a restart too: the schedule record carries the last request id
    restored = shard()
    restored.restore_entry(s.entries[sid])
    restored.finish_restore()
    again = cmd(restored, "UPDATE", sid, T0 + 9, cron("*/2 * * * *"), rid="u1")
    assert again.accepted and again.entry is None and restored.entries[sid].version == 2


# -- 10. a null schedule id on CREATE ----------------------------------------------------------------
def test_a_null_schedule_id_is_derived_from_the_key() -> None:
    s = shard()
    r = cmd(s, "CREATE", None, T0, cron(), key="k9")
    assert r.accepted and r.schedule_id == schedule_id_for("a", "k9")


def test_a_null_schedule_id_without_key_gets_an_id_of_this_partition() -> None:
    s = shard(partitions=4, p=2)
    r = cmd(s, "CREATE", None, T0, cron())
    assert r.accepted and len(r.schedule_id) == 32
    assert partition_for(r.schedule_id.encode(), 4) == 2
    assert cmd(s, "PAUSE", None, T0).code == "INVALID_COMMAND"


# -- 18. a command on another partition than its key's -------------------------------------------------
def test_a_command_on_the_wrong_partition_is_rejected() -> None:
    sid = schedule_id_for("a", "k")
    home = partition_for(sid.encode(), 4)
    wrong = shard(partitions=4, p=(home + 1) % 4)
    r = cmd(wrong, "CREATE", sid, T0, cron(), key="k")
    assert (r.accepted, r.code) == (False, "WRONG_PARTITION")
    assert f"partition {home}" in (r.reason or "") and sid not in wrong.entries
    assert cmd(shard(partitions=4, p=home), "CREATE", sid, T0, cron(), key="k").accepted


# -- 2, 6, 11. quotas delay, never drop; they are cluster-wide; counted once per occurrence ------------
def _load(shards: list[Shard], n: int, at: int, **kw: object) -> None:
    for i in range(n):
        sid = schedule_id_for("a", f"q{i}")
        s = shards[partition_for(sid.encode(), len(shards))]
        r = cmd(s, "CREATE", sid, at - 30, once(at, **kw), key=f"q{i}")
        assert r.accepted, r


def _run(shards: list[Shard], start: float, seconds: float, step: float = 0.05) -> list[tuple[float, object]]:
    out: list[tuple[float, object]] = []
    clock = start
    while clock < start + seconds:
        for s in shards:
            o = s.due(int(clock), 100_000, clock)
            out += [(clock, d) for d in o.dispatch] + [(clock, ev) for ev in o.events]
        clock += step
    return out


def test_throttled_work_is_delayed_never_missed() -> None:
    s = Shard(0, {"a": Tenant(name="a", trigger_rate_per_s=10)}, partitions=1)
    _load([s], 1000, T0, misfire="SKIP", max_lateness_s=60)
    seen = _run([s], T0, 105)
    dispatched = [d for _, d in seen if not hasattr(d, "state")]
    events = [ev for _, ev in seen if hasattr(ev, "state")]
    assert len(dispatched) == 1000 and len({d.schedule_id for d in dispatched}) == 1000  # type: ignore[attr-defined]
    assert [ev for ev in events if ev.state == "MISSED"] == []  # type: ignore[attr-defined]
    throttled = [ev for ev in events if ev.state == "ENQUEUED"]  # type: ignore[attr-defined]
    assert len({ev.occurrence_id for ev in throttled}) == len(throttled) > 900  # type: ignore[attr-defined]
    assert all("delayed" in ev.reason and "trigger_rate_per_s" in ev.reason for ev in throttled)  # type: ignore[attr-defined]
    # emitted at the quota: about 10 per second, the last ones ~99 s late and still not MISSED
    assert 95 <= max(t for t, d in seen if d in dispatched) - T0 <= 101


def test_an_outage_still_misses_what_was_late_before_the_quota_held_it() -> None:
    s = Shard(0, {"a": Tenant(name="a", trigger_rate_per_s=10)}, partitions=1)
    _load([s], 50, T0, misfire="SKIP", max_lateness_s=60)
    seen = _run([s], T0 + 120, 10)  # the processor comes back two minutes late
    assert sum(1 for _, ev in seen if getattr(ev, "state", None) == "MISSED") == 50


def test_quotas_are_cluster_wide_promises_split_across_shards() -> None:
    tenants = {"a": Tenant(name="a", trigger_rate_per_s=20)}
    shards = [Shard(p, tenants, partitions=4) for p in range(4)]
    _load(shards, 600, T0, max_lateness_s=3600)
    seen = _run(shards, T0, 10)
    emitted = sum(1 for _, d in seen if not hasattr(d, "state"))
    assert 160 <= emitted <= 240, emitted  # 20/s over 10 s, within ±20 %, across all four shards


def test_an_empty_shard_reports_its_last_tick_as_watermark() -> None:
    s = shard()
    s.due(T0, 10, float(T0))
    assert s.watermark() == T0


# -- 12. finished schedules are kept for a retention, then purged ------------------------------------
def test_finished_schedules_are_purged_after_their_retention() -> None:
    s = Shard(0, {"a": Tenant(name="a")}, partitions=1, finished_retention_s=100)
    cmd(s, "CREATE", "done", T0, once(T0 + 10))
    cmd(s, "CREATE", "gone", T0, cron())
    cmd(s, "CANCEL", "gone", T0 + 1)
    cmd(s, "CREATE", "live", T0, cron())
    assert tick(s, T0 + 10) == [("done", T0 + 10, int(Lane.STRICT))]
    assert s.due(T0 + 100, 100, float(T0 + 100)).purged == []
    purged = s.due(T0 + 101, 100, float(T0 + 101)).purged
    assert [e.schedule_id for e in purged] == ["gone"]  # canceled at T0 + 1
    purged = s.due(T0 + 110, 100, float(T0 + 110)).purged
    assert [e.schedule_id for e in purged] == ["done"]  # completed when it fired at T0 + 10
    assert set(s.entries) == {"live"} and s.active_count["a"] == 1


def test_a_finished_schedule_still_running_or_revived_is_not_purged() -> None:
    from scheduler.processor.attempts import Attempt

    s = Shard(0, {"a": Tenant(name="a")}, partitions=1, finished_retention_s=100)
    cmd(s, "CREATE", "busy", T0, once(T0 + 10))
    cmd(s, "CREATE", "again", T0, once(T0 + 10))
    tick(s, T0 + 10)
    s.attempts.track(Attempt(occurrence_id("busy", 1, T0 + 10), "busy", "a", 1, T0 + 10, 1))
    assert cmd(s, "UPDATE", "again", T0 + 50, once(T0 + 500)).accepted  # a new version: active again
    assert s.due(T0 + 200, 100, float(T0 + 200)).purged == []
    assert set(s.entries) == {"busy", "again"}
    s.attempts.finish(s.attempts.inflight[occurrence_id("busy", 1, T0 + 10)], T0 + 200)
    assert [e.schedule_id for e in s.due(T0 + 260, 100, float(T0 + 260)).purged] == ["busy"]


def test_a_warm_copy_that_never_purges_keeps_its_purge_order_bounded() -> None:
    """A warm copy applies every terminal record the owner writes but never takes purge turns:
    its purge order must not grow with the records it has read (only with what it holds)."""
    owner = Shard(0, {"a": Tenant(name="a")}, partitions=1, finished_retention_s=100)
    copy = Shard(0, {"a": Tenant(name="a")}, partitions=1, finished_retention_s=100)
    for i in range(5_000):  # created, canceled, then purged by the owner: three records each
        sid = f"s{i}"
        cmd(owner, "CREATE", sid, T0 + i, cron())
        cmd(owner, "CANCEL", sid, T0 + i)
        copy.restore_entry(owner.entries[sid])
        if i >= 10:  # the owner's purge tombstones an older one
            old = f"s{i - 10}"
            owner.forget(old)
            copy.forget(old)
    assert len(copy.entries) == 10
    assert len(copy._finished) <= 2 * len(copy.entries) + 1024 + 1
    due = copy.purge(T0 + 10_000 + 100, 100)
    assert sorted(e.schedule_id for e in due) == sorted(f"s{i}" for i in range(4_990, 5_000))


def test_a_tombstone_read_in_restore_drops_the_older_record() -> None:
    s = shard()
    cmd(s, "CREATE", "x", T0, cron())
    restored = shard()
    restored.restore_entry(s.entries["x"])
    assert restored.forget("x") is not None
    restored.finish_restore(T0)
    assert restored.entries == {} and restored.active_count["a"] == 0


def test_a_restored_lane_without_schedules_does_not_hold_the_watermark_back() -> None:
    s = shard()
    s.cursors = {("a", Lane.STRICT): (T0, "")}  # a tenant whose schedules are all gone
    s.finish_restore(T0 + 100)
    s.due(T0 + 100, 10, float(T0 + 100))
    assert s.watermark() == T0 + 100


def test_a_restore_mid_throttle_keeps_judging_lateness_where_the_quota_started() -> None:
    from scheduler.processor import wire_state

    tenants = {"a": Tenant(name="a", trigger_rate_per_s=10)}
    s = Shard(0, tenants, partitions=1)
    _load([s], 1000, T0, misfire="SKIP", max_lateness_s=60)
    first = _run([s], T0, 40)
    restored = Shard(0, tenants, partitions=1)
    for e in list(s.entries.values()):
        if e.state == "ACTIVE":
            restored.restore_entry(e)
    wire_state.restore_state_record(restored, b"shard:0", wire_state.encode_shard_state(s, float(T0 + 40)))
    restored.finish_restore(T0 + 40)  # a failover (or an aborted tick) 40 s into the backlog
    rest = _run([restored], T0 + 40, 70)
    seen = first + rest
    assert sum(1 for _, x in seen if getattr(x, "state", None) == "MISSED") == 0
    assert len({x.schedule_id for _, x in seen if not hasattr(x, "state")}) == 1000  # type: ignore[attr-defined]


def test_a_report_of_a_fire_time_before_the_version_existed_invents_no_run() -> None:
    from scheduler.processor.lifecycle import apply_report

    s = shard()
    cmd(s, "CREATE", "h", T0, cron("0 * * * *"))
    old = T0 - 30 * 86_400  # a fire time of the expression, a month before the schedule existed
    res = apply_report(s, kind="STARTED", oid=occurrence_id("h", 1, old), schedule_id="h", tenant="a",
                       version=1, scheduled_for=old, attempt=1, token="t", retryable=None,
                       error_class=None, error_message=None, now=T0 + 10)
    assert res.ignored is not None and "before version 1" in res.ignored
    assert s.attempts.inflight == {}


def test_an_update_starts_a_version_without_the_old_versions_pause() -> None:
    s = shard()
    cmd(s, "CREATE", "x", T0, cron())
    cmd(s, "PAUSE", "x", T0 + 10)
    cmd(s, "RESUME", "x", T0 + 100)
    r = cmd(s, "UPDATE", "x", T0 + 130, once(T0 + 95, max_lateness_s=60))
    assert r.entry is not None and (r.entry.paused_at_ms, r.entry.resumed_at_ms) == (None, None)
    assert tick(s, T0 + 130) == [("x", T0 + 95, int(Lane.CATCH_UP))]


def test_pausing_a_one_time_whose_late_run_still_waits_drops_it_with_an_event() -> None:
    s = Shard(0, {"a": Tenant(name="a", catch_up_rate_per_s=1)}, partitions=1)
    for sid in ("x", "y"):
        cmd(s, "CREATE", sid, T0, once(T0 - 5))
    assert [d[0] for d in tick(s, T0)] == ["x"]  # the catch-up quota holds "y" back
    r = cmd(s, "PAUSE", "y", T0)
    assert r.accepted and [(e.state, e.reason) for e in r.events] == [("CANCELED", "paused")]
    assert tick(s, T0 + 5) == [] and s.runtime_view("y") is None


def test_a_create_replay_of_a_long_past_one_time_is_still_a_replay() -> None:
    s = shard()
    sid = schedule_id_for("a", "k")
    assert cmd(s, "CREATE", sid, T0, once(T0 + 60), key="k").accepted
    tick(s, T0 + 60)
    again = cmd(s, "CREATE", sid, T0 + 3 * 86_400, once(T0 + 60), key="k")
    assert again.accepted and again.entry is None and again.version == 1


def test_the_heap_quiets_the_gc_for_the_ticks_and_restores_it() -> None:
    import gc

    from scheduler.processor.heap import Heap

    assert gc.isenabled()
    with Heap.quiet():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with Heap.quiet():
            pass
        assert not gc.isenabled()  # a caller's own disable is left alone
    finally:
        gc.enable()
    try:
        with Heap.quiet():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()
