"""Fire times against an independent brute-force oracle.

The oracle never looks at the implementation: it gets the cron fields as Python
sets (the expression text is rendered *from* them), walks every UTC minute of a
window, converts each to local wall-clock time with ``zoneinfo`` and applies
the contract literally:

* a matching local minute fires at its instant, except the second instant of a
  repeated wall-clock time under ``repeated="once"`` (``fold == 1``);
* under ``nonexistent="shift"``, when the wall clock jumps forward between two
  consecutive UTC minutes and a skipped local minute matches, the instant the
  jump lands on fires (once).

Windows are placed around real transitions of zones chosen for their quirks.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.domain.compiled import CompiledSpec, compile_timing

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
UTC = dt.UTC
ZONE_YEARS: dict[str, tuple[int, ...]] = {
    "America/New_York": (2026, 2101),
    "Europe/Berlin": (2026, 2150),
    "Australia/Lord_Howe": (2026,),  # 30-minute DST shift
    "Australia/Sydney": (2026,),  # southern hemisphere
    "America/Santiago": (2026,),  # southern, transitions at 24:00 local
    "Pacific/Apia": (2011,),  # skipped 2011-12-30 entirely
    "America/Havana": (2026,),  # transitions at midnight
    "Asia/Beirut": (2026,),  # transitions at midnight
    "America/Sao_Paulo": (2018, 2019, 2026),  # DST abolished in 2019
    "Europe/Moscow": (2011, 2014, 2026),  # permanent +4 in 2011, back to +3 in 2014
    "Pacific/Chatham": (2026,),  # +12:45 / +13:45
}


@functools.cache
def transitions(zone_name: str, year: int) -> tuple[int, ...]:
    """UTC epoch seconds at which the zone's offset changes during ``year``."""
    z = ZoneInfo(zone_name)
    start = int(dt.datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(dt.datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())

    def off(s: int) -> dt.timedelta | None:
        return dt.datetime.fromtimestamp(s, z).utcoffset()

    out = []
    step = 900
    for s in range(start, end, step):
        if off(s) != off(s + step):
            lo, hi = s, s + step
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if off(mid) == off(s):
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
    return tuple(out)


@dataclass(frozen=True)
class Fields:
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int] | None  # None = "*"
    months: frozenset[int]
    dows: frozenset[int] | None  # None = "*"; 0 = Sunday

    def text(self) -> str:
        def render(values: frozenset[int] | None, full: range) -> str:
            if values is None or values == frozenset(full):
                return "*"
            return ",".join(str(v) for v in sorted(values))

        dow_text = "*" if self.dows is None else ",".join(
            # render Sunday as 7 sometimes: 7 = Sunday is part of the contract
            str(7 if v == 0 and len(self.dows) % 2 else v) for v in sorted(self.dows)
        )
        return " ".join(
            [
                render(self.minutes, range(60)),
                render(self.hours, range(24)),
                "*" if self.doms is None else ",".join(str(v) for v in sorted(self.doms)),
                render(self.months, range(1, 13)),
                dow_text,
            ]
        )

    def matches(self, t: dt.datetime) -> bool:
        if t.minute not in self.minutes or t.hour not in self.hours or t.month not in self.months:
            return False
        dom_ok = self.doms is None or t.day in self.doms
        cron_dow = (t.weekday() + 1) % 7
        dow_ok = self.dows is None or cron_dow in self.dows
        if self.doms is None or self.dows is None:
            return dom_ok and dow_ok
        return dom_ok or dow_ok


