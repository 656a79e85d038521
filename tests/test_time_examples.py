"""Worked examples of the time contract (the ones in docs/time.md) and the CompiledSpec API."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from utc_queries import between, count_between, fire_times, next_after, run_index

import scheduler.domain as domain
from scheduler.domain import CompiledSpec, ScheduleSpec, SpecError, compile_spec
from scheduler.domain.compiled import compile, compile_timing

UTC = dt.UTC


def u(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def fires(cron: str, tz: str, after: dt.datetime, n: int, **opts: str) -> list[str]:
    c = compile_timing(kind="cron", cron=cron, timezone=tz, **opts)  # type: ignore[arg-type]
    return [f.strftime("%Y-%m-%dT%H:%MZ") for f in fire_times(c, after, n)]


def test_time_public_surface_is_pinned() -> None:
    assert domain.__all__ == [
        "CompiledSpec",
        "ScheduleSpec",
        "SpecError",
        "available_at",
        "compile_spec",
        "occurrence_id",
        "retry_delay_s",
        "schedule_id_for",
    ]
    assert compile is compile_spec


# -- America/New_York 2026: spring forward 03-08 02:00 EST -> 03:00 EDT; fall back 11-01 ------
def test_time_new_york_spring_skip() -> None:
    assert fires("30 2 * * *", "America/New_York", u(2026, 3, 7), 3) == [
        "2026-03-07T07:30Z", "2026-03-09T06:30Z", "2026-03-10T06:30Z"]


def test_time_new_york_spring_shift() -> None:
    assert fires("30 2 * * *", "America/New_York", u(2026, 3, 7), 3, nonexistent="shift") == [
        "2026-03-07T07:30Z", "2026-03-08T07:00Z", "2026-03-09T06:30Z"]


def test_time_new_york_shift_fires_once_per_gap() -> None:
    # 02:00 02:15 02:30 02:45 all fall into the gap: one firing at 03:00 EDT, which is
    # also 03:00's own firing -- still one instant.
    assert fires("*/15 2,3 8 3 *", "America/New_York", u(2026, 3, 8), 5, nonexistent="shift") == [
        "2026-03-08T07:00Z", "2026-03-08T07:15Z", "2026-03-08T07:30Z", "2026-03-08T07:45Z",
        "2027-03-08T07:00Z"]


def test_time_new_york_fall_back_once_and_all() -> None:
    assert fires("30 1 * * *", "America/New_York", u(2026, 10, 31, 12), 2) == [
        "2026-11-01T05:30Z", "2026-11-02T06:30Z"]
    assert fires("30 1 * * *", "America/New_York", u(2026, 10, 31, 12), 3, repeated="all") == [
        "2026-11-01T05:30Z", "2026-11-01T06:30Z", "2026-11-02T06:30Z"]


def test_time_hourly_is_hourly_in_utc_across_fall_back() -> None:
    # "0 * * * *" fires at 01:00 EDT and (repeated=all) again at 01:00 EST
    assert fires("0 * * * *", "America/New_York", u(2026, 11, 1, 4, 30), 3) == [
        "2026-11-01T05:00Z", "2026-11-01T07:00Z", "2026-11-01T08:00Z"]
    assert fires("0 * * * *", "America/New_York", u(2026, 11, 1, 4, 30), 3, repeated="all") == [
        "2026-11-01T05:00Z", "2026-11-01T06:00Z", "2026-11-01T07:00Z"]


# -- Europe/Berlin 2026: 03-29 02:00 CET -> 03:00 CEST; 10-25 03:00 CEST -> 02:00 CET ---------
def test_time_berlin_spring() -> None:
    assert fires("30 2 * * *", "Europe/Berlin", u(2026, 3, 28), 2) == [
        "2026-03-28T01:30Z", "2026-03-30T00:30Z"]
    assert fires("30 2 * * *", "Europe/Berlin", u(2026, 3, 28), 2, nonexistent="shift") == [
        "2026-03-28T01:30Z", "2026-03-29T01:00Z"]


def test_time_berlin_autumn() -> None:
    assert fires("30 2 * * *", "Europe/Berlin", u(2026, 10, 24, 12), 2) == [
        "2026-10-25T00:30Z", "2026-10-26T01:30Z"]
    assert fires("30 2 * * *", "Europe/Berlin", u(2026, 10, 24, 12), 2, repeated="all") == [
        "2026-10-25T00:30Z", "2026-10-25T01:30Z"]


def test_time_daily_is_not_24h_in_utc() -> None:
    got = fires("0 9 * * *", "Europe/Berlin", u(2026, 3, 27), 3)
    assert got == ["2026-03-27T08:00Z", "2026-03-28T08:00Z", "2026-03-29T07:00Z"]


def test_time_lord_howe_half_hour_gap() -> None:
    # 2026-10-04 02:00 +10:30 -> 02:30 +11
    # 10-04 02:15 local never happens; 10-05 02:15 +11 is 10-04 15:15Z
    assert fires("15 2 * * *", "Australia/Lord_Howe", u(2026, 10, 3), 2) == [
        "2026-10-04T15:15Z", "2026-10-05T15:15Z"]
    # shift: 02:30 +11 on 10-04, the first instant after the gap, is 10-03 15:30Z
    assert fires("15 2 * * *", "Australia/Lord_Howe", u(2026, 10, 3), 2,
                 nonexistent="shift") == ["2026-10-03T15:30Z", "2026-10-04T15:15Z"]


def test_time_apia_skipped_day() -> None:
    assert fires("0 9 * * *", "Pacific/Apia", u(2011, 12, 29), 2) == [
        "2011-12-29T19:00Z", "2011-12-30T19:00Z"]  # 12-30 local never happened
    assert fires("0 9 30 12 *", "Pacific/Apia", u(2011, 12, 1), 1, nonexistent="shift") == [
        "2011-12-30T10:00Z"]  # first valid instant after the gap: 12-31 00:00 +14


def test_time_havana_midnight_transition() -> None:
    # 2026-03-08 00:00 CST -> 01:00 CDT: "0 0 * * *" has no midnight that day
    assert fires("0 0 * * *", "America/Havana", u(2026, 3, 7, 12), 2) == [
        "2026-03-09T04:00Z", "2026-03-10T04:00Z"]
    assert fires("0 0 * * *", "America/Havana", u(2026, 3, 7, 12), 1, nonexistent="shift") == [
        "2026-03-08T05:00Z"]


def test_time_sao_paulo_after_dst_abolished() -> None:
    got = fires("0 0 * * *", "America/Sao_Paulo", u(2026, 10, 30), 5)
    assert all(g.endswith("T03:00Z") for g in got)


def test_time_moscow_2014_one_off_fall_back() -> None:
    # 2014-10-26 02:00 MSK(+4) -> 01:00 MSK(+3): 01:30 happens twice
    assert fires("30 1 26 10 *", "Europe/Moscow", u(2014, 10, 1), 1) == ["2014-10-25T21:30Z"]
    assert fires("30 1 26 10 *", "Europe/Moscow", u(2014, 10, 1), 2, repeated="all") == [
        "2014-10-25T21:30Z", "2014-10-25T22:30Z"]


def test_time_far_future() -> None:
    assert fires("30 2 * * *", "America/New_York", u(2100, 3, 13), 2) == [
        "2100-03-13T07:30Z", "2100-03-15T06:30Z"]  # 2100-03-14 is the second Sunday
    assert fires("0 0 29 2 *", "UTC", u(2096, 3, 1), 1) == ["2104-02-29T00:00Z"]


# -- one-time ------------------------------------------------------------------------------
def test_time_once_fires_once() -> None:
    c = compile_timing(kind="once", at="2026-06-01T09:00", timezone="Europe/Berlin")
    assert fire_times(c, u(2026, 1, 1), 5) == [u(2026, 6, 1, 7)]
    assert next_after(c, u(2026, 6, 1, 7)) is None
    assert between(c, u(2026, 6, 1, 6), u(2026, 6, 1, 7)) == [u(2026, 6, 1, 7)]


def test_time_once_ambiguous_takes_first_unless_offset_given() -> None:
    first = compile_timing(kind="once", at="2026-11-01T01:30", timezone="America/New_York")
    second = compile_timing(kind="once", at="2026-11-01T01:30-05:00", timezone="America/New_York")
    explicit_first = compile_timing(kind="once", at="2026-11-01T01:30-04:00",
                                    timezone="America/New_York")
    assert first.at_epoch == explicit_first.at_epoch == int(u(2026, 11, 1, 5, 30).timestamp())
    assert second.at_epoch == int(u(2026, 11, 1, 6, 30).timestamp())


@pytest.mark.parametrize(
    ("at", "tz", "message"),
    [
        ("2026-03-08T02:30", "America/New_York",
         "at: 2026-03-08T02:30 does not exist in America/New_York"),
        ("2026-03-29T02:30:00+01:00", "Europe/Berlin",
         "at: 2026-03-29T02:30:00+01:00 does not exist in Europe/Berlin"),
        ("2011-12-30T12:00", "Pacific/Apia", "at: 2011-12-30T12:00 does not exist in Pacific/Apia"),
        ("2026-11-01T01:30+02:00", "America/New_York",
         "at: 2026-11-01T01:30+02:00: offset +02:00 is not used by America/New_York at "
         "2026-11-01T01:30:00"),
        ("tomorrow", "UTC", "at: 'tomorrow' is not an ISO-8601 datetime"),
        ("2026-06-01T09:00:00.5", "UTC", "at: 2026-06-01T09:00:00.5: sub-second precision is not "
                                         "supported"),
    ],
)
def test_time_once_rejections(at: str, tz: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        compile_timing(kind="once", at=at, timezone=tz)
    assert str(info.value) == message


@pytest.mark.parametrize("zone", ["Mars/Base", "", "../etc/passwd", "/usr/share/zoneinfo/UTC"])
def test_time_unknown_zone(zone: str) -> None:
    with pytest.raises(SpecError) as info:
        compile_timing(kind="cron", cron="* * * * *", timezone=zone)
    assert str(info.value) == f"timezone: {zone!r} is not a known IANA zone"


def test_time_bad_dst_options() -> None:
    with pytest.raises(SpecError, match=r"^nonexistent: 'later' is not one of 'skip', 'shift'$"):
        compile_timing(kind="cron", cron="* * * * *", timezone="UTC", nonexistent="later")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"^repeated: 'both' is not one of 'once', 'all'$"):
        compile_timing(kind="cron", cron="* * * * *", timezone="UTC", repeated="both")  # type: ignore[arg-type]


# -- bounds, max_runs, between ---------------------------------------------------------------
def spec(**kw: object) -> ScheduleSpec:
    base: dict[str, object] = {"kind": "cron", "cron": "0 * * * *", "timezone": "UTC",
                               "handler": "h"}
    base.update(kw)
    return ScheduleSpec(**base)  # type: ignore[arg-type]


def test_time_start_and_end_are_inclusive() -> None:
    c = compile_spec(spec(start=u(2026, 1, 1, 3), end=u(2026, 1, 1, 5)))
    assert fire_times(c, u(2020, 1, 1), 10) == [u(2026, 1, 1, 3), u(2026, 1, 1, 4), u(2026, 1, 1, 5)]
    c2 = compile_spec(spec(start=u(2026, 1, 1, 3, 0, 1)))
    assert next_after(c2, u(2020, 1, 1)) == u(2026, 1, 1, 4)


def test_time_max_runs_counts_from_start_without_state() -> None:
    c = compile_spec(spec(start=u(2026, 1, 1, 0, 30), max_runs=3))
    assert fire_times(c, u(2020, 1, 1), 10) == [u(2026, 1, 1, 1), u(2026, 1, 1, 2), u(2026, 1, 1, 3)]
    # asking from any later point gives the same answer: nothing is counted at run time
    assert next_after(c, u(2026, 1, 1, 2)) == u(2026, 1, 1, 3)
    assert next_after(c, u(2026, 1, 1, 3)) is None
    assert run_index(c, u(2026, 1, 1, 2)) == 2
    assert run_index(c, u(2026, 1, 1, 2, 30)) is None
    # end tighter than max_runs wins
    c2 = compile_spec(spec(start=u(2026, 1, 1), end=u(2026, 1, 1, 1), max_runs=5))
    assert count_between(c2, u(2025, 1, 1), u(2027, 1, 1)) == 2


def test_time_max_runs_needs_start() -> None:
    with pytest.raises(SpecError) as info:
        compile_spec(spec(max_runs=3))
    assert str(info.value) == "max_runs: requires start (runs are counted from start)"
    with pytest.raises(SpecError) as info:
        compile_spec(spec(max_runs=100_001, start=u(2026, 1, 1)))
    assert str(info.value) == "max_runs: 100001 is out of range 1-100000 runs"


def test_time_once_outside_bounds_is_rejected() -> None:
    with pytest.raises(SpecError) as info:
        compile_spec(spec(kind="once", cron=None, at="2026-01-01T00:00", end=u(2025, 1, 1)))
    assert str(info.value) == "at: 2026-01-01T00:00 is outside the start/end bounds"


def test_time_between_is_exclusive_inclusive_and_partitions() -> None:
    c = compile_spec(spec())
    assert between(c, u(2026, 1, 1, 1), u(2026, 1, 1, 3)) == [u(2026, 1, 1, 2), u(2026, 1, 1, 3)]
    windows = [u(2026, 1, 1, h) for h in range(0, 24, 4)] + [u(2026, 1, 2)]
    joined = [f for a, b in itertools.pairwise(windows) for f in between(c, a, b)]
    assert joined == between(c, windows[0], windows[-1]) and len(joined) == 24
    assert between(c, u(2026, 1, 1), u(2026, 1, 2), limit=2) == [u(2026, 1, 1, 1), u(2026, 1, 1, 2)]


def test_time_next_after_is_strict_and_handles_sub_seconds() -> None:
    c = compile_spec(spec())
    assert next_after(c, u(2026, 1, 1, 1)) == u(2026, 1, 1, 2)
    assert next_after(c, u(2026, 1, 1, 0, 59, 59) + dt.timedelta(microseconds=999_999)) == u(
        2026, 1, 1, 1)
    berlin = dt.datetime(2026, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert next_after(c, berlin) == u(2026, 1, 1, 2)
    with pytest.raises(ValueError, match="naive"):
        next_after(c, dt.datetime(2026, 1, 1))


def test_time_epoch_and_datetime_apis_agree() -> None:
    c = compile_spec(spec(cron="*/7 3-5 * * *", timezone="Europe/Berlin"))
    t = u(2026, 3, 28, 22)
    s = int(t.timestamp())
    assert [int(f.timestamp()) for f in fire_times(c, t, 20)] == c.fire_times_epoch(s, 20)
    assert c.next_after_epoch(s) == int(fire_times(c, t, 1)[0].timestamp())


def test_time_identical_specs_share_compiled_objects() -> None:
    a = compile_spec(spec(cron="0 9 * * 1-5", timezone="Europe/Berlin", handler="a"))
    b = compile_spec(spec(cron="0 9 * * 1-5", timezone="Europe/Berlin", handler="b", payload=b"x"))
    c = compile_spec(spec(cron="0 9 * * 1-5", timezone="Europe/Berlin",
                          start=u(2026, 1, 1)))
    d = compile_spec(spec(cron="0 9 * * 1-5", timezone="Europe/Berlin", nonexistent="shift"))
    assert a is b and isinstance(a, CompiledSpec)
    assert a.rule is c.rule and a is not c
    assert a.rule is not d.rule


def test_time_results_do_not_depend_on_call_history() -> None:
    c1 = compile_spec(spec(cron="*/5 * * * *", timezone="America/New_York"))
    t = int(u(2026, 11, 1, 4).timestamp())
    fresh = [c1.rule._next_uncached(t + 37 * i) for i in range(200)]  # type: ignore[union-attr]
    cached = [c1.next_after_epoch(t + 37 * i) for i in range(200)]
    again = [c1.next_after_epoch(t + 37 * i) for i in range(200)]
    assert fresh == cached == again
