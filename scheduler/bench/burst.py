"""``ksched bench burst``: N schedules fall due at one instant; measure lag against a plain producer.

Runs against the configured cluster (the embedded broker by default) in a
fresh namespace: loads N CREATE commands through ``ksched.commands.<tenant>`` to a
processor subprocess, lets every schedule fall due at the top of a minute,
and reads the dispatch topics ``read_committed``. In the same run a plain
confluent-kafka producer with the same settings writes N records of the same
size to the same broker: the practical limit on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import TopicPartition

from scheduler.bench.common import (
    bench_namespace,
    cpu_seconds,
    per_unit,
    pyplot,
    report,
    rss,
    start_processor,
    topic_bytes,
    wait_restored,
)
from scheduler.bench.faults import BrokerFault, ProcessorFault
from scheduler.kafka.connection import KafkaConnection
from scheduler.subprocesses import stop_all

if TYPE_CHECKING:
    from scheduler.settings import Settings


IDLE_S = 10  # seconds of idle ticking measured before the prepare-ahead horizon


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("burst", help="N schedules due at one instant: lag and rate")
    p.add_argument("--schedules", type=int, default=500_000)
    p.add_argument("--tenants", type=int, default=1)
    p.add_argument("--flexible-share", type=float, default=0.0)
    p.add_argument("--json", dest="json_file", default="bench-out/burst.json")
    p.add_argument("--png", default=None, help="plot file (default: next to the JSON)")
    p.add_argument("--metrics-port", type=int, default=9471, help="first processor's; the next use +1, +2")
    p.add_argument("--processors", type=int, default=1, help="processor processes sharing the shards")
    p.add_argument(
        "--load-rate", type=float, default=2500, help="expected commands/s, to place the due instant"
    )
    p.add_argument(
        "--kill-broker", type=float, default=None, metavar="S",
        help="local cluster only (kafka start --nodes 3): SIGKILL its last node S seconds before the "
             "instant, restart it --broker-down seconds later",
    )
    p.add_argument("--broker-down", type=float, default=10.0, help="seconds the killed node stays down (10)")
    p.add_argument(
        "--kill-processor", type=float, default=None, metavar="S",
        help="with --processors 2 or more: SIGKILL the first processor S seconds before the instant "
             "(a failover at the top of the hour); the others must take its shards and fire them",
    )
    p.add_argument(
        "--record-framing", choices=("single-object", "confluent"), default=None,
        help="the processor's record framing (default: the record_framing setting); confluent needs "
             "schema_registry_url (KSCHED_SCHEMA_REGISTRY_URL)",
    )
    p.set_defaults(handler=_run)


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def _baseline_records(n: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs shaped like the burst's dispatch records: random 32-hex ids, a
    32-byte payload, the same tenant/handler and Avro layout."""
    from scheduler.processor import wire
    from scheduler.processor.model import DueOccurrence
    from scheduler.vocabulary import Lane

    stamp = wire.dispatch_stamp(int(time.time() * 1000))
    due = int(time.time())
    out = []
    for _ in range(n):
        sid = uuid.uuid4().hex
        occ = DueOccurrence(sid, "t0", 1, due, due, Lane.STRICT, "noop", b"x" * 32)
        out.append((sid.encode(), wire.encode_dispatch(occ, stamp)))
    return out


