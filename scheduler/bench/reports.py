"""``ksched bench reports``: the processor's intake of attempt reports in-process, without Kafka.

N hourly schedules of one tenant fire in a :class:`~scheduler.processor.shard.Shard` (as in
``ksched bench fire``); each dispatch record is read back the way a worker reads it and answered
with the worker's own encoder (:class:`~scheduler.worker.reports.Reporter`): one final SUCCEEDED
report carrying its start time, as fast handlers send (``--started``: a STARTED report then the
final one, as pool handlers send), a record each or (``--batch N``) N to an ``AttemptReports``
record, as a worker sends its fast handlers' final reports. The reports then go through the
processor's real intake,
the runtime's :meth:`scheduler.processor.inbox.Inbox.take_all` (scan → fence → apply →
occurrence-event encode → produce into a producer that counts), a poll's records at a time
(``runtime.POLL_BATCH``) with the cyclic GC off during each, as the runtime calls it for a
process that owns one shard (with P shards, a poll's records are divided among them: calls
P times smaller, the same work per record but for the per-call costs). Figures are the main
thread's CPU µs per report, so they hold on a loaded machine; ``cpu_us_per_report`` is the
median of ``--rounds`` runs (each on a fresh shard; all of them in
``cpu_us_per_report_rounds``), next to the machine's speed probe before and after
(:func:`scheduler.bench.common.speed_probe_us`): a shared host's speed swings by more than a
change is worth. A further shard, fed the
same reports, runs the intake's stages one at a time over each poll's records (scan them, apply
them, write them) to split that figure by stage without a clock call per record. Exits 1 unless
every report was applied once in every run.
"""

from __future__ import annotations

import argparse
import gc
import secrets
import statistics
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.kafka.clients import Messages

from scheduler.bench.fire import _TENANT, _trim, create

_STAGES = ("scan_s", "apply_s", "write_s")


class _CountingProducer:
    """Takes what a checkpoint produces and counts it by topic (nothing leaves the process); keeps
    the values of ``kept`` (the events topic: counted in events once the run is measured)."""

    def __init__(self, kept: str = "") -> None:
        self.counts: dict[str, int] = {}
        self.kept = kept
        self.values: list[bytes] = []

    def begin_transaction(self) -> None:
        pass

    def produce(  # partition positional too, as the checkpoint passes it
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1, **_: Any
    ) -> None:
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def produce_batch(self, topic: str, messages: Messages, partition: int = -1) -> int:
        self.counts[topic] = self.counts.get(topic, 0) + len(messages)
        if topic == self.kept:
            self.values += [m["value"] or b"" for m in messages]
        return len(messages)

    def poll(self, _timeout: float = 0) -> int:
        return 0


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "reports", help="the processor's intake of attempt reports in-process: CPU µs per report"
    )
    p.add_argument("--reports", type=int, default=200_000, help="final reports (one per occurrence)")
    p.add_argument("--started", action="store_true",
                   help="send a STARTED report before each final one (pool handlers); default: final only")
    p.add_argument("--batch", type=_rounds, default=1, metavar="N",
                   help="reports per record: N > 1 sends them as AttemptReports records of N, as a worker "
                   "sends its fast handlers' final reports; default 1: a record each (pool handlers, "
                   "other languages' workers)")
    p.add_argument("--single-events", action="store_true",
                   help="write each occurrence event as its own record (the batch_events setting off), as "
                   "before OccurrenceEvents; default: a run's events in one record")
    p.add_argument("--rounds", type=_rounds, default=3,
                   help="runs of the whole intake, each on a fresh shard; the figure is their median")
    p.add_argument("--json", dest="json_file", default="bench-out/reports.json")
    p.set_defaults(handler=_run)


