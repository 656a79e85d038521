"""``ksched bench workers``: occurrences end to end through a processor and workers, one killed midway.

In a fresh namespace: N schedules all due at one instant; ``--processes`` worker
processes run a no-op handler that records its effect through the idempotency
store (``--store sqlite``: into the same SQLite file, in the store's transaction;
``memory``: a file per process) -- as a batch handler (group commit) or, with
``--handler plain``, one pool thread and one transaction per occurrence; when
half the occurrences have succeeded one worker is killed (SIGKILL) and a new one
started. It then counts the distinct occurrences that succeeded and any effect
recorded twice, and, from the SUCCEEDED attempt reports, the end-to-end time
from ``scheduled_for``; it samples the workers' CPU time and the processor's
report backlog (commands records not yet committed by its group) every second,
and plots throughput and backlog over time (PNG next to the JSON).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Message

NOOP_HANDLERS = """
import os
from scheduler.idempotency import MemoryStore, SQLiteStore
from scheduler.worker import Handlers

handlers = Handlers()
if os.environ["KSCHED_BENCH_STORE"] == "sqlite":
    store = SQLiteStore(os.environ["KSCHED_BENCH_DB"])

    def effect(oid):
        return lambda conn: conn.execute("INSERT INTO bench_effects VALUES (?)", (oid,))

    def flush():
        pass
else:  # the effects go to a file per process, to count duplicates afterwards
    store = MemoryStore()
    log = open(os.path.join(os.environ["KSCHED_BENCH_DIR"], f"effects-{os.getpid()}.txt"), "a")

    def effect(oid):
        return lambda _conn: log.write(oid + "\\n")

    flush = log.flush

if os.environ["KSCHED_BENCH_HANDLER"] == "plain":  # a pool thread per occurrence, STARTED first
    @handlers.register("noop")
    def noop(ctx):
        store.run_once(ctx.occurrence_id, effect(ctx.occurrence_id))
        flush()
else:  # one call and one group commit per consumed batch, on the consumer thread
    @handlers.register_batch("noop")
    def noop(contexts):
        out = store.run_batch([(c.occurrence_id, effect(c.occurrence_id)) for c in contexts])
        flush()
        return [r if isinstance(r, Exception) else None for r in out]
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "workers", help="occurrences end to end, a worker killed midway"
    )
    p.add_argument("--occurrences", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=16, help="handlers per worker process (plain)")
    p.add_argument("--processes", type=int, default=2, help="worker processes (up to the partition count)")
    p.add_argument("--store", choices=("sqlite", "memory"), default="sqlite", help="idempotency store")
    p.add_argument("--handler", dest="handler_kind", choices=("batch", "plain"), default="batch",
                   help="batch: a batch handler (fast path); plain: a handler on the thread pool")
    p.add_argument("--no-kill", dest="kill", action="store_false", help="do not kill a worker midway")
    p.add_argument("--drain", action="store_true",
                   help="start the workers only once every occurrence is on the dispatch topic: "
                        "measures the workers, not the processor's emission")
    p.add_argument("--second-burst", type=float, default=None, metavar="S",
                   help="a second set of schedules due S seconds after the first (issue 14 item 2: a burst "
                        "and its reports must not push the next one late); its lag as second_lag_p99_s")
    p.add_argument("--second-size", type=int, default=None,
                   help="the second burst's size (default: --occurrences)")
    p.add_argument("--kind", choices=("once", "cron"), default="once",
                   help="once: one-time schedules, each completed by its occurrence (its COMPLETED records "
                        "are written as its report is applied); cron: daily schedules due at the instant "
                        "(rounded up to a whole minute), which complete nothing: the reports alone")
    p.add_argument("--held", action="store_true",
                   help="with --drain: the processor is stopped (SIGSTOP) while the workers drain, then "
                        "resumed with every report queued, and timed applying them: its capacity "
                        "(held_reports_per_s, held_processor_cpu_us_per_report)")
    p.add_argument("--worker-nice", type=int, default=0, choices=range(20), metavar="N",
                   help="run the worker processes N nicer than the bench (0-19): on one machine the "
                        "processor and the broker get the cores first, as with workers on machines apart")
    p.add_argument("--single-reports", action="store_true",
                   help="the workers send each final report as its own record (ksched worker "
                        "--single-reports), as before AttemptReports; default: a batch's as one record")
    p.add_argument("--single-events", action="store_true",
                   help="the processor writes each occurrence event as its own record (the setting "
                        "batch_events off), as before OccurrenceEvents; default: a run's as one record")
    p.add_argument("--png", default=None, help="plot file (default: next to the JSON)")
    p.add_argument("--json", dest="json_file", default="bench-out/workers.json")
    p.set_defaults(handler=_run)


