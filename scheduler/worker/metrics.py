"""Prometheus metrics of a worker (DESIGN.md §6), in the worker's own registry.

One registry per :class:`~scheduler.worker.Worker` so that several workers
(tests, or one process serving several tenants) never collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    """``outcome`` is one of succeeded, retryable, permanent, canceled, unknown_handler."""

    def __init__(self, tenant: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.tenant = tenant
        self.handled = Counter(
            "ksched_worker_handled_total", "occurrences finished, by outcome", ["tenant", "outcome"],
            registry=r,
        )
        self.malformed = Counter(
            "ksched_worker_malformed_total",
            "undecodable or foreign records skipped",
            ["tenant", "topic"],
            registry=r,
        )
        self.canceled = Counter(
            "ksched_worker_canceled_total",
            "occurrences reported CANCELED (not run, or stopped cooperatively)",
            ["tenant", "reason"],
            registry=r,
        )
        self.in_flight = Gauge(
            "ksched_worker_in_flight", "handlers running or queued to run", ["tenant"], registry=r
        )
        self.handler_seconds = Histogram(
            "ksched_worker_handler_seconds",
            "handler wall time",
            ["tenant"],
            buckets=(0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120, 600, 3600),
            registry=r,
        )
        self.lag_seconds = Histogram(
            "ksched_worker_start_lag_seconds",
            "handler start - scheduled_for",
            ["tenant"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.commits = Counter("ksched_worker_commits_total", "offset commits", ["tenant"], registry=r)
        self.paused = Counter(
            "ksched_worker_paused_total", "times consumption paused at the concurrency limit", ["tenant"],
            registry=r,
        )

    def outcome(self, label: str) -> None:
        self.handled.labels(tenant=self.tenant, outcome=label).inc()

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and status output."""
        v = self.registry.get_sample_value(name, {"tenant": self.tenant, **labels})
        return 0.0 if v is None else v


def observe_many(child: Histogram, amount: float, n: int) -> None:
    """``child.observe(amount)`` ``n`` times, in one step: a fast batch observes the start lag of
    thousands of occurrences that share a few ``scheduled_for`` instants, and ``observe`` takes a
    lock per call. prometheus-client has no such method: this does what ``observe`` does (sum,
    then the first bucket whose bound holds ``amount``) with ``n`` (pinned against ``observe`` in
    tests/test_worker_units.py, so a client upgrade that changes it fails there)."""
    child._sum.inc(amount * n)
    for i, bound in enumerate(child._upper_bounds):
        if amount <= bound:
            child._buckets[i].inc(n)
            break