def _rounds(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rounds: give 1 or more, e.g. 3")
    return int(text)


def _fired_shard(n: int, due: int) -> tuple[Any, list[bytes]]:
    """A shard with ``n`` occurrences emitted at ``due``, and their encoded dispatch records."""
    from scheduler.processor import wire
    from scheduler.processor.heap import Heap
    from scheduler.processor.shard import Shard
    from scheduler.tenants import Tenant

    tenants = {_TENANT: Tenant(name=_TENANT, trigger_rate_per_s=0, max_schedules=10 * n)}
    shard = Shard(0, tenants, partitions=1)
    create(shard, n, due - 600)
    stamp = wire.dispatch_stamp(due * 1000)
    dispatched: list[bytes] = []
    with Heap.quiet():
        while True:
            out = shard.due(due, 20_000, float(due))
            if not out.dispatch:
                break
            dispatched.extend(wire.encode_dispatch(occ, stamp) for occ in out.dispatch)
    return shard, dispatched


def _reports(dispatched: list[bytes], started: bool) -> list[bytes]:
    """The reports a worker sends for ``dispatched``, by its own reader and encoder."""
    from scheduler.records.worker_scan import scan_occurrence
    from scheduler.vocabulary import AttemptReportKind
    from scheduler.worker.reports import Reporter, now_ms

    reporter = Reporter(None, "", "worker-bench-0123456789")  # type: ignore[arg-type]  # build() only
    out: list[bytes] = []
    for value in dispatched:
        scanned = scan_occurrence(value)
        assert scanned is not None, "the worker's scanner must read the processor's dispatch record"
        occ, ident = scanned[0], value[10:scanned[1]]
        token = secrets.token_hex(16)
        started_ms = now_ms()
        if started:
            out.append(reporter.build(occ, token, AttemptReportKind.STARTED, ident=ident))
        out.append(reporter.build(occ, token, AttemptReportKind.SUCCEEDED, started_at_ms=started_ms,
                                  ident=ident))
    return out


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import Message, TopicPartition

    from scheduler.bench.common import report, speed_probe_us
    from scheduler.history.readers import events_fields
    from scheduler.processor.checkpoint import Checkpoints
    from scheduler.processor.heap import Heap
    from scheduler.processor.inbox import Inbox
    from scheduler.processor.lifecycle import apply, succeeded_intake
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.ownership import OwnedShard
    from scheduler.processor.runtime import POLL_BATCH
    from scheduler.records.report import batch_value
    from scheduler.records.report_scan import scan, scan_batch
    from scheduler.settings import load_settings
    from scheduler.topology import topic_name

    n = args.reports
    due = 1_800_000_000 - (1_800_000_000 % 3600)
    now = due + 1
    settings = load_settings(env={}).replace(batch_events=not args.single_events)
    checkpoints = Checkpoints(settings, 1)
    topic = topic_name(settings, "commands", _TENANT)
    probe_before = speed_probe_us()
    runs: list[dict[str, Any]] = []
    # runs 0..rounds-1: Inbox.take_all as the runtime calls it; the last: its stages timed apart
    for r in range(args.rounds + 1):
        shard, dispatched = _fired_shard(n, due)
        reps = _reports(dispatched, args.started)
        raws = reps if args.batch == 1 else [batch_value(reps[i:i + args.batch])
                                             for i in range(0, len(reps), args.batch)]
        msgs = [Message(topic=topic, partition=0, offset=off, value=raw) for off, raw in enumerate(raws)]
        # as the runtime takes them: at most POLL_BATCH records a poll, one take_all each
        polls = [msgs[i:i + POLL_BATCH] for i in range(0, len(msgs), POLL_BATCH)]
        raw_polls = [raws[i:i + POLL_BATCH] for i in range(0, len(raws), POLL_BATCH)]
        producer = _CountingProducer(checkpoints.topics.of("occurrence-events", _TENANT))
        owned = OwnedShard(shard=shard, producer=producer,  # type: ignore[arg-type]
                           partition=TopicPartition(topic, 0))
        cp = checkpoints.open(owned, msgs, float(now), lambda _name: None)  # type: ignore[arg-type]
        cp.begin()
        metrics = ProcessorMetrics()
        inbox = Inbox({_TENANT: shard.tenants[_TENANT]}, metrics, checkpoints.topics)
        _trim()
        gc.freeze()
        run: dict[str, Any] = {"producer": producer, "metrics": metrics, "cp": cp}
        # The cyclic GC is off during a poll's ticks and on between polls, as in the runtime.
        if r < args.rounds:
            bugs = 0
            t0 = time.thread_time()
            for b in polls:
                with Heap.quiet():
                    bugs += inbox.take_all(shard, cp, b, now)
            run["total_s"] = time.thread_time() - t0
            run["bugs"] = bugs
        else:  # the stages Inbox.take_all chains, each over a poll's records, timed apart
            stages = dict.fromkeys(_STAGES, 0.0)
            bugs = 0
            for raw_poll in raw_polls:
                with Heap.quiet():
                    t0 = time.thread_time()
                    scanned: list[Any] = ([scan(raw) for raw in raw_poll] if args.batch == 1 else
                                          [r for raw in raw_poll for r in scan_batch(raw) or (None,)])
                    t1 = time.thread_time()
                    events: list[Any] = []
                    dead: list[Any] = []
                    intake = succeeded_intake(shard, now, events)  # as the inbox does: apply what it leaves
                    read = [r for r in scanned if r is not None]
                    why, i = [], 0
                    while (i := intake.run(read, i, _TENANT)) < len(read):
                        r = read[i]
                        why.append(apply(shard, r[7], r[0], r[1], r[2], r[3], r[4] // 1000, r[5], r[6], r[8],
                                         r[9], r[10], now, events, dead))
                        i += 1
                    t2 = time.thread_time()
                    cp.lifecycle(events, dead, now)
                    t3 = time.thread_time()
                for k, dt in zip(_STAGES, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                    stages[k] += dt
                bugs += sum(r is None for r in scanned) + sum(r is not None for r in why)
            run.update(stages, bugs=bugs)
        gc.unfreeze()
        runs.append(run)
    *wholes, staged = runs
    sent = len(reps)  # reports, in len(raws) records
    events_topic = checkpoints.topics.of("occurrence-events", _TENANT)
    ignored = [_total(w["metrics"], "ksched_attempt_reports_ignored_total") for w in wholes]
    applied = [_total(w["metrics"], "ksched_attempt_reports_total") - i
               for w, i in zip(wholes, ignored, strict=True)]
    done = [w["cp"].events.get((_TENANT, "SUCCEEDED"), 0) for w in wholes]
    per_report = [1e6 * w["total_s"] / max(1, sent) for w in wholes]
    median = statistics.median(per_report)
    fig = {
        "reports": sent,
        "records": len(raws),
        "batch": args.batch,
        "occurrences": n,
        "started": bool(args.started),
        "applied": min(applied),
        "ignored": max(ignored),
        "succeeded_events": min(done),
        "events_produced": min(sum(len(events_fields(v)) for v in w["producer"].values) for w in wholes),
        "event_records": min(w["producer"].counts.get(events_topic, 0) for w in wholes),
        "single_events": not settings.batch_events,
        "cpu_us_per_report": median,
        "cpu_us_per_report_rounds": [round(x, 3) for x in per_report],
        "scan_cpu_us_per_report": 1e6 * staged["scan_s"] / max(1, sent),
        "apply_cpu_us_per_report": 1e6 * staged["apply_s"] / max(1, sent),
        "event_write_cpu_us_per_report": 1e6 * staged["write_s"] / max(1, sent),
        "staged_cpu_us_per_report": 1e6 * sum(staged[k] for k in _STAGES) / max(1, sent),
        "reports_per_cpu_s": 1e6 / max(1e-9, median),
        "speed_probe_us_before": probe_before,
        "speed_probe_us_after": speed_probe_us(),
    }
    report(fig, args.json_file)
    once = (min(applied) == max(applied) == sent and max(ignored) == 0 and min(done) == n
            and all(w["bugs"] == 0 for w in wholes) and staged["bugs"] == 0)
    return 0 if once else 1


def _total(metrics: Any, name: str) -> int:
    """The sum over the labelled children of counter ``name`` in the processor's registry."""
    return int(sum(s.value for fam in metrics.registry.collect() for s in fam.samples if s.name == name))
