"""``ksched bench workers``: occurrences end to end through a processor and workers, one killed midway.

In a fresh namespace: N schedules all due at one instant; two worker processes
run a no-op handler that records its effect with the SQLite idempotency store;
when half the occurrences have succeeded one worker is killed (SIGKILL) and a
new one started. It then counts, from the effects database, the distinct
occurrences that succeeded and any effect recorded twice, and, from the
SUCCEEDED attempt reports, the end-to-end time from ``scheduled_for``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from typing import Any

NOOP_HANDLERS = """
import os
from scheduler.idempotency import SQLiteStore
from scheduler.worker import Handlers

handlers = Handlers()
store = SQLiteStore(os.environ["KSCHED_BENCH_DB"])

@handlers.register("noop")
def noop(ctx):
    store.run_once(ctx.occurrence_id, lambda conn: conn.execute(
        "INSERT INTO bench_effects VALUES (?)", (ctx.occurrence_id,)))
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "workers", help="occurrences end to end, a worker killed midway"
    )
    p.add_argument("--occurrences", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=16, help="handlers per worker process")
    p.add_argument("--json", dest="json_file", default="bench-out/workers.json")
    p.set_defaults(handler=_run)


def _worker(env: dict[str, str], concurrency: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "scheduler",
        "worker",
        "--tenant",
        "bw",
        "--handlers",
        "bench_noop_handlers",
        "--concurrency",
        str(concurrency),
        "--no-metrics",
        "--log-level",
        "WARNING",
    ]
    return subprocess.Popen(cmd, env=env)


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    from scheduler.bench.common import bench_namespace, report, start_processor
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.clients import consumer, producer
    from scheduler.records import (
        AttemptReport,
        ScheduleCommand,
        ScheduleSpecRecord,
        decode,
        encode,
        record_type,
    )
    from scheduler.subprocesses import stop_all
    from scheduler.tenants import Tenant
    from scheduler.topology import topic_name

    n = args.occurrences
    space = bench_namespace([Tenant(name="bw", trigger_rate_per_s=0, max_schedules=10 * n, max_running=64)])
    tmp, settings = space.folder, space.settings
    (tmp / "bench_noop_handlers.py").write_text(NOOP_HANDLERS)
    db = tmp / "effects.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE bench_effects (occurrence_id TEXT)")
    env = {
        **space.env,
        "KSCHED_BENCH_DB": str(db),
        "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    reports = consumer(settings.kafka())
    t_commands = topic_name(settings, "commands", "bw")
    reports.assign([TopicPartition(t_commands, p, 0) for p in range(settings.partitions)])
    proc = start_processor(env, 9473)
    workers = [_worker(env, args.concurrency), _worker(env, args.concurrency)]
    killed = False
    e2e: dict[str, float] = {}
    try:
        time.sleep(3)
        due = int(time.time()) + 15 + n // 5000
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(due))
        spec = ScheduleSpecRecord.from_domain(
            ScheduleSpec(kind="once", at=at, timezone="UTC", handler="noop")
        )
        cmds = producer(settings.kafka())
        for _ in range(n):
            sid = uuid.uuid4().hex
            cmd = ScheduleCommand(
                request_id=sid,
                tenant="bw",
                schedule_id=sid,
                kind="CREATE",
                spec=spec,
                issued_at_ms=int(time.time() * 1000),
            )
            cmds.produce(t_commands, encode(cmd), sid.encode())
            cmds.poll(0)
        cmds.flush(60)
        print(f"{n:,} one-time schedules due at {at}Z")
        deadline = time.monotonic() + max(120.0, due - time.time() + n / 100)
        while len(e2e) < n and time.monotonic() < deadline:
            for m in reports.consume(5000, 0.5):
                value = m.value() or b""
                if m.error() is not None or record_type(value) is not AttemptReport:
                    continue
                r = decode(value, AttemptReport)
                if r.kind == "SUCCEEDED":
                    e2e.setdefault(r.occurrence_id, (r.reported_at_ms - r.scheduled_for_ms) / 1000)
            if not killed and len(e2e) >= n // 2:
                workers[0].send_signal(signal.SIGKILL)
                workers[0].wait()
                workers[0] = _worker(env, args.concurrency)
                killed = True
                print(f"killed a worker at {len(e2e):,} succeeded; started another")
    finally:
        stop_all([*workers, proc])
        reports.close()
    with sqlite3.connect(db) as conn:
        rows, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT occurrence_id) FROM bench_effects"
        ).fetchone()
    lags = sorted(e2e.values())
    span = max(lags) - min(lags) if lags else 0.0
    out = {
        "occurrences": n,
        "succeeded": distinct,
        "succeeded_reports": len(e2e),
        "duplicate_effects": rows - distinct,
        "rate_per_s": len(e2e) / span if span > 0 else None,
        "e2e_p50_s": lags[len(lags) // 2] if lags else None,
        "e2e_p99_s": lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else None,
        "e2e_max_s": lags[-1] if lags else None,
        "worker_killed_midway": killed,
        "workers": 2,
        "concurrency_per_worker": args.concurrency,
    }
    report(out, args.json_file)
    space.close()
    ok = out["duplicate_effects"] == 0 and distinct == n
    return 0 if ok else 1
