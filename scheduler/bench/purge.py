"""``ksched bench purge``: finished schedules leave memory and restore time once their retention ran out.

Three processor starts on one fresh namespace: (1) empty — the baseline
restore time and RSS; (2) after N ``COMPLETED`` one-time schedules were written
to ``ksched.schedules`` with a finish older than ``finished_retention_s`` (what
N fired one-time schedules leave there) — restore time and RSS with them, then
the time until the processor has purged them all (tombstones); (3) after the
purge — restore time and RSS again. The third start still reads the tombstones
until the log cleaner compacts them away (hourly segments, see topics.toml);
it holds none of the schedules.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import urllib.request
import uuid
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("purge", help="memory and restore time after a purge")
    p.add_argument("--schedules", type=int, default=100_000)
    p.add_argument("--json", dest="json_file", default="bench-out/purge.json")
    p.add_argument("--metrics-port", type=int, default=9473)
    p.set_defaults(handler=_run)


def _held(port: int) -> int | None:
    """Schedules the processor holds over all its shards (``ksched_schedules``), None if unknown."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    lines = text.splitlines()
    values = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("ksched_schedules{")]
    return int(sum(values)) if values else None


def _start(env: dict[str, str], port: int, shards: int) -> tuple[Any, float | None, int]:
    from scheduler.bench.common import rss, start_processor, wait_restored

    proc = start_processor(env, port)
    restore_s = wait_restored(port, shards, 600)
    return proc, restore_s, rss(proc.pid)


def _run(args: argparse.Namespace) -> int:
    from scheduler.bench.common import bench_namespace, report
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.clients import produce_waiting, producer
    from scheduler.records import Schedule, ScheduleSpecRecord, encode
    from scheduler.subprocesses import stop_all
    from scheduler.tenants import Tenant
    from scheduler.topology import topic_name

    n, port = args.schedules, args.metrics_port
    space = bench_namespace(
        [Tenant(name="t0", trigger_rate_per_s=0, max_schedules=10 * n)], KSCHED_FINISHED_RETENTION_S="60"
    )
    env, settings = space.env, space.settings
    shards = settings.partitions
    proc, empty_s, empty_rss = _start(env, port, shards)
    stop_all([proc], 60)

    now_ms = int(time.time() * 1000)
    fired_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms // 1000 - 7200))
    spec = ScheduleSpecRecord.from_domain(
        ScheduleSpec(kind="once", at=fired_at, timezone="UTC", handler="noop")
    )
    topic = topic_name(settings, "schedules")
    prod = producer(settings.kafka())
    for _ in range(n):
        sid = uuid.uuid4().hex
        value = encode(
            Schedule(
                tenant="t0", schedule_id=sid, version=1, state="COMPLETED",
                spec=dataclasses.replace(spec, payload=sid[:16].encode()),
                created_at_ms=now_ms - 7_300_000, updated_at_ms=now_ms - 3_600_000,
                effective_from_ms=now_ms - 7_300_000, idempotency_key=None,
            )
        )
        produce_waiting(prod, topic, value, sid.encode())
    prod.flush(300)

    proc, full_s, full_rss = _start(env, port, shards)
    started = time.monotonic()
    held = _held(port)
    while held != 0 and time.monotonic() - started < 600:
        time.sleep(0.2)
        held = _held(port)
    purge_s = time.monotonic() - started
    time.sleep(1)  # the last purge's transaction commits
    stop_all([proc], 60)

    proc, after_s, after_rss = _start(env, port, shards)
    after_held = _held(port)
    stop_all([proc], 60)
    out = {
        "schedules": n,
        "empty_restore_s": empty_s,
        "empty_rss_bytes": empty_rss,
        "with_finished_restore_s": full_s,
        "with_finished_rss_bytes": full_rss,
        "purge_s": purge_s if held == 0 else None,
        "after_purge_restore_s": after_s,
        "after_purge_rss_bytes": after_rss,
        "after_purge_held": after_held,
        "after_purge_rss_over_empty": after_rss / empty_rss,
        "with_finished_rss_over_empty": full_rss / empty_rss,
    }
    report(out, args.json_file)
    space.close()
    return 0 if held == 0 and after_held == 0 else 1
