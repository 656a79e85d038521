"""The attempt lifecycle on the shard model (no Kafka): retries, DLQ, fencing, leases, overlap."""

from __future__ import annotations

from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.domain.backoff import backoff_ceiling_s
from scheduler.processor.lifecycle import ReportResult, apply_report
from scheduler.processor.model import Lane
from scheduler.processor.shard import Shard, TickOutput
from scheduler.tenants import Tenant

T0 = 1_800_000_000 - (1_800_000_000 % 3600)


def shard(lease_s: int = 30, **spec_kw: object) -> Shard:
    s = Shard(0, {"a": Tenant(name="a", retry_budget_per_min=0)}, partitions=1, lease_s=lease_s)
    kw: dict[str, object] = {"cron": "* * * * *", **spec_kw}
    sp = ScheduleSpec(kind="cron", timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]
    assert s.apply(kind="CREATE", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
                   expected_version=None, spec=sp, issued_at=T0 - 1, now=T0 - 1).accepted
    return s


def report(s: Shard, kind: str, f: int, attempt: int, token: str, now: int, *, retryable: bool = True,
           error_class: str | None = None) -> ReportResult:
    return apply_report(s, kind=kind, oid=occurrence_id("x", 1, f), schedule_id="x", tenant="a", version=1,
                        scheduled_for=f, attempt=attempt, token=token, retryable=retryable,
                        error_class=error_class or ("E" if kind == "FAILED" else None),
                        error_message="boom" if kind == "FAILED" else None, now=now)


def tick(s: Shard, now: int) -> TickOutput:
    return s.due(now, 1000, float(now))


def until_emitted(s: Shard, start: int, end: int, lane: Lane) -> tuple[int, TickOutput]:
    for now in range(start, end):
        out = tick(s, now)
        if any(d.lane == lane for d in out.dispatch):
            return now, out
    raise AssertionError(f"nothing emitted in lane {lane.name} in [{start}, {end})")


def test_retryable_failures_back_off_then_dead_with_a_dlq_entry() -> None:
    s = shard(retry_max_attempts=3, retry_backoff_base_s=2.0, retry_backoff_cap_s=60.0, cron="0 * * * *")
    assert [d.attempt for d in tick(s, T0).dispatch] == [1]
    now = T0
    for attempt in (1, 2):
        report(s, "STARTED", T0, attempt, f"t{attempt}", now)
        res = report(s, "FAILED", T0, attempt, f"t{attempt}", now)
        assert [e.state for e in res.events] == ["RETRY_WAIT"]
        failed_at = now
        now, out = until_emitted(s, now + 1, now + 200, Lane.RETRY)
        (d,) = [d for d in out.dispatch if d.lane == Lane.RETRY]
        assert d.attempt == attempt + 1 and d.occurrence_id == occurrence_id("x", 1, T0)  # the id is kept
        # full jitter: never later than the ceiling of this attempt (rounded up to whole seconds)
        assert now - failed_at <= backoff_ceiling_s(attempt, 2.0, 60.0) + 1
    report(s, "STARTED", T0, 3, "t3", now)
    res = report(s, "FAILED", T0, 3, "t3", now)
    assert [e.state for e in res.events] == ["DEAD"] and "3 attempts" in (res.events[0].reason or "")
    assert [a.attempt for a in res.dead] == [3]
    assert not any(d.lane == Lane.RETRY for n in range(now, now + 300) for d in tick(s, n).dispatch)


def test_a_permanent_failure_is_dead_at_once() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    res = report(s, "FAILED", T0, 1, "t", T0 + 1, retryable=False)
    assert [e.state for e in res.events] == ["DEAD"] and len(res.dead) == 1


def test_lease_expiry_starts_a_new_attempt_and_fences_the_old_worker() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    report(s, "STARTED", T0, 1, "old", T0)
    report(s, "HEARTBEAT", T0, 1, "old", T0 + 20)  # lease until T0+50
    assert not any(e.state == "RETRY_WAIT" for n in range(T0 + 1, T0 + 51) for e in tick(s, n).events)
    out = tick(s, T0 + 51)
    assert [e.reason and "heartbeat" in e.reason for e in out.events if e.state == "RETRY_WAIT"] == [True]
    now, _ = until_emitted(s, T0 + 51, T0 + 200, Lane.RETRY)
    late = report(s, "SUCCEEDED", T0, 1, "old", now)
    assert late.ignored and not late.events  # the old worker's late completion is ignored
    report(s, "STARTED", T0, 2, "new", now)
    assert report(s, "SUCCEEDED", T0, 2, "other-token", now).ignored
    assert [e.state for e in report(s, "SUCCEEDED", T0, 2, "new", now).events] == ["SUCCEEDED"]
    assert report(s, "SUCCEEDED", T0, 2, "new", now).ignored  # a duplicate report


