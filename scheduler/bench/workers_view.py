"""``ksched bench workers``: what it samples while it runs (the workers' CPU, the processor's report
backlog) and the PNG it draws."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class Sampler:
    """Every second: the workers' CPU seconds (kept for killed ones), the processor's report
    backlog and the occurrences succeeded. The backlog counts reports, not records (a worker
    sends a fast batch's final reports as one ``AttemptReports`` record): the reports the bench
    read on the commands topic less those the processor took (its ``ksched_attempt_reports_total``,
    from its /metrics on ``metrics_port``)."""

    def __init__(self, settings: Any, topic: str, group: Any, metrics_port: int) -> None:
        from confluent_kafka import TopicPartition

        self.group = group  # a consumer in the processor's group, never subscribed: committed() only
        self.tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        self.metrics_port = metrics_port
        self.cpu: dict[int, float] = {}
        self.over_time: list[tuple[float, int, int]] = []  # (monotonic, succeeded, backlog in reports)
        # What the processor had taken when the bench stopped it (--held): a stopped process
        # cannot answer, and takes nothing more until it is resumed (then None again).
        self.stopped_at_taken: int | None = None
        self._next = 0.0

    def taken(self) -> int | None:
        """The reports the processor has taken so far (applied or ignored); None: no answer."""
        from scheduler.bench.common import counter_total

        if self.stopped_at_taken is not None:
            return self.stopped_at_taken
        total = counter_total(self.metrics_port, "ksched_attempt_reports_total")
        return None if total is None else int(total)

    def sample(self, workers: list[subprocess.Popen[bytes]], succeeded: int, read: int, *,
               force: bool = False) -> None:
        """``read``: the reports the bench has read on the commands topic so far."""
        import psutil

        now = time.monotonic()
        if now < self._next and not force:
            return
        self._next = now + 1.0
        for w in workers:
            try:
                t = psutil.Process(w.pid).cpu_times()
                self.cpu[w.pid] = t.user + t.system
            except psutil.Error:
                pass
        taken = self.taken()
        if taken is not None:  # None: a loaded processor; this point is missing from the plot
            self.over_time.append((now, succeeded, max(0, read - taken)))

    def backlog(self, highs: list[int] | None = None) -> int | None:
        """The commands records past the processor group's committed offsets; None when the
        broker did not answer (the reason printed). ``highs``: the partitions' end offsets when
        they are known not to move (:meth:`highs`): one request to the broker, not one a partition."""
        from confluent_kafka import KafkaException

        backlog = 0
        try:
            for i, tp in enumerate(self.group.committed(self.tps, timeout=5)):
                high = highs[i] if highs is not None else self.group.get_watermark_offsets(tp, timeout=5)[1]
                backlog += max(0, high - max(tp.offset, 0))
        except KafkaException as exc:
            print(f"backlog sample skipped: {exc}", file=sys.stderr)
            return None
        return backlog

    def highs(self) -> list[int]:
        """The commands partitions' end offsets now."""
        return [self.group.get_watermark_offsets(tp, timeout=10)[1] for tp in self.tps]


def plot(
    over_time: list[tuple[float, int, int]],
    t0: float,
    curves: dict[str, list[float]],
    second_after_s: float | None,
    path: Path,
) -> None:
    from scheduler.bench.common import pyplot
    from scheduler.bench.workers_load import pct

    plt = pyplot()
    if plt is None:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = [t - t0 for t, _, _ in over_time]
    rates = [0.0] + [
        (s1 - s0) / (t1 - t0_) for (t0_, s0, _), (t1, s1, _) in itertools.pairwise(over_time)
    ]
    a.plot(xs, rates, label="occurrences succeeded /s")
    for at in [0.0] + ([second_after_s] if second_after_s is not None else []):
        a.axvline(at, color="grey", linestyle=":")
    a.set_xlabel("seconds after the (first) due instant")
    a.set_ylabel("occurrences / s")
    a2 = a.twinx()
    a2.plot(xs, [bl for _, _, bl in over_time], color="tab:red", label="processor report backlog")
    a2.set_ylabel("report backlog (reports)", color="tab:red")
    a.set_title("worker throughput and the processor's report backlog")
    for label, vals in curves.items():
        if vals:
            step = max(1, len(vals) // 20_000)
            p50, p99 = pct(vals, 0.5), pct(vals, 0.99)
            b.plot(vals[::step], [i / len(vals) for i in range(0, len(vals), step)],
                   label=f"{label}: p50 {p50:.1f}s, p99 {p99:.1f}s")
    b.set_xscale("symlog", linthresh=1.0)
    b.set_title("lag CDF (from scheduled_for)")
    b.legend(fontsize=7, loc="lower right")
    b.set_xlabel("seconds")
    b.set_ylabel("fraction")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
