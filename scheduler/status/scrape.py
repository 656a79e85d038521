"""The processors' own figures for ``ksched status``: their /metrics, found where they register.

Every process that serves metrics registers its endpoint in the discovery folder
(:mod:`scheduler.metrics_endpoint`) with a ``ksched_process_info{namespace, role}`` gauge, so
status scrapes the processors of *its* namespace only -- no side channel, the same exposition
Prometheus reads. Counters and the lag histogram are cumulative since each process started
(the window of a one-shot reading); Prometheus holds the rates over time.

Pure parsing (:func:`figures`) is separate from the HTTP (:func:`scrape`).
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from scheduler.metrics_endpoint import PROCESS_INFO, sweep
from scheduler.status.model import Figures, TenantFigures

PROCESSOR_ROLE = "ksched-processor"
RECONCILE_ROLE = "ksched-reconcile"  # `ksched reconcile --watch`: its windows and gaps per tenant


def targets(folder: Path) -> list[str]:
    """The addresses (``host:port``) of the live processes registered in ``folder``."""
    if not folder.is_dir():
        return []
    sweep(folder)
    out: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            for group in json.loads(path.read_text()):
                out.extend(str(t) for t in group.get("targets", []))
        except (OSError, ValueError, AttributeError):
            continue  # a file being replaced: the next reading sees it
    return out


def scrape(folder: Path, namespace: str, timeout_s: float = 2.0) -> Figures:
    """The figures of ``namespace``'s processors registered in ``folder`` (unreachable ones skipped)."""
    texts = []
    for address in targets(folder):
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as resp:
                texts.append(resp.read().decode())
        except OSError:
            continue  # gone since it registered, or not ours to reach
    return figures(texts, namespace)


def _quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile of a cumulative histogram (``le`` -> count), as Prometheus'
    ``histogram_quantile`` interpolates it; None without observations."""
    ordered = sorted(buckets.items())
    total = ordered[-1][1] if ordered else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower  # in the +Inf bucket: the highest finite bound, as Prometheus says
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    return lower


def figures(texts: Iterable[str], namespace: str) -> Figures:
    """Sum the expositions of ``namespace``'s processors and reconcilers among ``texts`` (others are
    ignored)."""
    due_1m: dict[int, int] = {}
    due_1h: dict[int, int] = {}
    restoring: dict[int, float] = {}
    counts: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lag: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    reconciled: dict[str, float] = {}
    gaps: dict[str, float] = defaultdict(float)
    endpoints = 0
    for text in texts:
        samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
        role = next((s.labels.get("role") for s in samples
                     if s.name == PROCESS_INFO and s.labels.get("namespace") == namespace), None)
        if role == RECONCILE_ROLE:
            for s in samples:
                if s.name == "ksched_reconcile_last_window_end_timestamp_seconds":
                    t = s.labels["tenant"]
                    reconciled[t] = max(reconciled.get(t, 0.0), s.value)
                elif s.name == "ksched_reconcile_gaps_total":
                    gaps[s.labels["tenant"]] += s.value
            continue
        if role != PROCESSOR_ROLE:
            continue
        endpoints += 1
        for s in samples:
            labels = s.labels
            if s.name == "ksched_upcoming_occurrences":
                shard = int(labels["shard"])
                (due_1m if labels.get("within") == "1m" else due_1h)[shard] = int(s.value)
            elif s.name == "ksched_restore_started_timestamp_seconds":
                restoring[int(labels["shard"])] = s.value
            elif s.name in ("ksched_emitted_total", "ksched_missed_total", "ksched_throttled_total"):
                counts[labels["tenant"]][s.name] += s.value
            elif s.name == "ksched_schedule_lag_seconds_bucket":
                lag[labels["tenant"]][float(labels["le"])] += s.value
    tenants = {
        t: TenantFigures(
            emitted=int(counts[t]["ksched_emitted_total"]), missed=int(counts[t]["ksched_missed_total"]),
            throttled=int(counts[t]["ksched_throttled_total"]), lag_p99_s=_quantile(0.99, lag[t]),
            reconciled_to_s=reconciled.get(t), gaps=int(gaps[t]) if t in gaps or t in reconciled else None,
        )
        for t in sorted(set(counts) | set(lag) | set(reconciled) | set(gaps))
    }
    return Figures(endpoints=endpoints, due_1m=due_1m, due_1h=due_1h, restoring_since=restoring,
                   tenants=tenants)


def lag_p99_query(namespace: str, window: str = "5m") -> str:
    """PromQL: each tenant's strict-lane lag p99 over ``window``, from ``namespace``'s processors
    only (joined on their ``ksched_process_info``)."""
    info = f'{PROCESS_INFO}{{namespace="{namespace}",role="{PROCESSOR_ROLE}"}}'
    rate = f'rate(ksched_schedule_lag_seconds_bucket{{lane="STRICT"}}[{window}])'
    return f"histogram_quantile(0.99, sum by (tenant, le) ({rate} * on(instance) group_left() {info}))"


def windowed_lag_p99(prometheus_url: str, namespace: str, timeout_s: float = 2.0) -> dict[str, float] | None:
    """Each tenant's strict lag p99 over the last 5 minutes, asked of Prometheus; None when it does
    not answer (no window to judge: status then says so). Tenants without emissions are absent."""
    query = urllib.parse.urlencode({"query": lag_p99_query(namespace)})
    try:
        with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?{query}", timeout=timeout_s) as resp:
            data = json.load(resp)
    except (OSError, ValueError):
        return None
    if data.get("status") != "success":
        raise ValueError(f"Prometheus refused the lag query: {data.get('error', data)}")
    out = {}
    for r in data["data"]["result"]:
        value = float(r["value"][1])
        if not math.isnan(value):
            out[str(r["metric"].get("tenant", ""))] = value
    return out
