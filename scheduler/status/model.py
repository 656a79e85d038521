"""What ``ksched status`` shows and judges (pure: no Kafka; :mod:`scheduler.status.collect` fills it).

:func:`problems` is the verdict behind the exit code: a shard with no owner, or a shard whose
watermark lags the clock by more than :data:`WATERMARK_LAG_LIMIT_S` (every due occurrence of it is
late by at least that much: its tenants are past the 5 s lag SLO).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# A shard ticks every few hundred ms, so a healthy watermark trails the clock by well under a
# second; past this, its occurrences are late beyond the SLO (DESIGN.md §7: p99 <= 5 s).
WATERMARK_LAG_LIMIT_S = 10.0
# DESIGN.md §7: strict occurrences p99 <= 5 s after their scheduled time, judged over 5 minutes.
LAG_SLO_S = 5.0


@dataclass(frozen=True, kw_only=True)
class ProcessorView:
    """One member of the processors' consumer group and the shards it owns."""

    client_id: str
    host: str
    member_id: str
    shards: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class ShardView:
    """One shard: its owner (a processor's client id; None: unowned) and its last committed state."""

    shard: int
    owner: str | None
    watermark_ms: int | None  # None: no state written yet (never owned)
    updated_at_ms: int | None
    ticks: int = 0
    emitted: int = 0

    def watermark_lag_s(self, now_ms: int) -> float | None:
        return None if self.watermark_ms is None else max(0.0, (now_ms - self.watermark_ms) / 1000)

    def commit_age_s(self, now_ms: int) -> float | None:
        return None if self.updated_at_ms is None else max(0.0, (now_ms - self.updated_at_ms) / 1000)


@dataclass(frozen=True, kw_only=True)
class TenantView:
    """One registered tenant, in offsets: its dispatch topic's end, how far past its worker
    group's committed offsets that end is, its workers (the group's members), and its DLQ's span.

    Offsets count the transaction markers too (the processor writes transactionally): an idle,
    fully consumed tenant shows up to one per partition of ``worker_lag``; a growing lag is the
    signal, not its last digit.
    """

    name: str
    state: str
    dispatch_offsets: int
    worker_lag: int
    workers: int
    dlq_offsets: int


@dataclass(frozen=True, kw_only=True)
class TenantFigures:
    """A tenant's emitted, missed and throttled occurrences and its lag p99, summed over processors."""

    emitted: int = 0
    missed: int = 0
    throttled: int = 0
    lag_p99_s: float | None = None
    reconciled_to_s: float | None = None  # the end of the reconciler's last closed window (epoch s)
    gaps: int | None = None  # expected occurrences the reconciler found no record of (None: no reconciler)


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What the processors of one namespace report: per shard the occurrences due within a minute
    and an hour, the restores in progress (shard -> start, epoch seconds), and per tenant."""

    endpoints: int = 0
    due_1m: dict[int, int] = field(default_factory=dict)
    due_1h: dict[int, int] = field(default_factory=dict)
    restoring_since: dict[int, float] = field(default_factory=dict)
    tenants: dict[str, TenantFigures] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class StatusView:
    bootstrap: str
    namespace: str
    brokers: tuple[str, ...]
    processors: tuple[ProcessorView, ...]
    shards: tuple[ShardView, ...]
    tenants: tuple[TenantView, ...]
    taken_at_ms: int
    prometheus: str = ""  # where the metrics and alerts are (setting prometheus_url)
    figures: Figures = field(default_factory=lambda: Figures())  # the processors' own /metrics
    # Each tenant's strict lag p99 over the last 5 minutes, from Prometheus; None: it did not answer.
    lag_p99_5m: dict[str, float] | None = None


def problems(view: StatusView) -> list[str]:
    """Why the cluster is not healthy, one line each naming the shard and the fix; [] if healthy."""
    out: list[str] = []
    now = view.taken_at_ms
    for s in view.shards:
        if s.owner is None:
            out.append(f"shard {s.shard} has no owner: its occurrences are not emitted; start a processor "
                       "(`ksched processor`) or see why the running ones left the group")
            continue
        lag = s.watermark_lag_s(now)
        if lag is not None and lag > WATERMARK_LAG_LIMIT_S:
            out.append(f"shard {s.shard} (owner {s.owner}) is {lag:.1f} s behind the clock (limit "
                       f"{WATERMARK_LAG_LIMIT_S:g} s): its occurrences are late; check the processor's "
                       "load and logs")
    for tenant, lag in sorted((view.lag_p99_5m or {}).items()):
        if lag > LAG_SLO_S:
            out.append(f"tenant {tenant}: strict lag p99 over the last 5 minutes is {lag:.1f} s (SLO "
                       f"{LAG_SLO_S:g} s): check the shards' watermark lag above, the processors' load, "
                       "and whether the tenant is throttled by its quota")
    return out


def to_json(view: StatusView) -> dict[str, Any]:
    """The view as JSON-ready data, with each shard's lags and the problems."""
    data = asdict(view)
    for shard, raw in zip(view.shards, data["shards"], strict=True):
        raw["watermark_lag_s"] = shard.watermark_lag_s(view.taken_at_ms)
        raw["commit_age_s"] = shard.commit_age_s(view.taken_at_ms)
    data["problems"] = problems(view)
    return data
