"""``ksched bench timing``: fire-time computation figures (issue 3).

(a) re-arm: N schedules sharing P distinct (expression, zone) pairs have just
    fired at the top of an hour; compute every schedule's next fire time.
    Each schedule holds its interned ``CompiledSpec``; the rule memoises
    ``next_epoch(instant)``, so each distinct (expression, zone, instant) is
    computed once and the rest are cache hits. Target >= 1,000,000 /s.
(b) distinct: E distinct expressions (cold caches), one ``next_after_epoch``
    per expression from random instants. Target >= 50,000 /s.
(c) compile: S specs (``ScheduleSpec`` already built) compiled with
    ``compile_spec``, drawn from D distinct expressions (identical ones share
    one compiled object). Target >= 20,000 /s. The all-distinct (cold) rate is
    printed too, for information.

Run: ``ksched bench timing`` or ``python -m scheduler.bench.timing``; sizes are
flags (``--schedules --pairs --expressions --specs --distinct-specs``) for
quick runs, ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

ZONES = (
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Europe/London",
    "America/Los_Angeles",
    "Australia/Lord_Howe",
)
BASE_EXPRESSIONS = (
    "0 * * * *",
    "*/15 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "0 0 1 * *",
    "5 4 * * SUN",
    "0 */6 * * *",
    "0 12 * JAN,JUL *",
    "45 23 * * 5",
    "0 0 * * *",
)


@dataclass
class Figure:
    name: str
    value: float
    target: float
    unit: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.value >= self.target


def _clear_caches() -> None:
    from scheduler.domain import compiled, cron, cron_rule

    compiled._compile.cache_clear()
    cron_rule.cron_rule.cache_clear()
    cron.parse_cron.cache_clear()
    cron._parse_field.cache_clear()


def _random_expression(rng: random.Random) -> str:
    minute = rng.choice([str(rng.randrange(60)), f"*/{rng.choice([5, 10, 15, 20, 30])}",
                         f"{rng.randrange(30)},{30 + rng.randrange(30)}"])
    hour = rng.choice(["*", str(rng.randrange(24)), f"{rng.randrange(12)}-{12 + rng.randrange(12)}",
                       f"*/{rng.choice([2, 3, 4, 6])}"])
    dom = rng.choice(["*", "*", "*", str(1 + rng.randrange(28)), "1,15"])
    month = rng.choice(["*", "*", "*", str(1 + rng.randrange(12)), "1-6"])
    dow = rng.choice(["*", "*", "1-5", str(rng.randrange(7)), "MON,WED,FRI"])
    return f"{minute} {hour} {dom} {month} {dow}"


def _distinct_expressions(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen[_random_expression(rng)] = None
    return list(seen)


def bench_rearm(schedules: int, pairs: int) -> Figure:
    from scheduler.domain import ScheduleSpec, compile_spec

    _clear_caches()
    pair_list = [(BASE_EXPRESSIONS[i % len(BASE_EXPRESSIONS)], ZONES[(i * 3) % len(ZONES)])
                 for i in range(pairs)]
    compiled = [
        compile_spec(ScheduleSpec(kind="cron", cron=e, timezone=z, handler="h"))
        for e, z in pair_list
    ]
    owners = [compiled[i % pairs] for i in range(schedules)]
    fired_at = 1_798_761_600  # 2027-01-01T00:00:00Z, the top of an hour
    gc.collect()
    t0 = time.perf_counter()
    nexts = [c.next_after_epoch(fired_at) for c in owners]
    elapsed = time.perf_counter() - t0
    assert len(nexts) == schedules and all(n is not None for n in nexts)
    rate = schedules / elapsed
    return Figure("rearm", rate, 1_000_000, "schedules/s",
                  f"{schedules} schedules, {pairs} (expr, zone) pairs, {elapsed * 1e3:.1f} ms")


def bench_distinct(expressions: int, seed: int = 7) -> Figure:
    from scheduler.domain.cron_rule import cron_rule

    _clear_caches()
    rng = random.Random(seed)
    exprs = _distinct_expressions(expressions, seed)
    rules = [cron_rule(e, rng.choice(ZONES), "skip", "once") for e in exprs]
    start = 1_767_225_600  # 2026-01-01
    instants = [start + rng.randrange(0, 3 * 365 * 86400) for _ in rules]
    gc.collect()
    t0 = time.perf_counter()
    for rule, s in zip(rules, instants, strict=True):
        rule.next_epoch(s)
    elapsed = time.perf_counter() - t0
    rate = expressions / elapsed
    return Figure("next_after_distinct", rate, 50_000, "calls/s",
                  f"{expressions} distinct expressions, cold caches, {elapsed * 1e3:.1f} ms")


def bench_compile(specs: int, distinct: int, seed: int = 11) -> tuple[Figure, Figure]:
    from scheduler.domain import ScheduleSpec, compile_spec

    exprs = _distinct_expressions(max(distinct, 1), seed)
    rng = random.Random(seed)
    zone_of = {e: rng.choice(ZONES) for e in exprs}
    spec_list = [
        ScheduleSpec(kind="cron", cron=e, timezone=zone_of[e], handler="h")
        for e in (exprs[i % len(exprs)] for i in range(specs))
    ]
    rng.shuffle(spec_list)
    _clear_caches()
    gc.collect()
    t0 = time.perf_counter()
    out = [compile_spec(s) for s in spec_list]
    elapsed = time.perf_counter() - t0
    shared = len({id(c) for c in out})
    rules = len({id(c.rule) for c in out})
    assert shared == len(exprs) and rules == len(exprs)
    mixed = Figure("compile", specs / elapsed, 20_000, "specs/s",
                   f"{specs} specs over {len(exprs)} distinct expressions -> {shared} compiled "
                   f"objects, {elapsed * 1e3:.1f} ms")
    cold_n = min(specs, 20_000)
    cold_exprs = _distinct_expressions(cold_n, seed + 1)
    cold_specs = [ScheduleSpec(kind="cron", cron=e, timezone=rng.choice(ZONES), handler="h")
                  for e in cold_exprs]
    _clear_caches()
    gc.collect()
    t0 = time.perf_counter()
    for s in cold_specs:
        compile_spec(s)
    cold_elapsed = time.perf_counter() - t0
    cold = Figure("compile_cold", cold_n / cold_elapsed, 20_000, "specs/s",
                  f"{cold_n} all-distinct specs (informational), {cold_elapsed * 1e3:.1f} ms")
    return mixed, cold


def run(args: argparse.Namespace) -> int:
    figures = [bench_rearm(args.schedules, args.pairs), bench_distinct(args.expressions)]
    figures.extend(bench_compile(args.specs, args.distinct_specs))
    _clear_caches()
    for f in figures:
        verdict = "PASS" if f.passed else "MISS"
        print(f"{f.name:22s} {f.value:>14,.0f} {f.unit:13s} target >= {f.target:>11,.0f}  "
              f"{verdict}  ({f.detail})")
    if args.json:
        payload: list[dict[str, Any]] = [dict(asdict(f), passed=f.passed) for f in figures]
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"bench": "timing", "python": sys.version.split()[0], "figures": payload},
                      fh, indent=2)
            fh.write("\n")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedules", type=int, default=500_000, help="(a) schedules to re-arm")
    p.add_argument("--pairs", type=int, default=10, help="(a) distinct (expression, zone) pairs")
    p.add_argument("--expressions", type=int, default=100_000, help="(b) distinct expressions")
    p.add_argument("--specs", type=int, default=100_000, help="(c) specs to compile")
    p.add_argument("--distinct-specs", type=int, default=1_000,
                   help="(c) distinct expressions among the specs")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "timing", help="fire-time computation: re-arm, distinct next_after, compile")
    add_arguments(p)
    p.set_defaults(handler=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scheduler.bench.timing")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