def test_skip_if_running_skips_every_other_minute_for_a_90s_job() -> None:
    s = shard(overlap="SKIP_IF_RUNNING")
    emitted, skipped = [], []
    running: int | None = None
    for now in range(T0, T0 + 600):
        out = tick(s, now)
        emitted += [d.scheduled_for for d in out.dispatch]
        skipped += [e.scheduled_for for e in out.events if e.state == "SKIPPED_OVERLAP"]
        for d in out.dispatch:
            assert running is None, "two running at once"
            running = d.scheduled_for
            report(s, "STARTED", d.scheduled_for, 1, f"t{now}", now)
        if running is not None and now == running + 90:
            report(s, "SUCCEEDED", running, 1, f"t{running}", now)
            running = None
        elif running is not None and (now - running) % 10 == 0:
            report(s, "HEARTBEAT", running, 1, f"t{running}", now)
    assert emitted == [T0 + 120 * i for i in range(5)]
    assert skipped == [T0 + 60 + 120 * i for i in range(5)]


def test_queue_one_releases_one_waiting_occurrence_when_the_running_one_ends() -> None:
    s = shard(overlap="QUEUE_ONE", lease_s=600)
    assert [d.scheduled_for for d in tick(s, T0).dispatch] == [T0]
    report(s, "STARTED", T0, 1, "t", T0)
    assert tick(s, T0 + 60).dispatch == []  # queued, no event yet
    skipped = [e.scheduled_for for e in tick(s, T0 + 120).events if e.state == "SKIPPED_OVERLAP"]
    assert skipped == [T0 + 120]
    report(s, "SUCCEEDED", T0, 1, "t", T0 + 130)
    assert [d.scheduled_for for d in tick(s, T0 + 131).dispatch] == [T0 + 60]


def test_a_stale_occurrence_reported_canceled_is_recorded_canceled() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    res = report(s, "FAILED", T0, 1, "t", T0, retryable=False, error_class="ksched.Canceled")
    assert [e.state for e in res.events] == ["CANCELED"] and not res.dead


def test_a_pending_retry_survives_a_handover() -> None:
    from scheduler.processor.model import Entry, spec_parts

    s = shard(cron="0 * * * *", retry_backoff_base_s=30.0, retry_backoff_cap_s=30.0)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    report(s, "FAILED", T0, 1, "t", T0)
    (sid, view), = s.runtime_changes()
    assert sid == "x" and view is not None and [a.attempt for a in view.retries] == [1]
    r = Shard(0, s.tenants, partitions=1)
    r.cursors = dict(s.cursor_map())
    e = s.entries["x"]
    r.restore_entry(Entry(schedule_id="x", tenant="a", version=1, state="ACTIVE", parts=spec_parts(e.spec()),
                          payload=e.payload, effective_from=e.effective_from, idempotency_key=None))
    retry_at = view.retries[0].retry_at
    r.restored_runtime["x"] = view
    r.finish_restore()
    now, out = until_emitted(r, T0 + 1, T0 + 40, Lane.RETRY)
    assert now == retry_at and [d.attempt for d in out.dispatch] == [2]


def test_cancel_drops_a_queued_occurrence_even_without_catch_up_work() -> None:
    s = shard(overlap="QUEUE_ONE", lease_s=600)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    tick(s, T0 + 60)  # T0+60 waits behind the running one
    out = s.apply(kind="CANCEL", request_id="c", tenant="a", schedule_id="x", idempotency_key=None,
                  expected_version=None, spec=None, issued_at=T0 + 61, now=T0 + 61)
    assert [(e.state, e.scheduled_for) for e in out.events] == [("CANCELED", T0 + 60)]
    report(s, "SUCCEEDED", T0, 1, "t", T0 + 70)
    assert tick(s, T0 + 71).dispatch == []  # nothing released for a canceled schedule


def test_a_released_occurrence_stays_persisted_until_emitted() -> None:
    s = shard(overlap="QUEUE_ONE", lease_s=600)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    tick(s, T0 + 60)
    report(s, "SUCCEEDED", T0, 1, "t", T0 + 70)  # released, not yet emitted
    views = dict(s.runtime_changes())
    assert views["x"] is not None and views["x"].queued is not None and views["x"].queued[2] == T0 + 60
    assert [d.scheduled_for for d in tick(s, T0 + 71).dispatch] == [T0 + 60]
    views = dict(s.runtime_changes())
    assert views["x"] is not None and views["x"].queued is None and len(views["x"].running) == 1


