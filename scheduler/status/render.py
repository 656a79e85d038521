"""``ksched status`` on one screen (rich)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from scheduler.status.model import StatusView, problems


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def render(view: StatusView) -> Group:
    now = view.taken_at_ms
    head = Text(f"ksched {view.namespace} on {view.bootstrap} — brokers: {', '.join(view.brokers) or 'none'}")
    if view.prometheus:
        head.append(f"\nmetrics and alerts: {view.prometheus}/alerts (setting prometheus_url)")
        if view.lag_p99_5m is None:
            head.append(" — not answering: the 5-minute lag p99 is not judged")
    procs = Table(title="processors (group members)", title_justify="left")
    for col in ("client id", "host", "shards"):
        procs.add_column(col)
    for p in view.processors:
        procs.add_row(p.client_id, p.host, ", ".join(map(str, p.shards)) or "none")
    f = view.figures
    shards = Table(title=f"shards (due and restores: {f.endpoints} processor endpoint(s) read)",
                   title_justify="left")
    for col in ("shard", "owner", "watermark lag s", "last commit s ago", "ticks", "emitted", "due 1m",
                "due 1h", "restoring s"):
        shards.add_column(col, justify="right" if col != "owner" else "left")
    for s in view.shards:
        since = f.restoring_since.get(s.shard)
        shards.add_row(str(s.shard), s.owner or Text("UNOWNED", style="bold red"), _s(s.watermark_lag_s(now)),
                       _s(s.commit_age_s(now)), str(s.ticks), str(s.emitted), _n(f.due_1m.get(s.shard)),
                       _n(f.due_1h.get(s.shard)), "-" if since is None else _s(now / 1000 - since))
    tenants = Table(title="tenants (offsets, transaction markers count; figures since the processors "
                          "started)", title_justify="left")
    for col in ("tenant", "state", "dispatched", "worker lag", "workers", "DLQ", "emitted", "missed",
                "throttled", "lag p99 s", "p99 5m s", "reconciled s ago", "gaps"):
        tenants.add_column(col, justify="left" if col in ("tenant", "state") else "right")
    for t in view.tenants:
        tf = f.tenants.get(t.name)
        counts = ("-", "-", "-") if tf is None else (str(tf.emitted), str(tf.missed), str(tf.throttled))
        upto = tf.reconciled_to_s if tf else None
        gaps = tf.gaps if tf else None
        tenants.add_row(t.name, t.state, str(t.dispatch_offsets), str(t.worker_lag), str(t.workers),
                        str(t.dlq_offsets), *counts, _s(tf.lag_p99_s if tf else None),
                        _s((view.lag_p99_5m or {}).get(t.name)),
                        "-" if upto is None else _s(now / 1000 - upto),
                        Text(_n(gaps), style="bold red") if gaps else _n(gaps))
    found = problems(view)
    if found:
        verdict = Text("\n".join(f"✗ {p}" for p in found), style="bold red")
    else:
        verdict = Text("✓ every shard owned and on time", style="green")
    return Group(head, procs, shards, tenants, verdict)
