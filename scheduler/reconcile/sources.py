"""What the reconciler reads from Kafka: schedule history, the processors' state, the tenant's records.

Every read is a replay of committed data (``read_committed``) from the start of each
partition to the end it had when the read began (:func:`scheduler.kafka.reader.read_to_end`):

- :func:`read_history`: ``<ns>.schedule-history`` → one tenant's :class:`Change` lists;
- :func:`read_state`: ``<ns>.state`` → how far the tenant's window is closed (its lane
  cursors on every shard), and the work the processors still hold (catch-up spans,
  QUEUE_ONE slots);
- :func:`read_records`: ``<ns>.dispatch.<t>``, ``<ns>.occurrence-events.<t>`` and the reports
  on ``<ns>.commands.<t>`` → a :class:`~scheduler.reconcile.account.Ledger`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message

from scheduler.kafka.clients import consumer
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.reconcile.account import Ledger, Progress
from scheduler.reconcile.expect import DONE, Change
from scheduler.reconcile.lean import dispatch_head, event_heads
from scheduler.records import (
    RecordDecodeError,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ShardState,
    decode,
    record_type,
    report_fields,
)
from scheduler.settings import Settings
from scheduler.topology import topic_name
from scheduler.vocabulary import Lane

_ON_TIME = (Lane.STRICT.name, Lane.FLEXIBLE.name)


def _reader(settings: Settings) -> Consumer:
    return consumer(settings.kafka(), None, **{"enable.partition.eof": True, "fetch.max.bytes": 52_428_800,
                                               "max.partition.fetch.bytes": 8_388_608})


def _replay(settings: Settings, topics: list[str], on_record: Callable[[Message], None],
            progress: Progress | None) -> int:
    c = _reader(settings)
    try:
        tps = [tp for t in topics for tp in all_partitions(c, t)]
        if progress is None:
            return read_to_end(c, tps, on_record, timeout_s=3600)
        counted = [0]

        def counting(m: Message) -> None:
            on_record(m)
            counted[0] += 1
            if counted[0] >= 10_000:
                progress(counted[0])
                counted[0] = 0

        n = read_to_end(c, tps, counting, timeout_s=3600)
        progress(counted[0])
        return n
    finally:
        c.close()


def read_history(settings: Settings, tenant: str) -> dict[str, list[Change]]:
    """The accepted changes of ``tenant``'s schedules, per schedule id in the order applied."""
    out: dict[str, list[Change]] = {}

    def take(m: Message) -> None:
        value = m.value()
        if not value:
            return
        h = decode(value, ScheduleHistoryEntry)
        if h.tenant != tenant:
            return
        cursors = {str(c.lane): (c.at_s, c.schedule_id) for c in h.cursors} if h.cursors else None
        out.setdefault(h.schedule_id, []).append(Change(
            schedule_id=h.schedule_id, tenant=h.tenant, version=h.version, command=str(h.command),
            state=str(h.state), applied_at_s=h.applied_at_ms // 1000,
            effective_from_s=h.effective_from_ms // 1000,
            spec=None if h.spec is None else h.spec.to_domain(), cursors=cursors,
        ))

    _replay(settings, [topic_name(settings, "schedule-history")], take, None)
    return out


@dataclass
class ProcessorState:
    """What ``<ns>.state`` says of one tenant."""

    shards: int = 0  # shards that wrote a cursors record
    closed_until: int | None = None  # every occurrence of the tenant available at or before it has its fate
    waiting: dict[str, tuple[int, int]] = field(default_factory=dict)  # schedule id -> catch-up span (s)
    queued: set[str] = field(default_factory=set)  # occurrence ids held by QUEUE_ONE


def read_state(settings: Settings, tenant: str) -> ProcessorState:
    """The tenant's closed horizon and held work, from the latest record of every key of ``<ns>.state``.

    A shard's horizon for the tenant is the least of its STRICT and FLEXIBLE cursors (a cursor
    ``(t, DONE)`` has finished second ``t``; any other, only ``t - 1``); a shard where the
    tenant has no lane yet, the shard's watermark. The tenant's horizon is the least over
    the shards; None when no shard has written its state yet.
    """
    latest: dict[bytes, bytes | None] = {}

    def take(m: Message) -> None:
        latest[m.key() or b""] = m.value()

    _replay(settings, [topic_name(settings, "state")], take, None)
    st = ProcessorState()
    for key, value in latest.items():
        if not value:
            continue
        if key.startswith(b"shard:"):
            s = decode(value, ShardState)
            mine = [c for c in s.cursors if c.tenant == tenant and str(c.lane) in _ON_TIME]
            horizon = min((c.at_s if c.schedule_id == DONE else c.at_s - 1 for c in mine),
                          default=s.watermark_ms // 1000)
            st.shards += 1
            st.closed_until = horizon if st.closed_until is None else min(st.closed_until, horizon)
        elif record_type(value) is ScheduleRuntime:
            rt = decode(value, ScheduleRuntime)
            if rt.tenant != tenant:
                continue
            if rt.catch_up_cursor_ms is not None and rt.catch_up_until_ms is not None:
                st.waiting[rt.schedule_id] = (rt.catch_up_cursor_ms // 1000, rt.catch_up_until_ms // 1000)
            if rt.queued is not None:
                st.queued.add(rt.queued.occurrence_id)
    return st


def read_records(settings: Settings, tenant: str, ledger: Ledger, progress: Progress | None = None) -> int:
    """Feed ``ledger`` every committed dispatch record, occurrence event and attempt report of
    ``tenant``; returns the records read. A record naming another tenant is not the tenant's."""
    dispatch_t = topic_name(settings, "dispatch", tenant)
    events_t = topic_name(settings, "occurrence-events", tenant)

    dispatch, event = ledger.dispatch, ledger.event

    def take(m: Message) -> None:
        value = m.value()
        if not value:
            return
        topic = m.topic()
        try:
            if topic == dispatch_t:
                oid, sid, ten, ver, sf, att = dispatch_head(value)
                if ten == tenant:
                    dispatch(oid, sid, ver, sf // 1000, att)
            elif topic == events_t:  # an event, or several in one record
                for oid, sid, ten, ver, sf, state, att in event_heads(value):
                    if ten == tenant:
                        event(oid, sid, ver, sf // 1000, state, att)
            else:  # a command (None), or a report alone or several in one record
                for d in report_fields(value) or ():
                    if d["tenant"] == tenant:
                        oid, sf = d["occurrence_id"], d["scheduled_for_ms"] // 1000
                        ledger.report(oid, d["schedule_id"], d["version"], sf, d["attempt"], str(d["kind"]))
        except (RecordDecodeError, ValueError, TypeError, KeyError, IndexError):
            ledger.undecodable += 1  # a foreign or hostile record: counted, never a stop

    topics = [dispatch_t, events_t, topic_name(settings, "commands", tenant)]
    return _replay(settings, topics, take, progress)
