"""``ksched status`` on one screen (rich)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from scheduler.status.model import StatusView, problems


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(view: StatusView) -> Group:
    now = view.taken_at_ms
    head = Text(f"ksched {view.namespace} on {view.bootstrap} — brokers: {', '.join(view.brokers) or 'none'}")
    if view.prometheus:
        head.append(f"\nmetrics and alerts: {view.prometheus}/alerts (setting prometheus_url)")
    procs = Table(title="processors (group members)", title_justify="left")
    for col in ("client id", "host", "shards"):
        procs.add_column(col)
    for p in view.processors:
        procs.add_row(p.client_id, p.host, ", ".join(map(str, p.shards)) or "none")
    shards = Table(title="shards", title_justify="left")
    for col in ("shard", "owner", "watermark lag s", "last commit s ago", "ticks", "emitted"):
        shards.add_column(col, justify="right" if col != "owner" else "left")
    for s in view.shards:
        shards.add_row(str(s.shard), s.owner or Text("UNOWNED", style="bold red"), _s(s.watermark_lag_s(now)),
                       _s(s.commit_age_s(now)), str(s.ticks), str(s.emitted))
    tenants = Table(title="tenants (offsets; transaction markers count)", title_justify="left")
    for col in ("tenant", "state", "dispatched", "worker lag", "workers", "DLQ"):
        tenants.add_column(col, justify="left" if col in ("tenant", "state") else "right")
    for t in view.tenants:
        tenants.add_row(t.name, t.state, str(t.dispatch_offsets), str(t.worker_lag), str(t.workers),
                        str(t.dlq_offsets))
    found = problems(view)
    if found:
        verdict = Text("\n".join(f"✗ {p}" for p in found), style="bold red")
    else:
        verdict = Text("✓ every shard owned and on time", style="green")
    return Group(head, procs, shards, tenants, verdict)
