"""``ksched bench capacity``: the per-second dispatch demand of a 20 M-schedule population over a day.

A sample of ``--schedules`` members of the mix in :mod:`scheduler.bench.population`
is compiled by the domain (:func:`scheduler.domain.compiled.compile_timing`, the
same interned rules the processor uses); each member's fire instants in the day
come from ``CompiledSpec.between_epoch`` and its dispatch instants from
:func:`scheduler.domain.fire.available_at` (deterministic jitter of flexible
schedules). Nothing re-implements the time rules here.

Counts are scaled by ``population / schedules`` (a 200,000 sample stands for
20 M: each sampled schedule represents 100). Scaling keeps the shape and the
total of the curve; the variance of a single second's count grows as the sample
shrinks, so the peaks of small samples are noisier than the real ones would be.

Outputs: the peak second, the top-of-hour seconds, the strict and flexible
curves, and the dispatch rate a cluster needs so that every strict occurrence is
dispatched within the SLO (``required_rate_per_s``, see :func:`required_rate`),
as JSON and a PNG. docs/capacity.md uses these figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.bench.population import FLEX_WINDOWS_S, Member, sample

DAY_S = 86_400
SPILL_S = max(FLEX_WINDOWS_S)  # a flexible occurrence of the day's last second is due this much later
WINDOWS_S = (1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)


@dataclass
class Curve:
    """Per-second dispatch demand of the sample (unscaled), indexed from the day's start.

    ``strict[i]`` / ``flexible[i]``: occurrences whose ``available_at`` is ``day_start + i``;
    the arrays run ``SPILL_S`` seconds past the day so that every occurrence scheduled in the
    day is counted once. ``fires_by_group``: occurrences per mix entry.
    """

    day_start: int
    strict: list[int]
    flexible: list[int]
    fires_by_group: Counter[str] = field(default_factory=Counter)
    top_of_hour_by_group: dict[str, Counter[int]] = field(default_factory=dict)
    rejected: int = 0

    @property
    def total(self) -> int:
        return sum(self.strict) + sum(self.flexible)


def simulate(members: list[Member], day_start: int) -> Curve:
    """Every member's occurrences with ``day_start <= scheduled_for < day_start + DAY_S``."""
    from scheduler.domain import SpecError, available_at
    from scheduler.domain.compiled import compile_timing

    size = DAY_S + SPILL_S
    curve = Curve(day_start, [0] * size, [0] * size)
    strict, flexible, groups = curve.strict, curve.flexible, curve.fires_by_group
    lo, hi = day_start - 1, day_start + DAY_S - 1  # between_epoch is (lo, hi]
    for m in members:
        try:
            c = compile_timing(kind=m.kind, timezone=m.zone, cron=m.expr, at=m.at)
        except SpecError:  # a one-time local time in a DST gap: the API rejects it too
            curve.rejected += 1
            continue
        fires = c.between_epoch(lo, hi)
        groups[m.group] += len(fires)
        if not m.window_s:
            tops = curve.top_of_hour_by_group.setdefault(m.group, Counter())
            for f in fires:
                strict[f - day_start] += 1
                if not (f - day_start) % 3600:
                    tops[(f - day_start) // 3600] += 1
            continue
        for f in fires:
            flexible[available_at(c, m.schedule_id, 1, f, m.window_s) - day_start] += 1
    return curve


def required_rate(demand: list[int], slo_s: float) -> tuple[float, int, int]:
    """(rate, window, start): the smallest dispatch rate that clears every occurrence within
    ``slo_s`` of its ``available_at``, over the windows in :data:`WINDOWS_S`.

    Occurrences due in ``[a, a + L)`` can start no earlier than ``a`` and must all be out by
    ``a + L - 1 + slo_s``, so a rate below ``A / (L - 1 + slo_s)`` misses some of them; the
    answer is the largest such bound (a lower bound on the true requirement, exact for a burst
    of one second, ``L = 1``: ``burst / slo_s``)."""
    prefix = [0]
    for d in demand:
        prefix.append(prefix[-1] + d)
    best = (0.0, 1, 0)
    for w in WINDOWS_S:
        span = w - 1 + slo_s
        for a in range(0, len(demand) - w + 1):
            r = (prefix[a + w] - prefix[a]) / span
            if r > best[0]:
                best = (r, w, a)
    return best


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarise(curve: Curve, scale: float, slo_s: float) -> dict[str, Any]:
    """The figures (scaled to the population) docs/capacity.md reads."""
    both = [s + f for s, f in zip(curve.strict, curve.flexible, strict=True)]
    peak_i = max(range(len(both)), key=both.__getitem__)
    strict_peak_i = max(range(len(curve.strict)), key=curve.strict.__getitem__)
    tops = sorted(((curve.strict[h * 3600], h) for h in range(24)), reverse=True)
    rate, window, start = required_rate(curve.strict, slo_s)
    rate_all, window_all, start_all = required_rate(both, slo_s)
    return {
        "day": _iso(curve.day_start),
        "occurrences_per_day": round(curve.total * scale),
        "mean_per_s": curve.total * scale / DAY_S,
        "strict_share": sum(curve.strict) / max(1, curve.total),
        "peak_second": _iso(curve.day_start + peak_i),
        "peak_per_s": round(both[peak_i] * scale),
        "peak_strict_second": _iso(curve.day_start + strict_peak_i),
        "peak_strict_per_s": round(curve.strict[strict_peak_i] * scale),
        "top_of_hour_strict": {f"{h:02d}:00:00Z": round(v * scale) for v, h in tops[:6]},
        "top_of_hour_strict_median": round(sorted(v for v, _ in tops)[12] * scale),
        "peak_top_of_hour_by_group": {
            g: round(c[tops[0][1]] * scale)
            for g, c in sorted(curve.top_of_hour_by_group.items(), key=lambda gc: -gc[1][tops[0][1]])
            if c[tops[0][1]]
        },
        "busiest_minute_per_min": round(max(sum(both[i:i + 60]) for i in range(0, DAY_S, 60)) * scale),
        "required_rate_strict_per_s": rate * scale,
        "required_rate_strict_window": f"{window} s from {_iso(curve.day_start + start)}",
        "required_rate_all_per_s": rate_all * scale,
        "required_rate_all_window": f"{window_all} s from {_iso(curve.day_start + start_all)}",
        "slo_s": slo_s,
        "occurrences_by_group": {g: round(n * scale) for g, n in curve.fires_by_group.most_common()},
        "rejected_members": curve.rejected,
    }


def plot(curve: Curve, scale: float, path: Path) -> None:
    """Three panels: occurrences per minute over the day, every non-zero second (log scale), and
    the seconds around the peak."""
    from scheduler.bench.common import pyplot

    plt = pyplot()
    if plt is None:
        return
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(12, 10))
    minutes = len(curve.strict) // 60
    for arr, label in ((curve.strict, "strict"), (curve.flexible, "flexible")):
        a.plot([i / 60 for i in range(minutes)],
               [sum(arr[i * 60:(i + 1) * 60]) * scale for i in range(minutes)], lw=0.6, label=label)
    a.set_yscale("log")
    a.set_ylabel("occurrences due per minute")
    a.set_title(f"dispatch demand of {_iso(curve.day_start)[:10]} (UTC), scaled to the population")
    a.legend(loc="upper right")
    for arr, label, mark in ((curve.strict, "strict", "."), (curve.flexible, "flexible", "s")):
        nz = [(i / 3600, v * scale) for i, v in enumerate(arr) if v]
        b.scatter([x for x, _ in nz], [y for _, y in nz], s=2, marker=mark, label=label)
    b.set_yscale("log")
    b.set_ylabel("occurrences due in one second")
    b.set_xlabel("hours after midnight UTC (both panels above)")
    b.legend(loc="upper right")
    both = [s + f for s, f in zip(curve.strict, curve.flexible, strict=True)]
    peak = max(range(DAY_S), key=both.__getitem__)
    lo, hi = max(0, peak - 90), min(len(both), peak + 90)
    strict_pts = [(i - peak, curve.strict[i] * scale) for i in range(lo, hi) if curve.strict[i]]
    flex_pts = [(i - peak, curve.flexible[i] * scale) for i in range(lo, hi) if curve.flexible[i]]
    c.bar([x for x, _ in strict_pts], [y for _, y in strict_pts], width=0.8, label="strict")
    c.scatter([x for x, _ in flex_pts], [y for _, y in flex_pts], s=6, color="tab:orange", label="flexible")
    c.set_xlim(lo - peak - 1, hi - peak)
    c.set_yscale("log")
    c.set_xlabel(f"seconds around the peak second {_iso(curve.day_start + peak)}")
    c.set_ylabel("occurrences due in one second")
    c.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


