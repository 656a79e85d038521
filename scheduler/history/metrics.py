"""Prometheus metrics of a history indexer (DESIGN.md §6), in the indexer's own registry.

Base units, ``_total`` counters, bounded labels: ``reason`` is one of the skip reasons of
:mod:`scheduler.history.mapping` (a handful), never a topic or a tenant.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class HistoryMetrics:
    """Observed on the writer's thread after each committed batch (prometheus_client is thread-safe)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.records = Counter("ksched_history_records_total", "records indexed (committed)", registry=r)
        self.skipped = Counter(
            "ksched_history_skipped_total", "records skipped, by reason", ["reason"], registry=r
        )
        self.batches = Counter("ksched_history_batches_total", "batches committed", registry=r)
        self.rows = Counter(
            "ksched_history_rows_written_total", "row upserts sent, by table", ["table"], registry=r
        )
        self.batch_seconds = Histogram(
            "ksched_history_batch_seconds", "time to apply one batch (one transaction)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r,
        )
        self.last_commit = Gauge(
            "ksched_history_last_commit_timestamp_seconds", "wall time of the last committed batch",
            registry=r,
        )
