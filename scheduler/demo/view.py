"""The demo's live view: occurrences, their states and lag, read from the topics themselves.

It reads, ``read_committed``, the tenants' dispatch topics (ENQUEUED, with the
lag ``enqueued_at - scheduled_for``), the attempt reports on ``ksched.commands.<tenant>``
(RUNNING, SUCCEEDED, FAILED) and ``ksched.occurrence-events`` (RETRY_WAIT,
DEAD, SKIPPED_OVERLAP, MISSED, CANCELED), plus each worker group's consumer lag.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from rich.console import Group
from rich.table import Table

from scheduler.kafka.clients import consumer
from scheduler.records import (
    AttemptReport,
    AttemptReports,
    Occurrence,
    OccurrenceEvent,
    OccurrenceEvents,
    RecordDecodeError,
    decode,
    occurrence_events,
    record_type,
)
from scheduler.settings import Settings
from scheduler.topology import topic_name

_ROWS = 18


@dataclass
class Row:
    tenant: str
    schedule: str
    scheduled_for_ms: int
    attempt: int = 1
    state: str = "ENQUEUED"
    lag_s: float | None = None
    note: str = ""


class LiveView:
    """Follows the demo's topics from ``since_ms`` on; :meth:`poll` then :meth:`render`."""

    def __init__(self, settings: Settings, tenants: list[str], names: dict[str, str], since_ms: int) -> None:
        self.settings, self.tenants, self.names = settings, tenants, names
        self.rows: OrderedDict[str, Row] = OrderedDict()
        self.totals: Counter[str] = Counter()
        self.lags: list[float] = []
        self._c = consumer(settings.kafka(), None, **{"fetch.wait.max.ms": 100})
        kinds = ("dispatch", "commands", "occurrence-events")
        topics = [topic_name(settings, kind, t) for kind in kinds for t in tenants]
        tps = [TopicPartition(t, p, since_ms) for t in topics for p in range(settings.partitions)]
        self._c.assign(self._c.offsets_for_times(tps, timeout=10))
        self._groups = {t: self._group_reader(t) for t in tenants}

    def _group_reader(self, tenant: str) -> Consumer:
        return Consumer(
            self.settings.kafka().config(
                **{
                    "group.id": f"{self.settings.namespace}.tenant.{tenant}.worker",
                    "enable.auto.commit": False,
                }
            )
        )

    def close(self) -> None:
        self._c.close()
        for g in self._groups.values():
            g.close()

    def poll(self, budget_s: float = 0.5) -> None:
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            msgs = self._c.consume(1000, 0.1)
            if not msgs:
                return
            for m in msgs:
                if m.error() is None and m.value():
                    self._apply(m.topic() or "", m.value() or b"")

    def _row(self, oid: str, tenant: str, sid: str, sf_ms: int) -> Row:
        row = self.rows.get(oid)
        if row is None:
            row = self.rows[oid] = Row(tenant, self.names.get(sid, sid[:8]), sf_ms)
            while len(self.rows) > 500:
                self.rows.popitem(last=False)
        return row

    def _report(self, r: AttemptReport) -> None:
        if r.tenant not in self.tenants:
            return
        row = self._row(r.occurrence_id, r.tenant, r.schedule_id, r.scheduled_for_ms)
        state = {"STARTED": "RUNNING", "HEARTBEAT": "RUNNING"}.get(r.kind, r.kind)
        if r.kind == "FAILED" and r.error_class == "ksched.Canceled":
            state = "CANCELED"
        row.attempt, row.state = r.attempt, state
        row.note = f"{r.error_class}: {r.error_message}"[:40] if r.kind == "FAILED" else ""
        if r.kind in ("SUCCEEDED", "FAILED"):
            self.totals[state] += 1

    def _apply(self, topic: str, value: bytes) -> None:
        try:
            kind = record_type(value)
            if kind is Occurrence:
                o = decode(value, Occurrence)
                row = self._row(o.occurrence_id, o.tenant, o.schedule_id, o.scheduled_for_ms)
                row.attempt, row.state = o.attempt, "ENQUEUED"
                row.lag_s = (o.enqueued_at_ms - o.scheduled_for_ms) / 1000
                if o.attempt == 1:
                    self.lags.append((o.enqueued_at_ms - o.available_at_ms) / 1000)
                self.totals["ENQUEUED"] += 1
            elif kind is AttemptReport:
                self._report(decode(value, AttemptReport))
            elif kind is AttemptReports:
                for r in decode(value, AttemptReports).reports:
                    self._report(r)
            elif kind is OccurrenceEvent or kind is OccurrenceEvents:
                for e in occurrence_events(value):
                    self._event(e)
        except RecordDecodeError:
            self.totals["undecodable"] += 1

    def _event(self, e: OccurrenceEvent) -> None:
        if e.tenant not in self.tenants or e.state == "SUCCEEDED":
            return
        row = self._row(e.occurrence_id, e.tenant, e.schedule_id, e.scheduled_for_ms)
        row.state, row.note = e.state, (e.reason or "")[:40]
        self.totals[e.state] += 1

    def worker_lag(self, tenant: str) -> int:
        """Records of the tenant's dispatch topic not yet committed by its worker group."""
        topic = topic_name(self.settings, "dispatch", tenant)
        tps = [TopicPartition(topic, p) for p in range(self.settings.partitions)]
        lag = 0
        for tp in self._groups[tenant].committed(tps, timeout=5):
            _, high = self._c.get_watermark_offsets(tp, timeout=5, cached=False)
            lag += high - max(tp.offset, 0) if tp.offset >= 0 else high
        return lag

    def render(self) -> Group:
        lags = sorted(self.lags)
        p50 = lags[len(lags) // 2] if lags else float("nan")
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else float("nan")
        head = Table.grid(padding=(0, 3))
        head.add_row(
            f"dispatch lag p50 {p50:.2f}s  p99 {p99:.2f}s",
            "  ".join(f"{t}: {self.worker_lag(t)} waiting" for t in self.tenants),
            "  ".join(f"{k} {v}" for k, v in sorted(self.totals.items())),
        )
        table = Table(title="recent occurrences (Ctrl-C stops the demo)", expand=True)
        for col in ("tenant", "schedule", "scheduled for (UTC)", "attempt", "state", "lag", "note"):
            table.add_column(col)
        for row in list(self.rows.values())[-_ROWS:]:
            table.add_row(
                row.tenant,
                row.schedule,
                time.strftime("%H:%M:%S", time.gmtime(row.scheduled_for_ms / 1000)),
                str(row.attempt),
                row.state,
                "" if row.lag_s is None else f"{row.lag_s:.2f}s",
                row.note,
            )
        return Group(head, table)

    def summary(self) -> str:
        return "  ".join(f"{k}={v}" for k, v in sorted(self.totals.items()))