def oracle(f: Fields, zone: str, t: int, horizon: int, nonexistent: str, repeated: str) -> list[int]:
    z = ZoneInfo(zone)
    out = []
    u = (t // 60 + 1) * 60
    one = dt.timedelta(minutes=1)
    prev = dt.datetime.fromtimestamp(u - 60, z).replace(tzinfo=None)
    while u <= t + horizon:
        aware = dt.datetime.fromtimestamp(u, z)
        local = aware.replace(tzinfo=None)
        fires = f.matches(local) and (aware.fold == 0 or repeated == "all")
        if not fires and nonexistent == "shift" and local - prev > one:
            m = prev + one
            while m < local:
                if f.matches(m):
                    fires = True
                    break
                m += one
        if fires:
            out.append(u)
        prev = local
        u += 60
    return out


def sets(lo: int, hi: int, max_size: int) -> st.SearchStrategy[frozenset[int]]:
    return st.frozensets(st.integers(lo, hi), min_size=1, max_size=max_size)


@st.composite
def fields(draw: st.DrawFn) -> Fields:
    minutes = draw(st.one_of(sets(0, 59, 4), st.just(frozenset(range(0, 60, 15))),
                             st.just(frozenset(range(60)))))
    # bias hours towards where transitions happen (around midnight and 01:00-03:00)
    hours = draw(st.one_of(st.just(frozenset(range(24))), sets(0, 4, 3), sets(0, 23, 5),
                           st.just(frozenset({23, 0, 1}))))
    # day fields are mostly "*" so that the transition day itself usually matches
    doms = draw(st.one_of(st.none(), st.none(), st.none(), sets(1, 31, 6)))
    months = draw(st.one_of(st.just(frozenset(range(1, 13))), st.just(frozenset(range(1, 13))),
                            sets(1, 12, 6)))
    dows = draw(st.one_of(st.none(), st.none(), st.none(), sets(0, 6, 3)))
    if doms is not None and dows is None and not any(
        d <= (29 if m == 2 else 30 if m in (4, 6, 9, 11) else 31) for d in doms for m in months
    ):
        doms = None  # "can never fire" is rejected; tested elsewhere
    return Fields(minutes, hours, doms, months, dows)


@st.composite
def window(draw: st.DrawFn) -> tuple[str, int]:
    zone = draw(st.sampled_from(sorted(ZONE_YEARS)))
    year = draw(st.sampled_from(ZONE_YEARS[zone]))
    trans = transitions(zone, year)
    if trans:
        base = draw(st.sampled_from(trans))
        t = base + draw(st.one_of(st.integers(-30 * 3600, -3600), st.integers(-3600, 3 * 3600)))
    else:
        start = int(dt.datetime(year, 1, 1, tzinfo=UTC).timestamp())
        t = start + draw(st.integers(0, 364 * 86400))
    return zone, t


HORIZON = 36 * 3600
OPTIONS = st.tuples(st.sampled_from(["skip", "shift"]), st.sampled_from(["once", "all"]))


def _check(f: Fields, zone: str, t: int, nonexistent: str, repeated: str) -> None:
    c = compile_timing(kind="cron", cron=f.text(), timezone=zone,
                       nonexistent=nonexistent, repeated=repeated)  # type: ignore[arg-type]
    expected = oracle(f, zone, t, HORIZON, nonexistent, repeated)
    got = c.between_epoch(t, t + HORIZON)
    assert got == expected, (f.text(), zone, t, nonexistent, repeated)
    nxt = c.next_after_epoch(t)
    if expected:
        assert nxt == expected[0]
    else:
        assert nxt is None or nxt > t + HORIZON
    assert_fire_times_as(c, expected, expected, t, t + HORIZON)


def assert_fire_times_as(c: CompiledSpec, fires: list[int], near: list[int], t1: int, t2: int) -> None:
    """``c.is_fire_time`` (which remembers the last instant it confirmed) answers as ``fires``
    (every fire instant in ``(t1, t2]``) says, for each instant of ``near`` and the seconds
    around it, each asked twice in a row and in turns."""
    fire = set(fires)
    asked = (e + d for e in near[:40] for d in (0, 0, -60, -60, 1, 1, 0, -1))
    for s in (x for x in asked if t1 < x <= t2):
        assert c.is_fire_time(s) == (s in fire), (c, s)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    w=window(),
    expr=st.sampled_from(["*/15 * * * *", "0 * * * *", "30 2 * * *"]),
    start=st.integers(0, 30 * 3600),
    length=st.integers(0, 30 * 3600),
    max_runs=st.one_of(st.none(), st.integers(1, 5)),
)
def test_time_is_fire_time_within_bounds_and_runs(
    w: tuple[str, int], expr: str, start: int, length: int, max_runs: int | None
) -> None:
    """Start and end bounds and a run limit: only the runs they keep are fire times. Oracle: the
    unbounded spec's fire times (checked above against the local walk), cut by the bounds here."""
    zone, t = w
    lo = t + 1 + start  # after t: the oracle's fire times are those after t
    hi = lo + length
    free = compile_timing(kind="cron", cron=expr, timezone=zone).between_epoch(t, t + HORIZON)
    kept = [f for f in free if lo <= f <= hi][:max_runs]
    c = compile_timing(kind="cron", cron=expr, timezone=zone, start=dt.datetime.fromtimestamp(lo, UTC),
                       end=dt.datetime.fromtimestamp(hi, UTC), max_runs=max_runs)
    assert_fire_times_as(c, kept, free, t, t + HORIZON)  # the runs cut off are asked too
    for f in free:
        assert c.is_fire_time(f) == (f in kept), (expr, zone, lo, hi, max_runs, f)


