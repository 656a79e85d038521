"""``ksched bench fire``: the processor's firing path in-process, without Kafka, in CPU µs.

N daily schedules of one tenant are created in a :class:`~scheduler.processor.shard.Shard`, their
dispatch records' heads prepared as the processor does ahead of the instant, then the instant's ticks
run (``due`` with the tick budget, inside ``Heap.quiet`` as the processor runs them) and every
dispatch record is encoded and handed to a ``send`` that drops it, by the processor's own
:func:`scheduler.processor.wire.produce_dispatch`. The figures are the main thread's CPU
time per occurrence for ``due`` and for encoding, so they hold on a loaded machine where the
burst's wall-clock figures do not; ``ksched bench burst`` measures the whole path against the
broker. Also reported: RSS per armed schedule and what the prepared heads add
(``prepared_head_bytes_per_schedule``: the occurrence id and the schedule id's length).

``--kind once``: one-time schedules instead, each completed by its fire; their COMPLETED records
(two ``Schedule`` encodings each, as the checkpoint writes them) are timed apart
(``complete_cpu_us_per_occurrence``), and the burst's own figures end with its last dispatch.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.kafka.clients import Messages


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fire", help="the firing path in-process: CPU µs per occurrence"
    )
    p.add_argument("--schedules", type=int, default=300_000)
    p.add_argument("--budget", type=int, default=20_000, help="dispatches per tick (tick_budget)")
    p.add_argument("--kind", choices=("cron", "once"), default="cron",
                   help="hourly schedules (default), or one-time ones completed by their fire")
    p.add_argument("--json", dest="json_file", default="bench-out/fire.json")
    p.set_defaults(handler=_run)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    from scheduler.processor.heap import Heap

    gc.collect()
    Heap.release_free_memory()


_TENANT = "t0"


def _dispatch_topic(tenant: str) -> str:
    return f"dispatch.{tenant}"


def create(shard: Any, n: int, now: int, once_at: int | None = None) -> None:
    """``n`` hourly schedules of tenant ``_TENANT`` in ``shard``, each with a payload and a key of its own
    as callers send them; ``once_at``: one-time schedules due then instead."""
    from scheduler.domain import ScheduleSpec

    at = None if once_at is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(once_at))
    for i in range(n):
        spec = (ScheduleSpec(kind="cron", cron="0 * * * *", timezone="UTC", handler="noop",
                             payload=os.urandom(16)) if at is None else
                ScheduleSpec(kind="once", at=at, timezone="UTC", handler="noop", payload=os.urandom(16)))
        shard.apply(kind="CREATE", request_id=f"r{i}", tenant=_TENANT, schedule_id=None,
                    idempotency_key=f"key-{i:09d}", expected_version=None, spec=spec, issued_at=now, now=now)


def _run(args: argparse.Namespace) -> int:
    from scheduler.bench.common import report
    from scheduler.processor import wire, wire_state
    from scheduler.processor.heap import Heap
    from scheduler.processor.shard import Shard
    from scheduler.tenants import Tenant

    n = args.schedules
    due = 1_800_000_000 - (1_800_000_000 % 3600)  # a top of the hour
    shard = Shard(0, {_TENANT: Tenant(name=_TENANT, trigger_rate_per_s=0, max_schedules=10 * n)},
                  partitions=1)
    _trim()
    rss0 = _rss()
    create(shard, n, due - 600, due if args.kind == "once" else None)
    _trim()
    gc.freeze()  # what Heap.settle does after commands
    rss_armed = _rss()
    while True:  # as the processor's idle time does within prepare_ahead_s of the instant
        batch = shard.to_prepare(due + 30, 500)
        wire.prepare_heads(batch)
        if len(batch) < 500:
            break
    _trim()
    rss_prepared = _rss()

    def produce(_topic: str, _value: bytes, _key: bytes, partition: int = -1) -> None:
        pass

    def send(_topic: str, _messages: Messages, _partition: int) -> None:
        pass

    stamp = wire.dispatch_stamp(due * 1000)
    dispatch = wire.produce_dispatch
    complete = wire_state.encode_completion
    due_s = encode_s = complete_s = 0.0
    total = ticks = completed = 0
    fired: set[str] = set()
    while True:
        with Heap.quiet():
            t0 = time.thread_time()
            out = shard.due(due, args.budget, float(due))
            t1 = time.thread_time()
            dispatch(out.dispatch, stamp, _dispatch_topic, wire.single_object, send, 0)
            t2 = time.thread_time()
            for e in out.completed:  # what Checkpoint.completions writes for each (no versions record)
                sched = complete(e, due * 1000)
                produce("schedules", sched, e.schedule_id.encode())
            t3 = time.thread_time()
        completed += len(out.completed)
        if out.dispatch:  # the completions of a burst's last tick are not its dispatches' cost
            due_s, encode_s = due_s + t1 - t0, encode_s + t2 - t1
        complete_s += t3 - t2
        if not out.dispatch and not out.completed:
            break
        if not out.dispatch:
            continue
        total += len(out.dispatch)
        fired.update(o.schedule_id for o in out.dispatch)
        ticks += 1
    out_fig = {
        "schedules": n,
        "fired": total,
        "distinct": len(fired),
        "ticks": ticks,
        "due_cpu_us_per_occurrence": 1e6 * due_s / max(1, total),
        "encode_cpu_us_per_occurrence": 1e6 * encode_s / max(1, total),
        "cpu_us_per_occurrence": 1e6 * (due_s + encode_s) / max(1, total),
        "kind": args.kind,
        "completed": completed,
        "complete_cpu_us_per_occurrence": 1e6 * complete_s / max(1, total),
        "rss_bytes_per_schedule": (rss_armed - rss0) / n,
        "prepared_head_bytes_per_schedule": (rss_prepared - rss_armed) / n,
    }
    report(out_fig, args.json_file)
    return 0 if total == len(fired) == n and completed == (n if args.kind == "once" else 0) else 1