def _worker(env: dict[str, str], concurrency: int, nice: int = 0, single_reports: bool = False
            ) -> subprocess.Popen[bytes]:
    """A worker process of the bench's tenant, ``nice`` nicer than the bench (every thread it starts
    inherits it)."""
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
        *(["--single-reports"] if single_reports else []),
    ]
    return subprocess.Popen(niced(nice, cmd), env=env)


def niced(nice: int, cmd: list[str]) -> list[str]:
    """``cmd`` run ``nice`` nicer than this process, through nice(1), which execs it: the child keeps
    its pid (signals and CPU samples reach it). Not ``preexec_fn``, which is unsafe in a process
    with threads (the bench's Kafka clients), and not ``setpriority`` after the start, which on
    Linux changes only the thread it names."""
    return ["nice", "-n", str(nice), *cmd] if nice else cmd


def _take_succeeded(
    msgs: list[Message], e2e: dict[str, float], e2e_second: dict[str, float], second_ms: int | None
) -> int:
    """The e2e seconds of each first SUCCEEDED report among ``msgs`` of the commands topic (a report
    alone, or a worker's batch of them), by occurrence id: the second burst's (due at
    ``second_ms``) into ``e2e_second``, the others into ``e2e``. Returns the reports read."""
    from scheduler.records.report_scan import reports_of

    n = 0
    for m in msgs:
        if m.error() is not None:
            continue
        got = reports_of(m.value() or b"")
        n += len(got)
        for r in got:
            if r[7] == "SUCCEEDED":
                sf_ms = r[4]
                into = e2e_second if sf_ms == second_ms else e2e
                into.setdefault(r[0], (r[12] - sf_ms) / 1000)
    return n


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    from scheduler.bench.common import (
        bench_namespace,
        cpu_seconds,
        free_port,
        per_unit,
        report,
        start_processor,
        topic_bytes,
        wait_restored,
    )
    from scheduler.bench.workers_load import TENANT, dispatch_lags, events_rate, load, pct
    from scheduler.bench.workers_view import Sampler, plot
    from scheduler.kafka.clients import consumer
    from scheduler.subprocesses import stop_all
    from scheduler.tenants import Tenant
    from scheduler.topology import topic_name

    _check(args)
    n = args.occurrences
    n2 = (args.second_size or n) if args.second_burst is not None else 0
    total = n + n2
    tenant = Tenant(name=TENANT, trigger_rate_per_s=0, max_schedules=10 * total, max_running=0)
    space = bench_namespace([tenant])
    tmp, settings = space.folder, space.settings
    (tmp / "bench_noop_handlers.py").write_text(NOOP_HANDLERS)
    db = tmp / "effects.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE bench_effects (occurrence_id TEXT)")
    env = _env(args, space.env, tmp, db)
    start = partial(_worker, env, args.concurrency, args.worker_nice, args.single_reports)
    reports = consumer(settings.kafka())
    t_commands = topic_name(settings, "commands", TENANT)
    group = consumer(settings.kafka(), f"{settings.namespace}.processor")
    metrics_port = free_port()
    sampler = Sampler(settings, t_commands, group, metrics_port)
    proc = start_processor(env, metrics_port)
    # Started before the load: their start-up is not per occurrence. With --drain, fresh ones start
    # once the burst is on the dispatch topic (SIGSTOPped ones let their 10 s group session expire
    # over a longer emission: a rejoin in the measured span), and a first one, stopped once idle,
    # measures the start-up CPU to take out.
    workers = [start() for _ in range(1 if args.drain else args.processes)]
    startup_cpu = _idle_cpu(workers[0]) if args.drain else 0.0
    if args.drain:
        stop_all(workers)
    killed = False
    read = taken0 = 0  # reports read on the commands topic (a record may hold many); see _apply_held
    e2e: dict[str, float] = {}
    e2e_second: dict[str, float] = {}
    second_ms = 0
    t0 = time.monotonic()
    proc_cpu_before = stopped_at = 0.0
    bytes_before: dict[str, int] = {}
    try:
        if wait_restored(metrics_port, settings.partitions, 120) is None:
            raise SystemExit("the processor did not restore its shards in 120 s")
        bursts = [(n, 0.0)] + ([(n2, args.second_burst)] if n2 else [])
        loaded = load(settings, bursts, calibration=min(20_000, max(500, total // 10)), kind=args.kind)
        # The reports are read from the end of the load: from offset 0 this process read the
        # million creates first, during the burst, on the cores the burst runs on (and its
        # throughput curve started seconds late). Nothing reports before the instant.
        reports.assign([TopicPartition(t_commands, p, reports.get_watermark_offsets(
            TopicPartition(t_commands, p), timeout=10)[1]) for p in range(settings.partitions)])
        due = loaded.due
        second_ms = (due + int(args.second_burst or 0)) * 1000
        t0 = time.monotonic() + due - time.time()  # the due instant, on the monotonic clock
        time.sleep(max(0.0, due - time.time() - 1.0))
        sampler.sample(workers, 0, 0, force=True)  # idle workers: the CPU baseline
        cpu_before = sum(sampler.cpu.values())
        if args.drain:
            sampler.cpu.clear()
            taken0 = sampler.taken() or 0  # no worker has run yet: nothing the processor takes moves it
            stopped_at = _wait_dispatched(settings, total, proc if args.held else None)
            sampler.stopped_at_taken = taken0 if args.held else None
            print(f"{total:,} occurrences on the dispatch topic: starting {args.processes} workers")
            workers = [start() for _ in range(args.processes)]
            cpu_before = startup_cpu * len(workers)
        deadline = time.monotonic() + max(120.0, due - time.time() + (args.second_burst or 0) + total / 100)
        while len(e2e) + len(e2e_second) < total and time.monotonic() < deadline:
            read += _take_succeeded(reports.consume(5000, 0.5), e2e, e2e_second, second_ms if n2 else None)
            done = len(e2e) + len(e2e_second)
            if args.drain and done and not proc_cpu_before:
                # The processor has emitted every occurrence: from the first report on, its CPU and
                # the topics' growth are the reports' cost (not its ticking while workers start).
                proc_cpu_before = cpu_seconds([proc.pid])
                bytes_before = topic_bytes(settings)
            sampler.sample(workers, done, read)
            if args.kill and not killed and done >= total // 2:
                sampler.sample(workers, done, read, force=True)  # the killed worker's CPU up to its end
                workers[0].send_signal(signal.SIGKILL)
                workers[0].wait()
                workers[0] = start()
                killed = True
                print(f"killed a worker at {done:,} succeeded; started another")
        held = _apply_held(proc, sampler, stopped_at, taken0, read - taken0) if args.held else {}
        time.sleep(2)  # the processor commits the last reports it read
        sampler.sample(workers, len(e2e) + len(e2e_second), read, force=True)  # the workers' CPU at the end
        proc_cpu_s = cpu_seconds([proc.pid]) - proc_cpu_before
        bytes_after = topic_bytes(settings)
    finally:
        proc.send_signal(signal.SIGCONT)  # --held: a stopped process would not act on SIGTERM
        stop_all([*workers, proc])
        reports.close()
        group.close()
    lag = dispatch_lags(settings, [due * 1000, second_ms] if n2 else [due * 1000])
    if held:
        held |= events_rate(settings, held["held_resumed_at_ms"])
    rows, distinct = _effects(args.store, db, tmp)
    succeeded = len(e2e) + len(e2e_second)
    lags = sorted(e2e.values())
    ends = sorted([*e2e.values(), *(v + (args.second_burst or 0) for v in e2e_second.values())])
    # Reports carry milliseconds: a worker that sends them all in one batch (600 at --drain) spans
    # 0 ms, which is "within one millisecond", not "no rate".
    span = max(max(ends) - min(ends), 0.001) if ends else 0.0
    first_lag = lag[due * 1000]
    out = {
        "occurrences": total,
        "succeeded": distinct,
        "succeeded_reports": succeeded,
        "duplicate_effects": rows - distinct,
        "rate_per_s": succeeded / span if span > 0 else None,
        "e2e_p50_s": pct(lags, 0.5),
        "e2e_p99_s": pct(lags, 0.99),
        "e2e_max_s": lags[-1] if lags else None,
        "lag_p50_s": pct(first_lag, 0.5),
        "lag_p99_s": pct(first_lag, 0.99),
        "load_s": loaded.load_s,
        "load_rate_per_s": total / loaded.load_s,
        "calibrated_rate_per_s": loaded.calibrated_rate_per_s,
        "applied_ahead_s": loaded.applied_ahead_s,
        "worker_cpu_s_per_occurrence": (sum(sampler.cpu.values()) - cpu_before) / max(1, succeeded),
        "processor_cpu_us_per_report": 1e6 * proc_cpu_s / max(1, succeeded) if args.drain else None,
        "broker_bytes_per_occurrence_reported": per_unit(
            {t: b - bytes_before.get(t, 0) for t, b in bytes_after.items()}, succeeded
        ) if args.drain else None,
        "max_report_backlog": max((b for _, _, b in sampler.over_time), default=0),
        "worker_killed_midway": killed,
        "drain": args.drain,
        "workers": args.processes,
        "partitions": settings.partitions,
        "store": args.store,
        "handler": args.handler_kind,
        "kind": args.kind,
        "concurrency_per_worker": args.concurrency,
        "worker_nice": args.worker_nice,
        "single_reports": args.single_reports,
        "single_events": args.single_events,
        **held,
    }
    if n2:
        second_lag = sorted(lag[second_ms])
        seconds = sorted(e2e_second.values())
        out |= {
            "second_burst_after_s": args.second_burst,
            "second_occurrences": n2,
            "second_lag_p50_s": pct(second_lag, 0.5),
            "second_lag_p99_s": pct(second_lag, 0.99),
            "second_e2e_p50_s": pct(seconds, 0.5),
            "second_e2e_p99_s": pct(seconds, 0.99),
        }
    path = report(out, args.json_file)
    curves = {"first burst, end to end": lags, "first burst, on the dispatch topic": first_lag}
    if n2:
        curves |= {"second burst, end to end": sorted(e2e_second.values()),
                   "second burst, on the dispatch topic": lag[second_ms]}
    png = Path(args.png) if args.png else path.with_suffix(".png")
    plot(sampler.over_time, t0, curves, args.second_burst, png)
    space.close()
    ok = out["duplicate_effects"] == 0 and distinct == total
    return 0 if ok else 1


def _check(args: argparse.Namespace) -> None:
    """Options that only make sense together, refused before anything is created."""
    if args.held and not args.drain:
        raise SystemExit("--held measures the processor with every report queued: give --drain too")


def _env(args: argparse.Namespace, base: dict[str, str], tmp: Path, db: Path) -> dict[str, str]:
    """The processor's and workers' environment: the bench's namespace, its handlers and store."""
    return {
        **base,
        # --held: the stopped processor keeps its shards (no rebalance, no restore in the figure)
        **({"KSCHED_PROCESSOR_SESSION_TIMEOUT_MS": "300000"} if args.held else {}),
        **({"KSCHED_BATCH_EVENTS": "false"} if args.single_events else {}),
        "KSCHED_BENCH_DB": str(db),
        "KSCHED_BENCH_DIR": str(tmp),
        "KSCHED_BENCH_STORE": args.store,
        "KSCHED_BENCH_HANDLER": args.handler_kind,
        "PYTHONPATH": f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }


def _idle_cpu(worker: subprocess.Popen[bytes], timeout_s: float = 60) -> float:
    """CPU seconds ``worker`` took to start: read once it has used under 20 ms in half a second."""
    import psutil

    proc = psutil.Process(worker.pid)
    last = -1.0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = proc.cpu_times()
        now = float(t.user + t.system)
        if now - last < 0.02:
            return now
        last = now
        time.sleep(0.5)
    raise SystemExit(f"a worker was still starting after {timeout_s:.0f} s")


TXN_TIMEOUT_S = 30  # the processor's transaction.timeout.ms (processor/ownership.py)


def _apply_held(proc: subprocess.Popen[bytes], sampler: Any, stopped_at: float, taken0: int,
                queued_reports: int, quiet_s: float = 3.0, timeout_s: float = 120.0) -> dict[str, Any]:
    """Resume the stopped processor, every report queued, and time it applying them: until its
    group's committed offsets last moved, read until they have not moved for ``quiet_s`` of
    answered polls. The commands topic has no transactional writer (no markers): the backlog
    ends at 0 unless the processor stalls. ``held_reports_*`` count reports, from the processor's
    ``ksched_attempt_reports_total`` when its offsets moved (a record may hold many: the final
    reports, with ``--handler plain`` also the STARTED ones); ``held_records_*`` the topic's
    records. Its rate and its CPU per report over the same span. ``held_steady_reports_per_s``:
    the rate between the first and the last move of the offsets, which leaves out the resume
    after SIGCONT (the client's reconnection, the first poll and commit: ~0.1 s, measured).
    ``held_resumed_at_ms``: the SIGCONT's wall time, from which
    :func:`scheduler.bench.workers_load.events_rate` times the apply by the processor's own
    events records after the run (``held_events_reports_per_s``, ``held_events_span_s``).
    ``taken0``: the reports the processor had taken when it was stopped; ``queued_reports``:
    those the bench read after."""
    from scheduler.bench.common import cpu_seconds

    queued = None
    deadline = time.monotonic() + timeout_s
    while queued is None and time.monotonic() < deadline:
        queued = sampler.backlog()
        if queued is None:
            time.sleep(0.5)  # the broker is loaded: do not ask it again at once
    if queued is None:
        raise SystemExit("--held: the broker did not answer the processor group's offsets")
    pause_s = time.monotonic() - stopped_at
    if pause_s > TXN_TIMEOUT_S - 5:  # a transaction open at the SIGSTOP is aborted: the figure has a rebuild
        print(f"warning: the processor was stopped {pause_s:.0f}s, near or past its {TXN_TIMEOUT_S}s "
              "transaction timeout: its figure may include a shard given up and restored")
    highs = sampler.highs()  # every report is on the topic: each poll below asks the group only
    cpu0, t0, resumed_ms = cpu_seconds([proc.pid]), time.monotonic(), int(time.time() * 1000)
    proc.send_signal(signal.SIGCONT)
    sampler.stopped_at_taken = None
    last, t_last, cpu_last, quiet_from = queued, t0, cpu0, t0
    taken_last: int | None = taken0
    first: tuple[float, int] | None = None  # when the offsets first moved, and the reports taken then
    while last and time.monotonic() - quiet_from < quiet_s and time.monotonic() < deadline:
        time.sleep(0.05)
        asked = time.monotonic()
        left = sampler.backlog(highs)
        answered = time.monotonic()
        if left is None:  # unanswered: not part of the quiet window
            quiet_from += answered - asked
        elif left < last:
            # Timed when answered, the CPU read then: an offset committed while the request was
            # out is counted at the answer (a few large commits must not end the span early).
            last, t_last, cpu_last, quiet_from = left, answered, cpu_seconds([proc.pid]), answered
            taken_last = sampler.taken() or taken_last
            if first is None and taken_last is not None:
                first = (answered, taken_last)
    cpu_s = cpu_last - cpu0
    applied = (taken_last or 0) - taken0
    span = t_last - t0
    # after the first move of the offsets: the reports taken and the seconds (None: no move)
    after = None if first is None else ((taken_last or 0) - first[1], t_last - first[0])
    steady = "" if after is None else f", {after[0]:,} of them in the {after[1]:.2f}s after the first commit"
    print(f"held: {applied:,} reports ({queued - last:,} of {queued:,} queued records) applied in "
          f"{span:.2f}s after SIGCONT{steady}")
    if last:
        print(f"warning: {last:,} records were still queued when the processor's offsets stopped moving")
    return {
        "held_pause_s": pause_s,
        "held_records_queued": queued,
        "held_records_applied": queued - last,
        "held_reports_queued": queued_reports,
        "held_reports_applied": applied,
        "held_apply_s": span,
        "held_reports_per_s": applied / span if span > 0 else None,
        "held_first_move_s": None if first is None else first[0] - t0,
        "held_steady_reports_per_s": after[0] / after[1] if after and after[1] > 0 else None,
        # the kernel counts CPU in clock ticks (10 ms): a short apply (300 reports, ~2 ms) may read
        # 0, which is no figure, not a free apply
        "held_processor_cpu_us_per_report": 1e6 * cpu_s / applied if applied and cpu_s > 0 else None,
        "held_resumed_at_ms": resumed_ms,
    }


def _wait_dispatched(settings: Any, n: int, stop: subprocess.Popen[bytes] | None = None) -> float:
    """Block until ``n`` committed records are on the bench tenant's dispatch topic; then SIGSTOP
    ``stop`` (the processor, --held) once its last transaction has had a second to commit.
    Returns when it was stopped (monotonic)."""
    from confluent_kafka import TopicPartition

    from scheduler.kafka.clients import consumer
    from scheduler.topology import topic_name

    c = consumer(settings.kafka())
    topic = topic_name(settings, "dispatch", "bw")
    c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    seen = 0
    try:
        while seen < n:
            seen += sum(1 for m in c.consume(10_000, 0.5) if m.error() is None)
    finally:
        c.close()
    if stop is not None:
        time.sleep(1.0)
        stop.send_signal(signal.SIGSTOP)
    return time.monotonic()


def _effects(store: str, db: Path, folder: Path) -> tuple[int, int]:
    """(effects recorded, distinct occurrences among them)."""
    if store == "sqlite":
        with sqlite3.connect(db) as conn:
            rows, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT occurrence_id) FROM bench_effects"
            ).fetchone()
        return int(rows), int(distinct)
    ids = [line for f in folder.glob("effects-*.txt") for line in f.read_text().split()]
    return len(ids), len(set(ids))
