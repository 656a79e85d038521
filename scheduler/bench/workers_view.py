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
    backlog (commands records past its group's committed offsets) and the occurrences succeeded."""

    def __init__(self, settings: Any, topic: str, group: Any) -> None:
        from confluent_kafka import TopicPartition

        self.group = group  # a consumer in the processor's group, never subscribed: committed() only
        self.tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
        self.cpu: dict[int, float] = {}
        self.over_time: list[tuple[float, int, int]] = []  # (monotonic, succeeded, backlog)
        self._next = 0.0

    def sample(self, workers: list[subprocess.Popen[bytes]], succeeded: int, *, force: bool = False) -> None:
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
        backlog = self.backlog()
        if backlog is not None:  # None: a loaded broker; this point is missing from the plot
            self.over_time.append((now, succeeded, backlog))

    def backlog(self) -> int | None:
        """The commands records past the processor group's committed offsets; None when the
        broker did not answer (the reason printed)."""
        from confluent_kafka import KafkaException

        backlog = 0
        try:
            for tp in self.group.committed(self.tps, timeout=5):
                _, high = self.group.get_watermark_offsets(tp, timeout=5)
                backlog += max(0, high - max(tp.offset, 0))
        except KafkaException as exc:
            print(f"backlog sample skipped: {exc}", file=sys.stderr)
            return None
        return backlog


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
    a2.set_ylabel("report backlog (records)", color="tab:red")
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
