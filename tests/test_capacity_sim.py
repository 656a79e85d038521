"""The capacity simulation's demand curve against the brute-force time oracle (tests/test_time_oracle).

The oracle walks every UTC minute of the day with ``zoneinfo``; it never calls the domain. The
curve must hold exactly the oracle's strict fires at their second, and as many flexible ones.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from zoneinfo import ZoneInfo

from scheduler.bench.capacity import DAY_S, required_rate, simulate, summarise
from scheduler.bench.population import MIX, sample
from tests.test_time_oracle import Fields, oracle

DAY = int(dt.datetime(2027, 1, 13, tzinfo=dt.UTC).timestamp())


def _field(text: str, full: range) -> frozenset[int]:
    if text == "*":
        return frozenset(full)
    if text.startswith("*/"):
        return frozenset(v for v in full if (v - full.start) % int(text[2:]) == 0)
    return frozenset({int(text)})


@functools.cache
def _cron_fires(expr: str, zone: str) -> tuple[int, ...]:
    m, h, dom, mon, dow = expr.split()
    f = Fields(_field(m, range(60)), _field(h, range(24)),
               None if dom == "*" else _field(dom, range(1, 32)), _field(mon, range(1, 13)),
               None if dow == "*" else _field(dow, range(7)))
    return tuple(oracle(f, zone, DAY - 1, DAY_S - 1, "skip", "once"))


def _once_fires(at: str, zone: str) -> tuple[int, ...]:
    instant = int(dt.datetime.fromisoformat(at).replace(tzinfo=ZoneInfo(zone)).timestamp())
    return (instant,) if DAY <= instant < DAY + DAY_S else ()


def test_capacity_curve_totals_match_the_oracle() -> None:
    members = sample(400, seed=3, day_start=DAY)
    assert {m.group for m in members} == {g[0] for g in MIX}
    curve = simulate(members, DAY)
    strict: Counter[int] = Counter()
    flexible = 0
    by_group: Counter[str] = Counter()
    for m in members:
        fires = _cron_fires(m.expr, m.zone) if m.expr else _once_fires(m.at or "", m.zone)
        by_group[m.group] += len(fires)
        if m.window_s:
            flexible += len(fires)
        else:
            strict.update(f - DAY for f in fires)
    assert curve.rejected == 0
    assert {i: v for i, v in enumerate(curve.strict) if v} == dict(strict)
    assert sum(curve.flexible) == flexible > 0
    assert curve.total == sum(by_group.values())
    assert +curve.fires_by_group == +by_group


def test_capacity_summary_scales_and_rates() -> None:
    members = sample(50, seed=5, day_start=DAY)
    curve = simulate(members, DAY)
    out = summarise(curve, 1000.0, 5.0)
    assert out["occurrences_per_day"] == curve.total * 1000
    assert out["peak_strict_per_s"] == max(curve.strict) * 1000
    # One burst of B in one second needs B / SLO; a steady rate r needs about r.
    assert required_rate([0, 0, 500, 0, 0], 5.0)[:2] == (100.0, 1)
    rate, _, _ = required_rate([10] * 4000, 5.0)
    assert 10 * 3600 / 3604 <= rate < 10
