"""``ksched bench queries``: what the history store's queries cost on a store of a given size.

Fills a store (``--dsn``; default a SQLite file in a temp folder; a PostgreSQL store is emptied
first) with 2 tenants × ``--schedules`` cron schedules × ``--per-schedule`` SUCCEEDED
occurrences through the store's own ``apply`` (no Kafka), runs ANALYZE on PostgreSQL (as
autovacuum would after a rebuild), then times each query the SDK, the CLI and the API use
``--runs`` times and prints the median and p95 in milliseconds (and writes ``--json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

T0_MS = 1_800_000_000_000
_MINUTE_MS = 60_000


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("queries", help="history store query latency (ms)")
    p.add_argument("--schedules", type=int, default=100, help="schedules per tenant (default 100)")
    p.add_argument("--per-schedule", type=int, default=2000, help="occurrences per schedule (default 2000)")
    p.add_argument("--runs", type=int, default=50, help="timed runs of each query (default 50)")
    p.add_argument("--dsn", default=None, help="the store (default: SQLite in a temp folder); it is emptied")
    p.add_argument("--json", dest="json_file", default="bench-out/queries.json")
    p.set_defaults(handler=_run)


def fill(store: Any, schedules: int, per_schedule: int) -> int:
    """Write the synthetic rows (one batch per schedule); returns the occurrences written."""
    from scheduler.domain.ids import occurrence_id
    from scheduler.history.mapping import Batch
    from scheduler.history.rows import ChangeRow, OccurrenceRow, VersionRow, rank

    n = 0
    for tenant in ("acme", "bravo"):
        for s in range(schedules):
            sid, rid = f"{tenant}-{s:06d}", f"r-{tenant}-{s}"
            spec = json.dumps({"kind": "cron", "cron": "* * * * *", "timezone": "UTC", "handler": f"h{s % 5}",
                               "payload": ""})
            b = Batch()
            b.versions[(sid, 1)] = VersionRow(sid, 1, tenant, "ACTIVE", T0_MS, "CREATE", rid, T0_MS, spec,
                                              T0_MS, None, None, None)
            b.changes[(sid, rid)] = ChangeRow(sid, rid, tenant, 1, "CREATE", "ACTIVE", T0_MS, T0_MS, T0_MS)
            for i in range(per_schedule):
                sf = T0_MS + i * _MINUTE_MS
                oid = occurrence_id(sid, 1, sf // 1000)
                b.occurrences[oid] = OccurrenceRow(oid, tenant, sid, 1, sf, sf, sf + 7, "SUCCEEDED",
                                                   rank("SUCCEEDED", 1), sf + 100, 1, None)
            n += per_schedule
            store.apply("bench", b, {("bench.dispatch.acme", 0): n})
    return n


def timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t) * 1000)
    xs.sort()
    p95 = xs[max(0, int(len(xs) * 0.95) - 1)]
    return {"median_ms": round(statistics.median(xs), 3), "p95_ms": round(p95, 3)}


def measure(store: Any, schedules: int, per_schedule: int, runs: int) -> dict[str, dict[str, float]]:
    """The timings of each query on a store :func:`fill` filled."""
    from scheduler.domain.ids import occurrence_id
    from scheduler.history.answers import encode_cursor

    sid = f"acme-{schedules // 2:06d}"
    end = T0_MS + per_schedule * _MINUTE_MS
    far = encode_cursor("occurrences", T0_MS + (per_schedule * 3 // 4) * _MINUTE_MS, "")
    oid = occurrence_id(sid, 1, (T0_MS + (per_schedule // 2) * _MINUTE_MS) // 1000)
    queries: dict[str, Callable[[], object]] = {
        "describe (schedule, versions, changes, last 10)": lambda: (
            store.schedule("acme", sid), store.versions("acme", sid), store.changes("acme", sid),
            store.last_occurrences("acme", sid, 10)),
        "occurrences: page of 100 of one schedule": lambda: store.occurrences(
            "acme", schedule_id=sid, from_ms=T0_MS, to_ms=end, limit=100),
        "occurrences: page of 100 of the tenant, state filter": lambda: store.occurrences(
            "acme", from_ms=T0_MS, to_ms=end, state="SUCCEEDED", limit=100),
        "occurrences: page of 100 of the tenant, 3/4 deep (cursor)": lambda: store.occurrences(
            "acme", from_ms=T0_MS, to_ms=end, limit=100, cursor=far),
        "list: page of 100 schedules, handler filter": lambda: store.schedules(
            "acme", handler="h3", limit=100),
        "occurrence get (with attempts)": lambda: store.occurrence("acme", oid),
    }
    return {name: timed(fn, runs) for name, fn in queries.items()}


def _analyze(dsn: str) -> None:
    """The statistics autovacuum would gather after a bulk load (the planner needs them)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _run(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.history import HistoryStoreError, open_store, sqlite_path

    if min(args.schedules, args.per_schedule, args.runs) < 1:
        raise UsageError("--schedules, --per-schedule and --runs must each be at least 1")
    with tempfile.TemporaryDirectory(prefix="ksched-bench-queries-") as tmp:
        try:
            store = open_store(args.dsn or "", Path(tmp) / "history.db")
        except (HistoryStoreError, ValueError) as exc:
            raise UsageError(f"--dsn {args.dsn!r}: {exc}") from None
        with store:
            store.reset()
            t = time.monotonic()
            n = fill(store, args.schedules, args.per_schedule)
            print(f"queries: {n:,} occurrences of {2 * args.schedules} schedules written in "
                  f"{time.monotonic() - t:.1f} s into {store!r}")
            if args.dsn and sqlite_path(args.dsn, Path(tmp)) is None:
                _analyze(args.dsn)
            result = measure(store, args.schedules, args.per_schedule, args.runs)
    for name, r in result.items():
        print(f"  {name}: median {r['median_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms ({args.runs} runs)")
    out = Path(args.json_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"occurrences": n, "schedules": 2 * args.schedules, "runs": args.runs,
                               "store": args.dsn or "sqlite (temp)", "queries": result}, indent=2))
    return 0
