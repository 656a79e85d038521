"""``ksched bench restore``: how long a processor takes to restore N schedules after a restart.

Writes N ``Schedule`` records straight to ``ksched.schedules`` of a fresh
namespace (what N accepted creates leave there; restore reads only that topic
and ``ksched.state``, however the records got there), then starts a processor
that owns every shard and reads its restore time and memory. Specs are drawn
from ``--distinct`` cron expressions with a per-schedule payload, so the
restore path cannot lean on every record being identical.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import uuid
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("restore", help="restore time of N schedules after a restart")
    p.add_argument("--schedules", type=int, default=1_000_000)
    p.add_argument("--distinct", type=int, default=1000, help="distinct cron expressions")
    p.add_argument("--json", dest="json_file", default="bench-out/restore.json")
    p.add_argument("--metrics-port", type=int, default=9472)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from scheduler.bench.common import (
        bench_namespace,
        cpu_seconds,
        main_thread_cpu_seconds,
        report,
        rss,
        start_processor,
        wait_restored,
    )
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.clients import produce_waiting, producer
    from scheduler.records import Schedule, ScheduleSpecRecord, encode
    from scheduler.subprocesses import stop_all
    from scheduler.tenants import Tenant
    from scheduler.topology import topic_name

    n = args.schedules
    space = bench_namespace([Tenant(name="t0", trigger_rate_per_s=0, max_schedules=10 * n)])
    env, settings = space.env, space.settings
    topic = topic_name(settings, "schedules")
    specs = [
        ScheduleSpecRecord.from_domain(
            ScheduleSpec(kind="cron", cron=f"{i % 60} {(i // 60) % 24} * * *", timezone="UTC", handler="noop")
        )
        for i in range(max(1, args.distinct))
    ]
    now_ms = int(time.time() * 1000)
    prod = producer(settings.kafka())
    t0 = time.perf_counter()
    for i in range(n):
        sid = uuid.uuid4().hex
        spec = specs[i % len(specs)]
        value = encode(
            Schedule(
                tenant="t0",
                schedule_id=sid,
                version=1,
                state="ACTIVE",
                spec=dataclasses.replace(spec, payload=sid[:16].encode()),
                created_at_ms=now_ms,
                updated_at_ms=now_ms,
                effective_from_ms=now_ms,
                idempotency_key=None,
            )
        )
        produce_waiting(prod, topic, value, sid.encode())
    prod.flush(300)
    print(f"wrote {n:,} schedule records in {time.perf_counter() - t0:.1f}s")

    proc = start_processor(env, args.metrics_port)
    try:
        started = time.monotonic()
        restore_s = wait_restored(args.metrics_port, settings.partitions, 900)
        wall_s = time.monotonic() - started
        resident = rss(proc.pid)
        cpu_s = cpu_seconds([proc.pid])  # start-up (imports, joining) included: an upper bound
        main_cpu_s = main_thread_cpu_seconds(proc.pid)
    finally:
        stop_all([proc], 60)
    out = {
        "schedules": n,
        "distinct_specs": args.distinct,
        "restore_s": restore_s,
        "restore_schedules_per_s": n / restore_s if restore_s else None,
        "start_to_restored_s": wall_s,
        "rss_bytes_per_schedule": resident / n,
        "processor_cpu_s_to_restored": cpu_s,
        "cpu_s_per_million": cpu_s * 1_000_000 / n,
        "processor_main_thread_cpu_s": main_cpu_s,  # the Python thread: the wall time's floor
    }
    report(out, args.json_file)
    space.close()
    return 0 if restore_s is not None else 1
