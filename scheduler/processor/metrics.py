"""Prometheus metrics of the processor (DESIGN.md §6)."""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections import Counter as CountOf
from collections.abc import Iterator, Mapping
from operator import itemgetter
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.processor.model import DueOccurrence
from scheduler.processor.shard import Shard, TickOutput
from scheduler.tenants import QUOTAS, Tenant
from scheduler.vocabulary import Lane

_LANES = tuple(lane.name for lane in Lane)
_LAG_GROUP = itemgetter(*(DueOccurrence._fields.index(f) for f in ("tenant", "lane", "scheduled_for")))


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


#: ``ksched_upcoming_occurrences``' ``within`` label: seconds ahead of now (the pending-per-bucket view).
UPCOMING = (("1m", 60), ("1h", 3600))
_UPCOMING_EVERY_S = 1.0  # the count walks every bucket of the shard: once a second per shard at most


class ProcessorMetrics:
    """One registry per processor so tests can run several in one process. Every metric name of the
    processor is here (docs/operations.md lists them); ``shard`` labels are partition numbers."""

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
        self.reports = Counter(
            "ksched_attempt_reports_total", "attempt reports seen, by the commands topic's tenant",
            ["tenant", "kind"], registry=r,
        )
        self.reports_ignored = Counter(
            "ksched_attempt_reports_ignored_total",
            "reports of an attempt that is not the current one (duplicate claims, stale tokens)",
            ["tenant", "kind"],
            registry=r,
        )
        self.lifecycle = Counter(
            "ksched_occurrences_total",
            "occurrences retried, dead (to the DLQ) or skipped for overlap",
            ["tenant", "state"],
            registry=r,
        )
        self.due_backlog = Gauge(
            "ksched_due_backlog", "occurrences due but not yet emitted", ["shard"], registry=r
        )
        self.upcoming = Gauge(
            "ksched_upcoming_occurrences",
            "occurrences due within the next minute / hour and not yet emitted (backlog included)",
            ["shard", "within"],
            registry=r,
        )
        self.watermark_lag_seconds = Gauge(
            "ksched_watermark_lag_seconds", "now - shard watermark, at the shard's last tick", ["shard"],
            registry=r,
        )
        self.watermark = Gauge(
            "ksched_watermark_timestamp_seconds",
            "the shard watermark (epoch s): every occurrence available by then has its fate",
            ["shard"],
            registry=r,
        )
        self.shards = Gauge(
            "ksched_shards", "shards of the cluster (partitions of the shards topic)", registry=r
        )
        self.owned = Gauge(
            "ksched_shard_owned", "1 for each shard this processor owns", ["shard"], registry=r
        )
        self.restore_started = Gauge(
            "ksched_restore_started_timestamp_seconds",
            "when the restore of a shard being restored now began (absent when none is)",
            ["shard"],
            registry=r,
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
        self.clock_offset = Gauge(
            "ksched_clock_offset_seconds",
            "broker clock - this host's clock, from a dispatch record's LogAppendTime",
            registry=r,
        )
        self.clock_offset_error = Gauge(
            "ksched_clock_offset_uncertainty_seconds",
            "half the produce round trip of that record: the offset is exact within this",
            registry=r,
        )
        self._upcoming_at: dict[str, float] = {}

    def ignored(self, kind: str) -> float:
        """Reports of ``kind`` ignored so far, over every tenant (for tests and status)."""
        return sum(
            sample.value
            for metric in self.reports_ignored.collect()
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.labels.get("kind") == kind
        )

    # -- ownership ------------------------------------------------------------------
    def restore_began(self, shards: list[int], wall: float) -> None:
        for p in shards:
            self.restore_started.labels(shard=str(p)).set(wall)

    def restore_done(self, p: int, elapsed: float) -> None:
        s = str(p)
        self.restore_seconds.labels(shard=s).set(elapsed)
        _remove(self.restore_started, s)
        self.owned.labels(shard=s).set(1)

    def shard_dropped(self, p: int) -> None:
        """Shard ``p`` is no longer ours: its per-shard series go (another owner exports them), or a
        stalled-watermark alert would fire on a copy that no longer ticks."""
        s = str(p)
        for g in (self.owned, self.restore_started, self.watermark, self.watermark_lag_seconds,
                  self.due_backlog, self.schedules):
            _remove(g, s)
        for within, _ in UPCOMING:
            _remove(self.upcoming, s, within)
        self._upcoming_at.pop(s, None)

    def clock_sample(self, offset: float, uncertainty: float) -> None:
        self.clock_offset.set(offset)
        self.clock_offset_error.set(uncertainty)

    # -- ticks ----------------------------------------------------------------------
    def observe_tick(self, shard: Shard, out: TickOutput, clock: float) -> None:
        p = str(shard.shard_id)
        if out.dispatch:
            # Group by (tenant, lane, scheduled_for): one lag value per group, observed per occurrence.
            # Counted in C (a burst's tick has 20,000: a dict update per occurrence in Python was
            # 0.3 µs of the main thread's ~4 µs per dispatch, py-spy in docs/performance.md).
            groups = CountOf(map(_LAG_GROUP, out.dispatch))
            for (tenant, lane, sf), n in groups.items():
                labels = {"tenant": tenant, "lane": _LANES[lane]}
                observe_many(self.schedule_lag.labels(**labels), max(0.0, clock - sf), n)
                self.emitted.labels(**labels).inc(n)
        for tenant, n in out.throttled.items():
            self.throttled.labels(tenant=tenant).inc(n)
        for tenant, delay in out.throttle_delays:
            self.throttle_delay.labels(tenant=tenant).observe(delay)
        wm = shard.watermark()
        self.watermark.labels(shard=p).set(wm)
        self.watermark_lag_seconds.labels(shard=p).set(max(0.0, clock - wm))
        self.due_backlog.labels(shard=p).set(shard.due_backlog(int(clock)))
        self.schedules.labels(shard=p).set(len(shard.entries))
        if clock - self._upcoming_at.get(p, 0.0) >= _UPCOMING_EVERY_S:
            self._upcoming_at[p] = clock
            counts = shard.upcoming(int(clock), tuple(h for _, h in UPCOMING))
            for (within, _), n in zip(UPCOMING, counts, strict=True):
                self.upcoming.labels(shard=p, within=within).set(n)


class TenantQuotas(Collector):
    """``ksched_tenant_quota{tenant, quota}``: each registered tenant's quotas, read from the live
    registry at scrape time (the dashboard's "emission vs quota"). Labels are bounded: the
    registry's tenants and the quota field names, whose suffix is the unit (_per_s, _per_min, a count)."""

    def __init__(self, tenants: Mapping[str, Tenant]) -> None:
        self.tenants = tenants

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "ksched_tenant_quota",
            "a tenant's quota from the registry, in the unit its name ends with; 0: no limit",
            labels=["tenant", "quota"],
        )
        for name, tenant in list(self.tenants.items()):  # a copy: the registry thread replaces entries
            for quota in QUOTAS:
                family.add_metric([name, quota], float(getattr(tenant, quota)))
        yield family


def _remove(metric: Any, *labels: str) -> None:
    """Drop one labelled series (absent already: nothing to do)."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
