"""``ksched status``'s reading of the processors' /metrics (pure): the real processor metrics
objects are filled with known values, exposed as Prometheus would scrape them, and read back."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from scheduler.metrics_endpoint import PROCESS_INFO
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.reconcile.metrics import ReconcileMetrics
from scheduler.status.scrape import figures, targets


def _exposition(namespace: str, lags: list[float], tenant: str = "acme") -> tuple[str, ProcessorMetrics]:
    registry = CollectorRegistry()
    info = Gauge(PROCESS_INFO, "info", ["namespace", "role"], registry=registry)
    info.labels(namespace, "ksched-processor").set(1)
    m = ProcessorMetrics(registry)
    for v in lags:
        m.schedule_lag.labels(tenant=tenant, lane="STRICT").observe(v)
    m.emitted.labels(tenant=tenant, lane="STRICT").inc(len(lags))
    m.missed.labels(tenant=tenant).inc(2)
    m.throttled.labels(tenant=tenant).inc(3)
    m.upcoming.labels(shard="1", within="1m").set(7)
    m.upcoming.labels(shard="1", within="1h").set(70)
    m.restore_started.labels(shard="2").set(1_900_000_000.5)
    return generate_latest(registry).decode(), m


def test_figures_sum_the_namespace_processors_and_ignore_others() -> None:
    mine, _ = _exposition("ns", [0.05] * 99 + [3.0])
    also_mine, _ = _exposition("ns", [0.05] * 100)
    other, _ = _exposition("elsewhere", [60.0] * 100)
    f = figures([mine, also_mine, other, "# not a ksched process\nup 1\n"], "ns")
    assert f.endpoints == 2
    t = f.tenants["acme"]
    assert (t.emitted, t.missed, t.throttled) == (200, 4, 6)
    assert t.lag_p99_s is not None and t.lag_p99_s <= 0.1  # 2 of 200 late: p99 is in the fast bucket
    assert f.due_1m == {1: 7} and f.due_1h == {1: 70}
    assert f.restoring_since == {2: 1_900_000_000.5}


def test_lag_p99_interpolates_like_histogram_quantile() -> None:
    text, _ = _exposition("ns", [4.0] * 100)  # all in the (3, 5] bucket of LAG_BUCKETS
    p99 = figures([text], "ns").tenants["acme"].lag_p99_s
    # Prometheus' histogram_quantile: lower + (upper - lower) * (rank - below) / (count - below)
    assert p99 is not None and abs(p99 - (3 + (5 - 3) * 99 / 100)) < 1e-9


def test_no_observation_is_no_figure_and_a_missing_folder_no_target(tmp_path: Path) -> None:
    text, _ = _exposition("ns", [])
    assert figures([text], "ns").tenants["acme"].lag_p99_s is None
    assert targets(tmp_path / "absent") == []


def test_the_reconcilers_window_and_gaps_are_read_per_tenant() -> None:
    registry = CollectorRegistry()
    info = Gauge(PROCESS_INFO, "info", ["namespace", "role"], registry=registry)
    info.labels("ns", "ksched-reconcile").set(1)
    m = ReconcileMetrics(registry)
    m.last_closed.labels(tenant="acme").set(1_900_000_060)
    m.gaps.labels(tenant="acme").inc(3)
    m.last_closed.labels(tenant="quiet").set(1_900_000_000)
    m.gaps.labels(tenant="quiet")  # a series at 0
    processor, _ = _exposition("ns", [0.05])
    f = figures([generate_latest(registry).decode(), processor], "ns")
    assert f.endpoints == 1  # processors only: the reconciler is not one
    assert (f.tenants["acme"].reconciled_to_s, f.tenants["acme"].gaps) == (1_900_000_060, 3)
    assert (f.tenants["quiet"].reconciled_to_s, f.tenants["quiet"].gaps) == (1_900_000_000, 0)
    assert f.tenants["acme"].emitted == 1
