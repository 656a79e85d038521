"""Prometheus metrics of ``ksched reconcile --watch`` (DESIGN.md §6), in its own registry.

Base units, ``_total`` counters, no labels but the tenant (one watch reconciles one tenant).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge

from scheduler.reconcile.account import DUPLICATE, GAP, UNEXPECTED
from scheduler.reconcile.run import Outcome


class ReconcileMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        t = ["tenant"]
        self.expected = Counter("ksched_reconcile_expected_total",
                                "expected occurrences of the closed windows reconciled", t, registry=r)
        self.gaps = Counter("ksched_reconcile_gaps_total", "expected occurrences with no record", t,
                            registry=r)
        self.unexpected = Counter("ksched_reconcile_unexpected_total",
                                  "records no expected occurrence explains", t, registry=r)
        self.duplicates = Counter("ksched_reconcile_duplicates_total",
                                  "occurrences dispatched twice or with two effects", t, registry=r)
        self.last_closed = Gauge("ksched_reconcile_last_window_end_timestamp_seconds",
                                 "end of the last closed window reconciled (epoch s)", ["tenant"], registry=r)
        self.age = Gauge("ksched_reconcile_last_window_age_seconds",
                         "seconds since the end of the last closed window reconciled", ["tenant"], registry=r)

    def observe(self, tenant: str, o: Outcome) -> None:
        v = o.verdict
        self.expected.labels(tenant).inc(v.expected)
        self.gaps.labels(tenant).inc(v.count(GAP))
        self.unexpected.labels(tenant).inc(v.count(UNEXPECTED))
        self.duplicates.labels(tenant).inc(v.count(DUPLICATE))
        self.last_closed.labels(tenant).set(o.window.t2)
        self.age.labels(tenant).set_function(lambda: _age(o.window.t2))  # type: ignore[no-untyped-call]


def _age(t2: int) -> float:
    return max(0.0, time.time() - t2)
