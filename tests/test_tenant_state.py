"""A shard and its tenants' state, without Kafka: a disabled tenant's commands are refused and its
due occurrences recorded MISSED (then resumed), a removed one is unknown, a lowered quota holds."""

from __future__ import annotations

from dataclasses import replace

from test_shard import T0, create, spec

from scheduler.domain import occurrence_id
from scheduler.processor.shard import Shard
from scheduler.tenants import Tenant
from scheduler.vocabulary import Lane, OccurrenceState, TenantState


def _tick(s: Shard, now: int) -> tuple[list[tuple[str, int]], list[tuple[str, int, str, str | None]]]:
    out = s.due(now, 100_000, float(now))
    return ([(d.schedule_id, d.scheduled_for) for d in out.dispatch],
            [(e.schedule_id, e.scheduled_for, e.state, e.reason) for e in out.events])


def test_a_disabled_tenant_is_refused_and_its_occurrences_are_missed_then_resume() -> None:
    tenants = {"a": Tenant(name="a"), "b": Tenant(name="b")}
    s = Shard(0, tenants, partitions=1)
    assert create(s, "s1", spec(), T0 - 30).accepted  # type: ignore[attr-defined]
    assert create(s, "s2", spec(), T0 - 30, tenant="b").accepted  # type: ignore[attr-defined]
    assert _tick(s, T0)[0] == [("s1", T0), ("s2", T0)]
    tenants["a"] = replace(tenants["a"], state=TenantState.DISABLED)  # what the registry does
    r = create(s, "s3", spec(), T0 + 1)
    assert (r.accepted, r.code) == (False, "TENANT_DISABLED")  # type: ignore[attr-defined]
    assert "ksched tenants enable a" in r.reason  # type: ignore[attr-defined]
    fired, events = _tick(s, T0 + 60)
    assert fired == [("s2", T0 + 60)]  # the other tenant is not held back
    why = "tenant a is disabled: its schedules fire again after `ksched tenants enable a`"
    assert events == [("s1", T0 + 60, OccurrenceState.MISSED, why)]  # one event per occurrence
    assert _tick(s, T0 + 120) == ([("s2", T0 + 120)], [("s1", T0 + 120, OccurrenceState.MISSED, why)])
    assert s.watermark() >= T0 + 120  # the stopped tenant's lane keeps up: nothing is held back
    tenants["a"] = replace(tenants["a"], state=TenantState.ACTIVE)
    assert _tick(s, T0 + 180) == ([("s1", T0 + 180), ("s2", T0 + 180)], [])  # resumed, nothing caught up


def test_a_disabled_tenants_catch_up_backlog_is_missed() -> None:
    tenants = {"a": Tenant(name="a", catch_up_rate_per_s=1)}
    s = Shard(0, tenants, partitions=1)
    create(s, "x", spec(misfire="CATCH_UP", catch_up_limit=4, max_lateness_s=30), T0 - 1)
    s.due(T0 - 1, 1000, float(T0 - 1))
    first = s.due(T0 + 600, 1000, float(T0 + 600))  # 4 kept late ones; the rate lets one out now
    assert [d.scheduled_for for d in first.dispatch if d.lane == Lane.CATCH_UP] == [T0 + 360]
    tenants["a"] = replace(tenants["a"], state=TenantState.DISABLED)
    fired, events = _tick(s, T0 + 601)
    assert fired == [] and not s.catch_up.get("a") and "x" not in s.catch_up_span
    missed = [(t, OccurrenceState.MISSED) for t in (T0 + 420, T0 + 480, T0 + 540)]
    assert [(e[1], e[2]) for e in events] == missed
    assert all("tenant a is disabled" in (e[3] or "") for e in events)


def test_a_removed_tenant_is_unknown_and_its_schedules_do_not_fire() -> None:
    tenants = {"a": Tenant(name="a")}
    s = Shard(0, tenants, partitions=1)
    assert create(s, "s1", spec(), T0 - 30).accepted  # type: ignore[attr-defined]
    del tenants["a"]
    r = create(s, "s9", spec(), T0)
    assert (r.accepted, r.code) == (False, "UNKNOWN_TENANT")  # type: ignore[attr-defined]
    out = s.due(T0, 100_000, float(T0))
    assert out.dispatch == [] and [(e.occurrence_id, e.state) for e in out.events] == [
        (occurrence_id("s1", 1, T0), OccurrenceState.MISSED)
    ]
    assert "tenant a is not registered (removed)" in (out.events[0].reason or "")


def test_a_lowered_quota_is_in_force_at_the_next_command_and_tick() -> None:
    tenants = {"a": Tenant(name="a", trigger_rate_per_s=1000)}
    s = Shard(0, tenants, partitions=1)
    for i in range(20):
        assert create(s, f"q{i:02}", spec(), T0 - 30).accepted  # type: ignore[attr-defined]
    tenants["a"] = replace(tenants["a"], trigger_rate_per_s=5, max_schedules=20)
    assert create(s, "q99", spec(), T0 - 20).code == "QUOTA_EXCEEDED"  # type: ignore[attr-defined]
    fired, _ = _tick(s, T0)
    assert len(fired) == 5  # the bucket was re-created at the new rate (burst = 1 s of it)


def test_a_disabled_tenants_retry_waits_and_a_removed_tenants_is_canceled() -> None:
    from test_lifecycle import report, shard, tick, until_emitted

    for removed in (False, True):
        s = shard(retry_max_attempts=3, retry_backoff_base_s=1.0, retry_backoff_cap_s=2.0, cron="0 * * * *")
        assert [d.attempt for d in tick(s, T0).dispatch] == [1]
        report(s, "STARTED", T0, 1, "t1", T0)
        assert [e.state for e in report(s, "FAILED", T0, 1, "t1", T0).events] == ["RETRY_WAIT"]
        if removed:
            del s.tenants["a"]
            events = [e for n in range(T0 + 1, T0 + 10) for e in tick(s, n).events]
            assert [(e.state, e.reason) for e in events] == [
                ("CANCELED", "tenant a is not registered (removed) before the retry")
            ]
            continue
        s.tenants["a"] = replace(s.tenants["a"], state=TenantState.DISABLED)
        assert not [d for n in range(T0 + 1, T0 + 60) for d in tick(s, n).dispatch]  # held, not dropped
        s.tenants["a"] = replace(s.tenants["a"], state=TenantState.ACTIVE)
        _, out = until_emitted(s, T0 + 60, T0 + 70, Lane.RETRY)
        assert [d.attempt for d in out.dispatch if d.lane == Lane.RETRY] == [2]