def _run(args: argparse.Namespace) -> int:
    from scheduler.bench.common import report

    day = dt.datetime.strptime(args.day, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    day_start = int(day.timestamp())
    t0 = time.process_time()
    members = sample(args.schedules, args.seed, day_start)
    curve = simulate(members, day_start)
    cpu_s = time.process_time() - t0
    scale = args.population / args.schedules
    out: dict[str, Any] = {
        "population": args.population,
        "sampled_schedules": args.schedules,
        "scale": scale,
        "sampled_occurrences": curve.total,
        **summarise(curve, scale, args.slo),
        "cpu_s": cpu_s,
    }
    path = report(out, args.json_file)
    plot(curve, scale, Path(args.png) if args.png else path.with_suffix(".png"))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedules", type=int, default=200_000, help="sampled schedules (200,000)")
    p.add_argument("--population", type=int, default=20_000_000, help="schedules they stand for")
    p.add_argument("--day", default="2027-01-13", help="UTC day simulated, YYYY-MM-DD (a Wednesday)")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--slo", type=float, default=5.0, help="seconds from available_at to dispatch")
    p.add_argument("--json", dest="json_file", default="bench-out/capacity.json")
    p.add_argument("--png", default=None, help="plot file (default: next to the JSON)")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "capacity", help="simulate a day of a 20 M-schedule population: per-second demand and peaks")
    add_arguments(p)
    p.set_defaults(handler=_run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scheduler.bench.capacity")
    add_arguments(p)
    return _run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
