"""The reconciler's expected occurrences against an independent oracle, and its verdicts.

The oracle shares nothing with :mod:`scheduler.reconcile.expect` but ``available_at`` (the
jitter rule, defined once in the domain): fire times come from the brute-force minute walk
in ``zoneinfo`` of ``test_time_oracle`` (cron in DST zones, around real transitions), and
membership from a different reading of the history: an occurrence is due when the last
change applied *before the lane's cursor reached it* left its version ACTIVE with an
effective time before it.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from test_time_oracle import HORIZON, OPTIONS, SETTINGS, Fields, fields, oracle, window

from scheduler.domain import ScheduleSpec, available_at, compile_spec, occurrence_id
from scheduler.reconcile.account import DUPLICATE, GAP, SCHEDULED, UNEXPECTED, Ledger, settle
from scheduler.reconcile.expect import DONE, Change, Cursor, expected
from scheduler.reconcile.metrics import ReconcileMetrics
from scheduler.reconcile.run import Outcome, Window, WindowNotClosed, close_window

SID = "86719d5a5d606db674cc0aaddb1e3785"


@dataclasses.dataclass(frozen=True)
class Version:
    fields: Fields
    spec: ScheduleSpec


def _spec(f: Fields, zone: str, opts: tuple[str, str], window_minutes: int) -> ScheduleSpec:
    return ScheduleSpec(kind="cron", cron=f.text(), timezone=zone, handler="h",  # type: ignore[arg-type]
                        nonexistent=opts[0], repeated=opts[1], window_minutes=window_minutes)  # type: ignore[arg-type]


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, int, list[Change], dict[int, Version]]:
    """A schedule's history over a window around a DST transition: a CREATE, then up to six
    changes a processor could have applied (the rules of docs/schedules.md), with cursors
    that follow time as a processor's do."""
    zone, t = draw(window())
    opts = draw(OPTIONS)
    times = sorted(draw(st.sets(st.integers(0, HORIZON // 60 - 1), min_size=1, max_size=7)))
    versions: dict[int, Version] = {}
    changes: list[Change] = []
    version, state, eff = 0, "", 0
    for i, minute in enumerate(times):
        at = t - t % 60 + minute * 60 + draw(st.sampled_from([0, 0, 0, 17, 59]))  # ties with fire times
        cmd = "CREATE" if i == 0 else draw(st.sampled_from(["UPDATE", "PAUSE", "RESUME", "CANCEL"]))
        issued = at + draw(st.one_of(st.sampled_from([0, -60, 60, -120]), st.integers(-300, 300)))
        spec = None
        if cmd in ("CREATE", "UPDATE"):
            f = draw(fields())
            spec = _spec(f, zone, opts, draw(st.sampled_from([0, 0, 5, 30])))
            version += 1
            versions[version] = Version(f, spec)
            state = "ACTIVE" if cmd == "CREATE" or state in ("ACTIVE", "PAUSED") else state
            eff = issued
        elif cmd == "PAUSE" and state == "ACTIVE":
            state = "PAUSED"
        elif cmd == "RESUME" and state == "PAUSED":
            state, eff = "ACTIVE", max(issued, at)
        elif cmd == "CANCEL":
            state = "CANCELED"
        cursor: Cursor = draw(st.sampled_from([(at, DONE), (at - 1, DONE), (at, SID), (at, "")]))
        changes.append(Change(schedule_id=SID, tenant="t", version=version, command=cmd, state=state,
                              applied_at_s=at, effective_from_s=eff, spec=spec,
                              cursors={"STRICT": cursor, "FLEXIBLE": cursor}))
        if cmd == "CANCEL":
            break
    return t, t + HORIZON, changes, versions


def oracle_expected(
    t1: int, t2: int, changes: list[Change], versions: dict[int, Version]
) -> set[tuple[int, int]]:
    """(version, scheduled_for) of every occurrence due, read from the history the other way round."""
    out = set()
    for v, ver in versions.items():
        spec = ver.spec
        compiled = compile_spec(spec)
        dst = (str(spec.nonexistent), str(spec.repeated))
        for f in oracle(ver.fields, spec.timezone, t1 - 1, t2 - t1, *dst):
            if f >= t2:
                continue
            avail = available_at(compiled, SID, v, f, spec.window_minutes * 60)
            before = [c for c in changes if c.cursors is not None and c.cursors["STRICT"] < (avail, SID)]
            last = before[-1] if before else None
            if last is not None and (last.version, last.state) == (v, "ACTIVE") and f > last.effective_from_s:
                out.add((v, f))
    return out


@settings(SETTINGS, max_examples=200)
@given(h=histories())
def test_reconcile_expected_cron_occurrences_match_the_oracle_across_dst(
    h: tuple[int, int, list[Change], dict[int, Version]],
) -> None:
    t1, t2, changes, versions = h
    got = [(e.version, e.scheduled_for) for e in expected(SID, changes, t1, t2)]
    assert len(got) == len(set(got))
    assert set(got) == oracle_expected(t1, t2, changes, versions)
    for e in expected(SID, changes, t1, t2):
        assert e.occurrence_id == occurrence_id(SID, e.version, e.scheduled_for)


def _change(cmd: str, at: int, *, version: int = 1, state: str = "ACTIVE", eff: int | None = None,
            spec: ScheduleSpec | None = None, cursor: Cursor | None = None) -> Change:
    c = cursor or (at, DONE)
    return Change(schedule_id=SID, tenant="t", version=version, command=cmd, state=state, applied_at_s=at,
                  effective_from_s=at if eff is None else eff, spec=spec,
                  cursors={"STRICT": c, "FLEXIBLE": c})


T0 = 1_798_761_600  # 2027-01-01T00:00:00Z
EVERY_MINUTE = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h")


def test_reconcile_a_one_time_schedule_created_after_its_time_is_still_due() -> None:
    once = ScheduleSpec(kind="once", at="2027-01-01T00:00:00", timezone="UTC", handler="h")
    late = [_change("CREATE", T0 + 90, spec=once)]
    assert [e.scheduled_for for e in expected(SID, late, T0 - 60, T0 + 3600)] == [T0]
    # ... but a RESUME of a paused one-time schedule whose time passed during the pause: not due
    paused = [_change("CREATE", T0 - 600, spec=once), _change("PAUSE", T0 - 300, state="PAUSED"),
              _change("RESUME", T0 + 60)]
    assert list(expected(SID, paused, T0 - 60, T0 + 3600)) == []


def test_reconcile_pause_update_and_cancel_cut_at_their_cursors() -> None:
    hist = [
        _change("CREATE", T0, spec=EVERY_MINUTE),  # fires T0+60 ...
        _change("PAUSE", T0 + 150, state="PAUSED"),  # ... T0+120 (cursor T0+150 passed it)
        _change("RESUME", T0 + 300),  # from T0+360
        _change("UPDATE", T0 + 420, version=2, spec=EVERY_MINUTE),  # v1 up to T0+420, v2 from T0+480
        _change("CANCEL", T0 + 540, version=2, state="CANCELED", cursor=(T0 + 540, "")),  # v2 T0+480 only
    ]
    got = [(e.version, e.scheduled_for - T0) for e in expected(SID, hist, T0, T0 + 3600)]
    assert got == [(1, 60), (1, 120), (1, 360), (1, 420), (2, 480)]


def test_reconcile_v1_history_without_cursors_bounds_by_the_change_times() -> None:
    hist = [dataclasses.replace(c, cursors=None) for c in (
        _change("CREATE", T0, spec=EVERY_MINUTE), _change("CANCEL", T0 + 150, state="CANCELED"))]
    assert [e.scheduled_for - T0 for e in expected(SID, hist, T0, T0 + 3600)] == [60, 120]


def test_reconcile_settle_names_gaps_unexpected_duplicates_and_waiting_work() -> None:
    hist = [_change("CREATE", T0, spec=EVERY_MINUTE)]
    want = list(expected(SID, hist, T0, T0 + 360))  # T0+60 ... T0+300
    oid = [e.occurrence_id for e in want]
    ledger = Ledger(T0, T0 + 360)
    ledger.dispatch(oid[0], SID, 1, T0 + 60, 1)
    ledger.report(oid[0], SID, 1, T0 + 60, 1, "SUCCEEDED")
    ledger.event(oid[0], SID, 1, T0 + 60, "SUCCEEDED", 1)
    ledger.dispatch(oid[1], SID, 1, T0 + 120, 1)
    ledger.dispatch(oid[1], SID, 1, T0 + 120, 1)  # twice in committed data
    ledger.event(oid[2], SID, 1, T0 + 180, "MISSED", 0)
    ledger.dispatch(oid[3], SID, 1, T0 + 240, 1)
    ledger.report(oid[3], SID, 1, T0 + 240, 1, "STARTED")
    stray = occurrence_id(SID, 1, T0 + 90)
    ledger.event(stray, SID, 1, T0 + 90, "SUCCEEDED", 1)
    ledger.event(occurrence_id(SID, 1, T0 + 7200), SID, 1, T0 + 7200, "SUCCEEDED", 1)  # outside: ignored
    v = settle(want, ledger, waiting={})
    assert v.expected == 5
    assert dict(v.states) == {"SUCCEEDED": 1, "ENQUEUED": 1, "MISSED": 1, "RUNNING": 1, GAP: 1, UNEXPECTED: 1}
    found = [(f.kind, f.occurrence_id) for f in v.findings]
    assert found == [(DUPLICATE, oid[1]), (GAP, oid[4]), (UNEXPECTED, stray)]
    # the same last occurrence held on a catch-up backlog: waiting, not a gap
    v2 = settle(want, Ledger(T0, T0 + 360), waiting={SID: (T0 + 300, T0 + 300)})
    assert v2.states[SCHEDULED] == 1 and v2.states[GAP] == 4


def test_reconcile_two_successful_attempts_are_two_effects_a_redelivery_is_not() -> None:
    oid = occurrence_id(SID, 1, T0 + 60)
    ledger = Ledger(T0, T0 + 120)
    ledger.report(oid, SID, 1, T0 + 60, 1, "SUCCEEDED")
    ledger.report(oid, SID, 1, T0 + 60, 1, "SUCCEEDED")  # the same attempt redelivered: one effect
    assert ledger.seen[oid].twice is None
    ledger.report(oid, SID, 1, T0 + 60, 2, "SUCCEEDED")
    v = settle(expected(SID, [_change("CREATE", T0, spec=EVERY_MINUTE)], T0, T0 + 120), ledger)
    assert [(f.kind, f.occurrence_id) for f in v.findings] == [(DUPLICATE, oid)]
    assert v.states["RUNNING"] == 1


def test_reconcile_a_window_is_clamped_to_the_closed_horizon_or_refused() -> None:

    w = close_window(T0, T0 + 3600, T0 + 1800, 300, "t")
    assert (w.t1, w.t2, w.clamped) == (T0, T0 + 1501, True)  # a flexible occurrence may wait 300 s more
    assert not close_window(T0, T0 + 60, T0 + 3600, 0, "t").clamped
    with pytest.raises(WindowNotClosed, match="watermark for tenant t is at"):
        close_window(T0, T0 + 60, T0 - 1, 0, "t")
    with pytest.raises(WindowNotClosed, match="no processor has written its state"):
        close_window(T0, T0 + 60, None, 0, "t")


def test_reconcile_watch_metrics_count_each_window() -> None:

    hist = [_change("CREATE", T0, spec=EVERY_MINUTE)]
    v = settle(expected(SID, hist, T0, T0 + 360), Ledger(T0, T0 + 360))
    m = ReconcileMetrics()
    m.observe("t", Outcome(window=Window(t1=T0, t2=T0 + 360, asked_t2=T0 + 360, closed_until=T0 + 400),
                           verdict=v, schedules=1, source="topics", seconds=0.1))
    text = generate_latest(m.registry).decode()
    assert 'ksched_reconcile_expected_total{tenant="t"} 5.0' in text
    assert 'ksched_reconcile_gaps_total{tenant="t"} 5.0' in text
    assert 'ksched_reconcile_unexpected_total{tenant="t"} 0.0' in text
    assert "ksched_reconcile_last_window_age_seconds" in text
