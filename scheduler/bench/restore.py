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
import json
import os
import secrets
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("restore", help="restore time of N schedules after a restart")
    p.add_argument("--schedules", type=int, default=1_000_000)
    p.add_argument("--distinct", type=int, default=1000, help="distinct cron expressions")
    p.add_argument("--json", dest="json_file", default="bench-out/restore.json")
    p.add_argument("--metrics-port", type=int, default=9472)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from scheduler.bench.burst import _rss, _start_processor, wait_restored
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.admin import admin_client, apply_topics
    from scheduler.kafka.clients import producer
    from scheduler.records import Schedule, ScheduleSpecRecord, encode
    from scheduler.settings import load_settings
    from scheduler.tenants import Tenant, add_tenant, load_tenants
    from scheduler.topology import desired_topics, topic_name

    n = args.schedules
    ns = f"bench-{secrets.token_hex(3)}"
    tmp = Path(tempfile.mkdtemp(prefix="ksched-bench-"))
    tenants_file = tmp / "tenants.toml"
    env = {**os.environ, "KSCHED_NAMESPACE": ns, "KSCHED_TENANTS_FILE": str(tenants_file)}
    settings = load_settings(env=env)
    add_tenant(tenants_file, Tenant(name="t0", trigger_rate_per_s=0, max_schedules=10 * n))
    admin: AdminClient = admin_client(settings.bootstrap_servers)
    apply_topics(admin, desired_topics(settings, load_tenants(tenants_file)))
    topic = topic_name(settings, "schedules")
    specs = [
        ScheduleSpecRecord.from_domain(
            ScheduleSpec(kind="cron", cron=f"{i % 60} {(i // 60) % 24} * * *", timezone="UTC", handler="noop")
        )
        for i in range(max(1, args.distinct))
    ]
    now_ms = int(time.time() * 1000)
    prod = producer(settings.bootstrap_servers)
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
        while True:
            try:
                prod.produce(topic, value, sid.encode())
                break
            except BufferError:
                prod.poll(0.05)
    prod.flush(300)
    print(f"wrote {n:,} schedule records in {time.perf_counter() - t0:.1f}s")

    proc = _start_processor(env, args.metrics_port)
    try:
        started = time.monotonic()
        restore_s = wait_restored(args.metrics_port, settings.partitions, 900)
        wall_s = time.monotonic() - started
        rss = _rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    out = {
        "schedules": n,
        "distinct_specs": args.distinct,
        "restore_s": restore_s,
        "restore_schedules_per_s": n / restore_s if restore_s else None,
        "start_to_restored_s": wall_s,
        "rss_bytes_per_schedule": rss / n,
    }
    path = Path(args.json_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    for k, v in out.items():
        print(f"{k:28} {v:,.3f}" if isinstance(v, float) else f"{k:28} {v}")
    doomed = [t for t in admin.list_topics(timeout=10).topics if t.startswith(ns + ".")]
    if doomed:
        admin.delete_topics(doomed)
    return 0 if restore_s is not None else 1