def test_a_later_misfire_supersedes_a_pending_catch_up_as_missed() -> None:
    s = Shard(0, {"a": Tenant(name="a", catch_up_rate_per_s=1)}, partitions=1)
    sp = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h", misfire="CATCH_UP",
                      catch_up_limit=3, max_lateness_s=30)
    s.apply(kind="CREATE", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=sp, issued_at=T0 - 1, now=T0 - 1)
    s.due(T0 - 1, 1000, float(T0 - 1))
    first = s.due(T0 + 600, 1000, float(T0 + 600))  # keeps T0+420..540, one emitted now
    assert [d.scheduled_for for d in first.dispatch if d.lane == Lane.CATCH_UP] == [T0 + 420]
    second = s.due(T0 + 1200, 1000, float(T0 + 1200))  # another outage before the backlog drained
    superseded = sorted(e.scheduled_for for e in second.events if e.reason == "superseded by a later misfire")
    assert superseded == [T0 + 480, T0 + 540]
    assert s.catch_up_span["x"][1] == T0 + 1140  # one range: the latest late occurrences


def restored(s: Shard) -> Shard:
    """A new owner of ``s``'s shard: its schedule and the runtime state it wrote to ksched.state,
    through the real record codec."""
    from scheduler.processor import wire_state
    from scheduler.processor.model import Entry, spec_parts

    r = Shard(0, s.tenants, partitions=1, lease_s=s.lease_s, start_lease_s=s.attempts.start_lease_s)
    r.cursors = dict(s.cursor_map())
    e = s.entries["x"]
    r.restore_entry(Entry(schedule_id="x", tenant="a", version=e.version, state=e.state,
                          parts=spec_parts(e.spec()), payload=e.payload, effective_from=e.effective_from,
                          idempotency_key=None))
    for sid, view in s.runtime_changes():
        value = wire_state.encode_runtime(sid, "a", view, T0)
        if value is not None:
            wire_state.restore_state_record(r, sid.encode(), value)
    r.finish_restore()
    return r


