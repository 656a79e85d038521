"""Prometheus metrics of the processor (DESIGN.md §6)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scheduler.processor.shard import Shard, TickOutput
from scheduler.vocabulary import Lane

_LANES = tuple(lane.name for lane in Lane)


def observe_many(h: Any, value: float, n: int) -> None:
    """``n`` observations of the same ``value`` on histogram child ``h``, in O(buckets).

    A burst emits hundreds of thousands of occurrences per tick that share one
    lag; calling ``observe`` for each would cost a lock round-trip apiece. This
    relies on prometheus-client's (pinned) child layout: per-bucket counts in
    ``_buckets`` and the sum in ``_sum``; a test checks it against ``observe``.
    """
    bounds = getattr(h, "_upper_bounds", None)
    if bounds is None or n <= 1:
        for _ in range(n):
            h.observe(value)
        return
    h._sum.inc(value * n)
    h._buckets[bisect_left(bounds, value)].inc(n)


LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 3600)


class ProcessorMetrics:
    """One registry per processor so tests can run several in one process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.schedule_lag = Histogram(
            "ksched_schedule_lag_seconds",
            "enqueued_at - scheduled_for of emitted occurrences",
            ["tenant", "lane"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.emitted = Counter("ksched_emitted_total", "occurrences emitted", ["tenant", "lane"], registry=r)
        self.missed = Counter("ksched_missed_total", "occurrences recorded MISSED", ["tenant"], registry=r)
        self.throttled = Counter(
            "ksched_throttled_total",
            "occurrences emitted later than due because of a tenant quota (each counted once)",
            ["tenant"],
            registry=r,
        )
        self.throttle_delay = Histogram(
            "ksched_throttle_delay_seconds",
            "how long a tenant quota delayed each throttled occurrence",
            ["tenant"],
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.rejected = Counter("ksched_rejected_total", "rejected commands", ["tenant", "code"], registry=r)
        self.reports = Counter("ksched_attempt_reports_total", "attempt reports seen", ["kind"], registry=r)
        self.reports_ignored = Counter(
            "ksched_attempt_reports_ignored_total",
            "reports of an attempt that is not the current one (duplicates, stale tokens)",
            ["kind"],
            registry=r,
        )
        self.lifecycle = Counter(
            "ksched_occurrences_total",
            "occurrences retried, dead or skipped for overlap",
            ["tenant", "state"],
            registry=r,
        )
        self.due_backlog = Gauge(
            "ksched_due_backlog", "occurrences due but not yet emitted", ["shard"], registry=r
        )
        self.watermark_lag_seconds = Gauge(
            "ksched_watermark_lag_seconds", "now - shard watermark", ["shard"], registry=r
        )
        self.restore_seconds = Gauge(
            "ksched_restore_seconds", "time until the shard was restored and ticking", ["shard"], registry=r
        )
        self.restore_wall_seconds = Counter(
            "ksched_restore_wall_seconds", "time spent restoring shards (all passes)", registry=r
        )
        self.transaction_seconds = Histogram(
            "ksched_transaction_seconds",
            "tick transaction time",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
            registry=r,
        )
        self.schedules = Gauge("ksched_schedules", "schedules held by the shard", ["shard"], registry=r)

    def observe_tick(self, shard: Shard, out: TickOutput, clock: float) -> None:
        p = str(shard.shard_id)
        if out.dispatch:
            # Group by (tenant, lane, scheduled_for): one lag value per group, observed per occurrence.
            groups: dict[tuple[str, str, int], int] = {}
            for occ in out.dispatch:
                k = (occ.tenant, _LANES[occ.lane], occ.scheduled_for)
                groups[k] = groups.get(k, 0) + 1
            for (tenant, lane, sf), n in groups.items():
                observe_many(self.schedule_lag.labels(tenant=tenant, lane=lane), max(0.0, clock - sf), n)
                self.emitted.labels(tenant=tenant, lane=lane).inc(n)
        for tenant, n in out.throttled.items():
            self.throttled.labels(tenant=tenant).inc(n)
        for tenant, delay in out.throttle_delays:
            self.throttle_delay.labels(tenant=tenant).observe(delay)
        self.watermark_lag_seconds.labels(shard=p).set(max(0.0, clock - shard.watermark()))
        self.due_backlog.labels(shard=p).set(shard.due_backlog(int(clock)))
        self.schedules.labels(shard=p).set(len(shard.entries))