def _plain_rate(conn: KafkaConnection, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    from scheduler.kafka.clients import producer

    plain = producer(conn)
    produce = plain.produce
    t0 = time.perf_counter()
    for key, value in records:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                plain.poll(0.01)
    plain.flush(120)
    return len(records) / (time.perf_counter() - t0)


def _baseline(settings: Settings, admin: Any, base_topic: str, n: int) -> tuple[float, float]:
    """The plain producer's rates (distinct values, one repeated value) writing to ``base_topic``.

    N records shaped like the dispatch records (distinct ids, same sizes, keyed by a schedule
    id), encoded before the clock starts.
    """
    from confluent_kafka.admin import NewTopic

    bs = settings.kafka()
    admin.create_topics([NewTopic(base_topic, settings.partitions, 1)])[base_topic].result(30)
    time.sleep(1)
    records = _baseline_records(n)
    sample = len(records[0][1])
    plain_rate = _plain_rate(bs, base_topic, records)
    # The same with one repeated value: what the baseline was before 2026-12-02 (lz4 squeezes it).
    same = [(k, records[0][1]) for k, _ in records]
    plain_same_rate = _plain_rate(bs, base_topic, same)
    del records, same
    print(
        f"plain producer: {plain_rate:,.0f} records/s ({n:,} distinct x {sample} B); "
        f"one repeated value: {plain_same_rate:,.0f}/s"
    )
    return plain_rate, plain_same_rate


def _load(
    settings: Settings, results: Any, names: list[str], n: int, cron: str, flexible_share: float
) -> tuple[int, int, float]:
    """Produce N CREATE commands of ``cron`` (the first ``flexible_share`` flexible), tenants in turn;
    then read ``results`` until N answers or 600 s. Returns (accepted, answers read, seconds taken)."""
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.clients import produce_waiting, producer
    from scheduler.records import CommandResult, ScheduleCommand, ScheduleSpecRecord, decode, encode
    from scheduler.topology import topic_name

    cmd_producer = producer(settings.kafka())
    t_commands = [topic_name(settings, "commands", name) for name in names]
    nflex = int(n * flexible_share)
    t_load = time.perf_counter()
    for i in range(n):
        spec = ScheduleSpec(
            kind="cron",
            cron=cron,
            timezone="UTC",
            handler="noop",
            payload=b"x" * 32,
            window_minutes=1 if i < nflex else 0,
        )
        sid = uuid.uuid4().hex
        cmd = ScheduleCommand(
            request_id=sid,
            tenant=names[i % len(names)],
            schedule_id=sid,
            kind="CREATE",
            spec=ScheduleSpecRecord.from_domain(spec),
            issued_at_ms=int(time.time() * 1000),
        )
        produce_waiting(cmd_producer, t_commands[i % len(names)], encode(cmd), sid.encode())
    cmd_producer.flush(300)
    accepted = 0
    seen_results = 0
    deadline = time.monotonic() + 600
    while seen_results < n and time.monotonic() < deadline:
        for m in results.consume(10_000, 0.5):
            if m.error() is None:
                seen_results += 1
                accepted += decode(m.value() or b"", CommandResult).status == "ACCEPTED"
    return accepted, seen_results, time.perf_counter() - t_load


def _read_burst(
    reader: Any, n: int, deadline: float, procs: list[subprocess.Popen[bytes]], rss_after: int
) -> tuple[list[tuple[bytes, float, int]], int]:
    """The raw dispatch records (value, seen at, appended at ms) until N or ``deadline``, then 2 s more
    (a duplicate would arrive then); and the processors' peak RSS meanwhile.

    Kept raw while the burst runs: decoding here would take CPU from the processor and the
    broker on this 2-core machine. Decoded after the burst.
    """
    raw: list[tuple[bytes, float, int]] = []
    seen = 0
    peak_rss = rss_after
    last_rss_check = time.monotonic()
    while seen < n and time.monotonic() < deadline:
        for m in reader.consume(10_000, 0.2):
            if m.error() is not None:
                continue
            raw.append((m.value() or b"", time.time(), m.timestamp()[1]))
            seen += 1
        if time.monotonic() - last_rss_check > 0.5:
            peak_rss = max(peak_rss, sum(rss(p.pid) for p in procs))
            last_rss_check = time.monotonic()
    end = time.monotonic() + 2.0  # a duplicate would arrive now
    while time.monotonic() < end:
        for m in reader.consume(10_000, 0.2):
            if m.error() is None:
                raw.append((m.value() or b"", time.time(), m.timestamp()[1]))
    return raw, peak_rss


def _lags(
    raw: list[tuple[bytes, float, int]], due: int
) -> tuple[list[float], list[float], list[tuple[float, float]], set[str]]:
    """Decoded: consumer-visible lags, append lags, (seconds after due, lag) points, occurrence ids."""
    from scheduler.records import Occurrence, decode

    vis: list[float] = []
    app: list[float] = []
    over_time: list[tuple[float, float]] = []
    ids: set[str] = set()
    for value, seen_at, appended_ms in raw:
        occ = decode(value, Occurrence)
        ids.add(occ.occurrence_id)
        ref = occ.available_at_ms / 1000
        vis.append(seen_at - ref)
        app.append(appended_ms / 1000 - ref)
        over_time.append((seen_at - due, seen_at - ref))
    return vis, app, over_time, ids


def _faults(args: argparse.Namespace) -> tuple[BrokerFault | None, ProcessorFault | None]:
    """The faults the options ask for: a local cluster's node killed, a processor killed."""
    fault = pfault = None
    if args.kill_broker is not None:
        from scheduler.settings import load_settings

        fault = BrokerFault(load_settings(), args.kill_broker, args.broker_down)
    if args.kill_processor is not None:
        if args.processors < 2:
            raise SystemExit(f"--kill-processor {args.kill_processor}: needs --processors 2 or more "
                             "(someone must take the killed processor's shards)")
        pfault = ProcessorFault(args.kill_processor)
    return fault, pfault


def _run(args: argparse.Namespace) -> int:
    from scheduler.kafka.clients import consumer
    from scheduler.tenants import Tenant
    from scheduler.topology import topic_name

    n, ntenants = args.schedules, max(1, args.tenants)
    names = [f"t{i}" for i in range(ntenants)]
    fault, pfault = _faults(args)  # checked before a namespace is made
    framing = {"KSCHED_RECORD_FRAMING": args.record_framing} if args.record_framing else {}
    tenants = [Tenant(name=t, trigger_rate_per_s=0, max_schedules=10 * n) for t in names]
    space = bench_namespace(tenants, **framing)
    ns, env, settings, admin = space.name, space.env, space.settings, space.admin
    if settings.record_framing == "confluent":  # this process decodes the results and the burst too
        from scheduler.records import schema_ids

        schema_ids.use_registry(settings.schema_registry_url)
    print(f"record framing: {settings.record_framing}")
    bs = settings.kafka()

    # 1. The baseline: a plain producer, same settings.
    plain_rate, plain_same_rate = _baseline(settings, admin, f"{ns}.baseline", n)

    # 2. The processors (they share the shards).
    procs = [start_processor(env, args.metrics_port + i) for i in range(max(1, args.processors))]
    try:
        time.sleep(3 + 3 * (len(procs) - 1))  # joined, and the group balanced
        rss_before = sum(rss(p.pid) for p in procs)
        # 3. Load N creates, all due at one top of a minute far enough ahead.
        est_load_s = n / args.load_rate + 20
        due = (int(time.time() + est_load_s) // 60 + 1) * 60
        # A daily cron at the due minute: every schedule falls due at that one instant and re-arms for
        # tomorrow (a one-time spec would also measure its COMPLETED schedule writes).
        due_tm = time.gmtime(due)
        cron = f"{due_tm.tm_min} {due_tm.tm_hour} * * *"
        results = consumer(bs)
        results.assign([
            TopicPartition(topic_name(settings, "results", name), p, 0)
            for name in names for p in range(settings.partitions)
        ])
        accepted, seen_results, load_s = _load(settings, results, names, n, cron, args.flexible_share)
        commands_per_s = seen_results / load_s
        print(f"loaded {accepted:,}/{n:,} schedules in {load_s:.1f}s: {commands_per_s:,.0f} commands/s")
        time.sleep(1)
        rss_after = sum(rss(p.pid) for p in procs)
        print(f"due instant {due} ({time.strftime('%H:%M:%S', time.gmtime(due))} UTC)", flush=True)
        if time.time() > due:
            print(f"warning: loading finished {time.time() - due:.0f}s after the due instant")

        loaded_bytes = topic_bytes(settings)  # the schedules armed, before any fires
        # The processors' CPU at three instants: IDLE_S before the prepare-ahead horizon (idle
        # ticking), the horizon (dispatch records are encoded from then on) and the due instant.
        ahead = settings.prepare_ahead_s
        marks = {"idle": due - ahead - IDLE_S, "prepare": due - ahead, "due": due}
        cpu_at: dict[str, float] = {}

        def mark(name: str) -> None:
            cpu_at[name] = cpu_seconds([p.pid for p in procs])

        now = time.time()
        timers = [threading.Timer(at - now, mark, (k,)) for k, at in marks.items() if at > now]
        for timer in timers:
            timer.start()
        if fault is not None:
            fault.arm(due)
        if pfault is not None:
            pfault.arm(due, procs[0])
        # 4. Read the burst read_committed; lag two ways.
        reader = consumer(bs, None, **{"fetch.wait.max.ms": 10})
        reader.assign(
            [
                TopicPartition(topic_name(settings, "dispatch", t), p, 0)
                for t in names
                for p in range(settings.partitions)
            ]
        )
        deadline = time.monotonic() + max(60.0, due - time.time() + 120)
        raw, peak_rss = _read_burst(reader, n, deadline, procs, rss_after)
        for timer in timers:
            timer.join()
        cpu_end, t_end = cpu_seconds([p.pid for p in procs]), time.time()
        burst_cpu_s = cpu_end - cpu_at.get("due", cpu_end)
        fired_cpu_s = None  # the load ran into the idle interval: no idle rate to take out
        if "idle" in cpu_at:
            idle_rate = (cpu_at["prepare"] - cpu_at["idle"]) / IDLE_S
            fired_cpu_s = cpu_end - cpu_at["prepare"] - idle_rate * (t_end - marks["prepare"])
        fired_bytes = topic_bytes(settings)
        vis, app, over_time, ids = _lags(raw, due)
        total = len(raw)
        appended = sorted(a for _, _, a in raw)
        emit_rate = (
            total / max(1e-3, (appended[-1] - appended[0]) / 1000) if total > 1 else 0.0
        )
        reader.close()
        if fault is not None:
            fault.join()
            fault.facts["processors_survived"] = "yes" if all(p.poll() is None for p in procs) else "no"
        if pfault is not None:
            pfault.join()
            procs = [p for p in procs if p is not pfault.killed]

        # 5. Restore: stop them, start one processor that restores every shard; its restore time.
        stop_all(procs, 60)
        procs = [start_processor(env, args.metrics_port)]
        restore_s = wait_restored(args.metrics_port, settings.partitions, 600)
    finally:
        stop_all(procs)
    vis.sort()
    app.sort()
    out = {
        "schedules": n,
        "record_framing": settings.record_framing,
        "processors": max(1, args.processors),
        "tenants": ntenants,
        "flexible_share": args.flexible_share,
        "lag_p50_s": _pct(vis, 0.50),
        "lag_p95_s": _pct(vis, 0.95),
        "lag_p99_s": _pct(vis, 0.99),
        "lag_max_s": vis[-1] if vis else float("nan"),
        "append_lag_p99_s": _pct(app, 0.99),
        "emit_rate_per_s": emit_rate,
        "plain_producer_rate_per_s": plain_rate,
        "plain_producer_same_value_rate_per_s": plain_same_rate,
        "ratio": emit_rate / plain_rate if plain_rate else 0.0,
        "missing": n - len(ids),
        "duplicates": total - len(ids),
        "rss_bytes_per_schedule": (rss_after - rss_before) / n,
        "rss_peak_bytes_per_schedule": (peak_rss - rss_before) / n,
        "restore_s": restore_s,
        "commands_per_s": commands_per_s,
        "lag_mean_s": statistics.fmean(vis) if vis else float("nan"),
        # From the due instant: what the burst itself costs (dispatch records are encoded ahead).
        "processor_cpu_us_per_dispatch": 1e6 * burst_cpu_s / max(1, total),
        # From the prepare-ahead horizon, idle ticking taken out: preparing, dispatching, re-arming.
        "processor_cpu_us_per_occurrence": None if fired_cpu_s is None else 1e6 * fired_cpu_s / max(1, total),
        "broker_bytes_per_schedule_armed": per_unit(loaded_bytes, n, ("schedules", "state")),
        "broker_bytes_per_occurrence_fired": per_unit(
            {k: v - loaded_bytes.get(k, 0) for k, v in fired_bytes.items()}, max(1, total)
        ),
        **(fault.facts if fault is not None else {}),
        **(pfault.facts if pfault is not None else {}),
    }
    path = report(out, args.json_file)
    _plot(over_time, vis, [a / 1000 - due for a in appended],
          Path(args.png) if args.png else path.with_suffix(".png"))
    space.close()
    return 0 if out["missing"] == 0 and out["duplicates"] == 0 else 1


def _plot(over_time: list[tuple[float, float]], lags: list[float], appended: list[float], path: Path) -> None:
    """Lag over time, the lag CDF, and the emission rate over time (``appended``: each record's
    broker append time, seconds after the due instant, sorted)."""
    plt = pyplot()
    if plt is None:
        return
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4))
    step = max(1, len(over_time) // 20_000)
    pts = over_time[::step]
    a.scatter([p[0] for p in pts], [p[1] for p in pts], s=1)
    a.set_xlabel("seconds after the due instant")
    a.set_ylabel("lag (s), consumer-visible")
    a.set_title("lag over time")
    if lags:
        ys = [i / len(lags) for i in range(len(lags))][::step]
        b.plot(lags[::step], ys)
    b.set_xlabel("lag (s)")
    b.set_ylabel("fraction")
    b.set_title("lag CDF")
    width = 0.1
    per_bin: dict[int, int] = {}
    for t in appended:
        per_bin[int(t // width)] = per_bin.get(int(t // width), 0) + 1
    if per_bin:
        bins = range(min(per_bin), max(per_bin) + 1)
        c.step([i * width for i in bins], [per_bin.get(i, 0) / width for i in bins], where="post")
    c.set_xlabel("seconds after the due instant (broker append time)")
    c.set_ylim(bottom=0)
    c.set_ylabel("dispatch records / s")
    c.set_title("emission rate over time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