def test_a_retried_allow_attempt_survives_a_handover_and_fences_the_older_attempt() -> None:
    s = shard(cron="0 * * * *", retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t1", T0)
    report(s, "FAILED", T0, 1, "t1", T0)
    now, _ = until_emitted(s, T0 + 1, T0 + 10, Lane.RETRY)
    report(s, "STARTED", T0, 2, "t2", now)
    r = restored(s)  # the owner was killed between STARTED and SUCCEEDED of attempt 2
    late = report(r, "SUCCEEDED", T0, 1, "t1", now + 1)
    assert late.ignored and not late.events, late  # the older attempt cannot end the occurrence
    assert report(r, "SUCCEEDED", T0, 2, "other-token", now + 1).ignored
    assert [(e.state, e.attempt) for e in report(r, "SUCCEEDED", T0, 2, "t2", now + 2).events] == [
        ("SUCCEEDED", 2)
    ]
    # finished: only the marker that fences attempt 1 is left, and it survives a second handover
    view = r.runtime_view("x")
    assert view is not None and view.running == view.retries == []
    assert [(n, until - (now + 2)) for _, n, until in view.finished] == [(2, 86_400)]
    again = restored(r)
    late = report(again, "FAILED", T0, 1, "t1", now + 3)
    assert late.ignored and not late.events and not again.attempts.inflight  # no second run


def test_a_fence_marker_expires_and_is_not_written_back() -> None:
    from scheduler.processor import wire_state
    from scheduler.records import ScheduleRuntime, decode

    s = shard(cron="0 * * * *", retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t1", T0)
    report(s, "FAILED", T0, 1, "t1", T0)
    now, _ = until_emitted(s, T0 + 1, T0 + 10, Lane.RETRY)
    report(s, "SUCCEEDED", T0, 2, "t2", now)
    ((sid, view),) = s.runtime_changes()
    assert wire_state.encode_runtime(sid, "a", view, now + 86_401) is not None
    record = decode(wire_state.encode_runtime(sid, "a", view, now + 86_401) or b"", ScheduleRuntime)
    assert record.finished == ()


def test_first_attempts_of_allow_schedules_write_no_state() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    s.runtime_changes()
    report(s, "STARTED", T0, 1, "t", T0)
    assert s.runtime_changes() == []
    report(s, "SUCCEEDED", T0, 1, "t", T0 + 1)
    assert s.runtime_changes() == []


def test_an_occurrence_nobody_starts_is_given_up_after_the_start_lease() -> None:
    s = Shard(0, {"a": Tenant(name="a", retry_budget_per_min=0)}, partitions=1, start_lease_s=30)
    sp = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h", overlap="SKIP_IF_RUNNING",
                      retry_max_attempts=1)
    s.apply(kind="CREATE", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=sp, issued_at=T0 - 1, now=T0 - 1)
    assert [d.scheduled_for for d in tick(s, T0).dispatch] == [T0]  # and no worker ever starts it
    (_, view), = s.runtime_changes()
    assert view is not None and view.running[0].lease_until == T0 + 30  # persisted with its deadline
    assert not any(tick(s, n).events for n in range(T0 + 1, T0 + 31))
    out = tick(s, T0 + 31)
    assert [(e.state, "StartLeaseExpired" in (e.reason or "")) for e in out.events] == [("DEAD", True)]
    assert len(out.dead) == 1
    assert [d.scheduled_for for d in tick(s, T0 + 60).dispatch] == [T0 + 60]  # no longer blocked


def test_a_restored_unstarted_occurrence_gets_a_start_lease() -> None:
    s = Shard(0, {"a": Tenant(name="a", retry_budget_per_min=0)}, partitions=1, start_lease_s=30)
    sp = ScheduleSpec(kind="cron", cron="0 * * * *", timezone="UTC", handler="h", overlap="QUEUE_ONE",
                      retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
    s.apply(kind="CREATE", request_id="r", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=sp, issued_at=T0 - 1, now=T0 - 1)
    tick(s, T0)
    r = restored(s)
    out = tick(r, T0 + 31)
    assert [e.state for e in out.events] == ["RETRY_WAIT"]
    _, out = until_emitted(r, T0 + 32, T0 + 40, Lane.RETRY)
    assert [d.attempt for d in out.dispatch] == [2]


def test_a_retryable_failure_of_a_superseded_version_is_canceled_not_dead() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    sp = ScheduleSpec(kind="cron", cron="30 * * * *", timezone="UTC", handler="h")
    assert s.apply(kind="UPDATE", request_id="u", tenant="a", schedule_id="x", idempotency_key=None,
                   expected_version=None, spec=sp, issued_at=T0 + 1, now=T0 + 1).accepted
    res = report(s, "FAILED", T0, 1, "t", T0 + 2)
    assert [(e.state, e.version) for e in res.events] == [("CANCELED", 1)] and not res.dead
    assert "superseded by version 2" in (res.events[0].reason or "")


def test_a_lease_expiry_of_a_paused_schedule_is_canceled_not_dead() -> None:
    s = shard(cron="0 * * * *", lease_s=10)
    tick(s, T0)
    report(s, "STARTED", T0, 1, "t", T0)
    s.apply(kind="PAUSE", request_id="p", tenant="a", schedule_id="x", idempotency_key=None,
            expected_version=None, spec=None, issued_at=T0 + 1, now=T0 + 1)
    out = tick(s, T0 + 11)
    assert [e.state for e in out.events] == ["CANCELED"] and not out.dead


def test_a_report_that_does_not_belong_to_the_schedule_is_ignored_before_anything_is_written() -> None:
    s = shard(cron="0 * * * *")
    tick(s, T0)
    oid = occurrence_id("x", 1, T0)
    common = dict(kind="FAILED", scheduled_for=T0, attempt=1, token="t", retryable=True, error_class="E",
                  error_message="boom", now=T0)
    cases = {
        "not registered": dict(oid=oid, schedule_id="x", tenant="nobody", version=1),
        "another tenant": dict(oid=oid, schedule_id="x", tenant="b", version=1),
        "does not exist": dict(oid=occurrence_id("y", 1, T0), schedule_id="y", tenant="a", version=1),
        "version 2": dict(oid=occurrence_id("x", 2, T0), schedule_id="x", tenant="a", version=2),
        "is not H(": dict(oid=occurrence_id("z", 1, T0), schedule_id="x", tenant="a", version=1),
    }
    s.tenants["b"] = Tenant(name="b")
    for why, kw in cases.items():
        res = apply_report(s, **common, **kw)  # type: ignore[arg-type]
        assert res.ignored is not None and why in res.ignored, (why, res)
        assert not res.events and not res.dead
    assert s.attempts.inflight == {}


def test_a_started_report_of_an_occurrence_the_schedule_never_had_is_not_tracked() -> None:
    s = shard(cron="0 * * * *", lease_s=10)
    for f, why in ((T0 + 1, "not a fire time"), (T0 + 3600, "in the future")):
        res = report(s, "STARTED", f, 1, "t", T0)
        assert res.ignored is not None and why in res.ignored, res
    assert s.attempts.inflight == {}
    runs = [d for n in range(T0, T0 + 60) for d in tick(s, n).dispatch]
    assert [(d.scheduled_for, d.attempt) for d in runs] == [(T0, 1)]  # nothing invented


def test_queue_one_whose_running_occurrence_ends_in_the_tick_of_the_next_fire() -> None:
    """Regression (found by the issue 10 review, older than it): the running occurrence ends in
    the reports of the very tick that fires the next one; the gate then met the released one in
    ``queued`` but nothing in ``occupying``, and the tick raised KeyError (a crash loop, since the
    release is persisted). Now the next one is skipped while the released one is emitted."""
    s = shard(overlap="QUEUE_ONE", lease_s=600)
    assert [d.scheduled_for for d in tick(s, T0).dispatch] == [T0]
    assert tick(s, T0 + 60).dispatch == []  # T0 + 60 queued behind the running T0
    assert [e.state for e in report(s, "SUCCEEDED", T0, 1, "t", T0 + 120).events] == ["SUCCEEDED"]
    out = tick(s, T0 + 120)
    assert [d.scheduled_for for d in out.dispatch] == [T0 + 60]
    skipped = [(e.scheduled_for, e.reason) for e in out.events if e.state == "SKIPPED_OVERLAP"]
    assert skipped == [(T0 + 120, f"{occurrence_id('x', 1, T0 + 60)} still running (QUEUE_ONE)")]


def test_a_report_of_attempt_zero_is_ignored_with_the_reason() -> None:
    """Regression (issue 10 review): a FAILED report of attempt 0 raised in the backoff, which
    made the processor rebuild the shard from Kafka on every such report."""
    s = shard()
    assert [d.scheduled_for for d in tick(s, T0).dispatch] == [T0]
    res = report(s, "FAILED", T0, 0, "t", T0 + 5)
    assert res.ignored == "attempt 0 does not exist (attempts count from 1)"
    assert res.events == [] and res.dead == []


def test_a_fast_handlers_final_report_without_started_ends_the_attempt_and_fences_the_rest() -> None:
    # A fast handler (scheduler/worker/fast.py) sends no STARTED: its final report alone must end a
    # tracked attempt (overlap-tracked here, from its emission) and fence any other token after it.
    s = shard(cron="0 * * * *", overlap="SKIP_IF_RUNNING")
    tick(s, T0)
    assert [e.state for e in report(s, "SUCCEEDED", T0, 1, "fast", T0 + 1).events] == ["SUCCEEDED"]
    assert report(s, "STARTED", T0, 1, "zombie", T0 + 2).ignored
    assert report(s, "SUCCEEDED", T0, 1, "fast", T0 + 2).ignored  # a redelivery's duplicate report
    assert [d.scheduled_for for d in tick(s, T0 + 3600).dispatch] == [T0 + 3600]  # no longer occupied
    untracked = shard(cron="0 * * * *")  # ALLOW, uncapped: not tracked before its first report
    tick(untracked, T0)
    assert [e.state for e in report(untracked, "FAILED", T0, 1, "fast", T0 + 1, retryable=False).events] == [
        "DEAD"
    ]


def test_a_final_report_of_an_untracked_attempt_leaves_nothing_tracked_and_fences_its_duplicate() -> None:
    # An ALLOW first attempt is not tracked before its report; its SUCCEEDED report finishes it
    # without tracking it: nothing in flight, nothing counted against max_running, and a
    # redelivered copy of the report (or a late STARTED) is ignored.
    s = shard(cron="0 * * * *")
    tick(s, T0)
    assert [e.state for e in report(s, "SUCCEEDED", T0, 1, "fast", T0 + 1).events] == ["SUCCEEDED"]
    assert s.attempts.inflight == {} and s.attempts.running == {} and s.attempts.of_schedule("x") == []
    assert report(s, "SUCCEEDED", T0, 1, "fast", T0 + 2).ignored
    assert report(s, "STARTED", T0, 1, "zombie", T0 + 2).ignored
    assert s.runtime_changes() == []