def test_time_is_fire_time_of_a_one_time_spec() -> None:
    at = int(dt.datetime(2026, 6, 1, 12, tzinfo=ZoneInfo("Europe/Paris")).timestamp())
    c = compile_timing(kind="once", at="2026-06-01T12:00:00", timezone="Europe/Paris")
    for s, fire in ((at, True), (at, True), (at + 1, False), (at + 1, False), (at - 1, False), (at, True)):
        assert c.is_fire_time(s) is fire


@SETTINGS
@given(f=fields(), w=window(), opts=OPTIONS)
def test_time_fire_times_match_oracle_around_transitions(
    f: Fields, w: tuple[str, int], opts: tuple[str, str]
) -> None:
    _check(f, w[0], w[1], *opts)


DENSE = Fields(frozenset(range(60)), frozenset(range(24)), None, frozenset(range(1, 13)), None)
QUARTER = Fields(frozenset({0, 15, 30, 45}), frozenset(range(24)), None,
                 frozenset(range(1, 13)), None)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(w=window(), opts=OPTIONS, f=st.sampled_from([DENSE, QUARTER]))
def test_time_dense_expressions_match_oracle(
    w: tuple[str, int], opts: tuple[str, str], f: Fields
) -> None:
    """Every minute / every quarter hour: every gap and fold minute is exercised."""
    _check(f, w[0], w[1], *opts)


def test_time_every_listed_zone_year_has_expected_transition_counts() -> None:
    assert transitions("Pacific/Apia", 2011)  # the dateline jump is found
    assert transitions("America/Sao_Paulo", 2026) == ()  # abolished DST
    assert len(transitions("Europe/Moscow", 2014)) == 1  # one fold, no DST after
    assert len(transitions("America/New_York", 2101)) == 2  # far future from the POSIX rule


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    zone=st.sampled_from(sorted(ZONE_YEARS)),
    t=st.integers(int(dt.datetime(2000, 1, 1, tzinfo=UTC).timestamp()),
                  int(dt.datetime(2400, 1, 1, tzinfo=UTC).timestamp())),
    expr=st.sampled_from(["0 0 1 * *", "30 12 29 2 *", "15 9 * * 1", "0 0 1 1 *", "0 3 13 * 5"]),
)
def test_time_sparse_expressions_next_matches_local_walk(zone: str, t: int, expr: str) -> None:
    """Sparse expressions over 400 years: the next fire is the first matching local day.

    Oracle: walk local *days* from local(t) and pick the first day/time that
    matches and exists after ``t`` (none of these times fall in a DST gap of
    these zones, so the plain conversion applies).
    """
    z = ZoneInfo(zone)
    minute, hour, dom, month, dow = expr.split()
    c = compile_timing(kind="cron", cron=expr, timezone=zone)
    got = c.next_after_epoch(t)
    day = dt.datetime.fromtimestamp(t, z).date()
    while True:
        ok_dom = dom == "*" or day.day == int(dom)
        ok_dow = dow == "*" or (day.weekday() + 1) % 7 == int(dow)
        ok_month = month == "*" or day.month == int(month)
        ok_day = (ok_dom or ok_dow) if dom != "*" and dow != "*" else (ok_dom and ok_dow)
        if ok_month and ok_day:
            local = dt.datetime.combine(day, dt.time(int(hour), int(minute)), tzinfo=z)
            s = int(local.timestamp())
            if s > t and dt.datetime.fromtimestamp(s, z).replace(tzinfo=None) == local.replace(
                tzinfo=None
            ):
                break
        day += dt.timedelta(days=1)
    assert got == s, (expr, zone, t)
