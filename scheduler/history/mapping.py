"""Records → history rows: the pure half of the indexer (no Kafka, no database).

:func:`classify` names the source of a topic; :meth:`Batch.add` maps one record value of it to
partial rows (:mod:`scheduler.history.rows`) and merges them into the batch, so a batch holds at
most one row per key (PostgreSQL's ``ON CONFLICT DO UPDATE`` refuses to touch a row twice in one
statement). What each source gives:

=================  ==========================  =============================================
source             record                      rows
=================  ==========================  =============================================
dispatch.<t>       Occurrence                  occurrence: ENQUEUED (attempt), available_at,
                                               enqueued_at = the record's LogAppendTime
occurrence-events  OccurrenceEvent             occurrence: the event's state (attempt, reason)
                   OccurrenceEvents            the same for each of its events
commands.<t>       AttemptReport               attempt row; occurrence: RUNNING (attempt)
                   AttemptReports              the same for each of its reports
                   ScheduleCommand             nothing (the accepted change is in history)
schedule-history   ScheduleHistoryEntry        schedules: the version, its command and spec
schedules          Schedule                    schedules: the version's full spec and times
dlq.<t>            DlqEntry                    dlq_entries: the latest death's partition and
                                               offset, and the columns the DLQ list shows
=================  ==========================  =============================================

A record is skipped and counted in :attr:`Batch.skipped` (never raised) when it cannot be
decoded, names another tenant than its topic, or carries an ``occurrence_id`` that is not
``H(schedule_id, version, scheduled_for)`` (a hostile report must not break the UNIQUE key).
That last check costs a hash per record, so it is made on every attempt report (workers write
them) but on dispatch records and events (only processors write them) only when the batch is
built with ``verify_ids=True`` -- which the indexer does when a store refuses a batch with
:class:`~scheduler.history.base.HistoryConflictError`, then applies the verified batch.
"""

from __future__ import annotations

import base64
import enum
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from scheduler.domain.ids import occurrence_id as expected_occurrence_id
from scheduler.history.readers import EventTuple, dispatch_fields, events_fields
from scheduler.history.rows import (
    AttemptRow,
    ChangeRow,
    DlqRow,
    OccurrenceRow,
    VersionRow,
    merge_attempt,
    merge_dlq,
    merge_occurrence,
    merge_version,
    rank,
)
from scheduler.records import (
    DlqEntry,
    RecordDecodeError,
    Schedule,
    ScheduleHistoryEntry,
    decode,
    report_fields,
)

_MAX_ERRORS = 20


class Source(enum.Enum):
    """Which topic family a record came from."""

    DISPATCH = "dispatch"
    EVENTS = "occurrence-events"
    COMMANDS = "commands"
    HISTORY = "schedule-history"
    SCHEDULES = "schedules"
    DLQ = "dlq"


_TENANT_SOURCES = (Source.DISPATCH, Source.EVENTS, Source.COMMANDS, Source.DLQ)


def classify(namespace: str, topic: str) -> tuple[Source, str | None] | None:
    """``(source, tenant)`` of ``topic`` in ``namespace``; None for a topic the indexer does not read.

    Per-tenant topics are ``<ns>.<name>.<tenant>``; ``<ns>.schedule-history`` and the cluster-wide
    ``<ns>.schedules`` have no tenant (the tenant copies ``<ns>.schedules.<t>`` are not read).
    """
    if topic == f"{namespace}.schedule-history":
        return Source.HISTORY, None
    if topic == f"{namespace}.schedules":
        return Source.SCHEDULES, None
    for source in _TENANT_SOURCES:
        prefix = f"{namespace}.{source.value}."
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return source, topic[len(prefix):]
    return None


def subscription(namespace: str) -> list[str]:
    """The topics and the regex (librdkafka: a name starting with ``^``) the indexer subscribes to."""
    ns = namespace  # settings allow only [a-z0-9_-]: nothing to escape in a regex
    return [
        f"{namespace}.schedule-history",
        f"{namespace}.schedules",
        rf"^{ns}\.(dispatch|occurrence-events|commands|dlq)\.[a-z][a-z0-9-]*$",
    ]


@dataclass
class Batch:
    """The merged rows of a run of records, and what was skipped; applied in one transaction."""

    occurrences: dict[str, OccurrenceRow] = field(default_factory=dict)
    attempts: dict[tuple[str, int, str], AttemptRow] = field(default_factory=dict)
    versions: dict[tuple[str, int], VersionRow] = field(default_factory=dict)
    changes: dict[tuple[str, str], ChangeRow] = field(default_factory=dict)
    dlq: dict[tuple[str, str], DlqRow] = field(default_factory=dict)
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    verify_ids: bool = False  # also check the ids of processor-written records (see the module doc)

    def add(self, source: Source, tenant: str | None, value: bytes | None, timestamp_ms: int) -> None:
        """Map one record of ``source`` (``tenant`` from its topic) into the batch; never raises.

        ``timestamp_ms`` is the Kafka record's timestamp (LogAppendTime on dispatch topics).
        """
        self.records += 1
        if value is None:
            self.skipped["tombstone"] += 1  # a purged schedule: its versions stay history
            return
        try:
            problem = _ADD[source](self, tenant or "", value, timestamp_ms)
        except (RecordDecodeError, ValueError, TypeError, KeyError, IndexError) as exc:
            problem = f"undecodable {source.value}"
            self._note(f"{problem} record: {exc}")
        if problem is not None:
            self.skipped[problem] += 1

    def add_dlq(self, tenant: str, value: bytes | None, partition: int, offset: int) -> None:
        """Map one record of ``<ns>.dlq.<tenant>`` at ``partition``/``offset`` (a DLQ row needs
        where it lies, which no other source does); never raises, like :meth:`add`."""
        self.records += 1
        if value is None:
            self.skipped["tombstone"] += 1
            return
        try:
            d = decode(value, DlqEntry)
        except (RecordDecodeError, ValueError, TypeError, KeyError, IndexError) as exc:
            self.skipped["undecodable dlq"] += 1
            self._note(f"undecodable dlq record: {exc}")
            return
        if d.tenant != tenant:
            self.skipped["tenant mismatch"] += 1
            return
        row = DlqRow(
            tenant, d.occurrence_id, d.schedule_id, d.version, d.scheduled_for_ms, d.handler, d.attempts,
            d.last_error_class, d.last_error_message, d.dead_at_ms, d.reason, partition, offset,
        )
        old = self.dlq.get((tenant, d.occurrence_id))
        self.dlq[(tenant, d.occurrence_id)] = row if old is None else merge_dlq(old, row)

    def put_occurrence(self, row: OccurrenceRow) -> None:
        old = self.occurrences.get(row.occurrence_id)
        if old is None:
            self.occurrences[row.occurrence_id] = row
        else:
            merge_occurrence(old, row)

    def put_attempt(self, row: AttemptRow) -> None:
        key = (row.occurrence_id, row.attempt_no, row.token)
        old = self.attempts.get(key)
        if old is None:
            self.attempts[key] = row
        else:
            merge_attempt(old, row)

    def put_version(self, row: VersionRow) -> None:
        key = (row.schedule_id, row.version)
        old = self.versions.get(key)
        if old is None:
            self.versions[key] = row
        else:
            merge_version(old, row)

    def _note(self, message: str) -> None:
        if len(self.errors) < _MAX_ERRORS:
            self.errors.append(message[:300])


def _checked(
    tenant: str, rec_tenant: str, oid: str, sid: str, version: int, sf_ms: int, verify: bool
) -> str | None:
    """Why a record of an occurrence must be skipped, or None; the id is checked if ``verify``."""
    if rec_tenant != tenant:
        return "tenant mismatch"
    if verify and (sf_ms % 1000 or oid != expected_occurrence_id(sid, version, sf_ms // 1000)):
        return "occurrence_id mismatch"
    return None


def _add_dispatch(batch: Batch, tenant: str, value: bytes, ts: int) -> str | None:
    oid, sid, rec_tenant, version, sf, av, attempt = dispatch_fields(value)
    problem = _checked(tenant, rec_tenant, oid, sid, version, sf, batch.verify_ids)
    if problem is None:
        batch.put_occurrence(OccurrenceRow(
            oid, tenant, sid, version, sf, av, ts, "ENQUEUED", rank("ENQUEUED", attempt), ts, attempt, None
        ))
    return problem


def _add_event(batch: Batch, tenant: str, value: bytes, ts: int) -> str | None:
    return _each(batch, [_add_one_event(batch, tenant, f) for f in events_fields(value)])


def _add_one_event(batch: Batch, tenant: str, f: EventTuple) -> str | None:
    """Map one event's fields (an ``OccurrenceEvent``, alone or in an ``OccurrenceEvents``)."""
    oid, sid, rec_tenant, version, sf, state, attempt, reason, at = f
    problem = _checked(tenant, rec_tenant, oid, sid, version, sf, batch.verify_ids)
    if problem is None:
        batch.put_occurrence(OccurrenceRow(
            oid, tenant, sid, version, sf, None, None, state, rank(state, attempt), at, attempt, reason
        ))
    return problem


def _add_command(batch: Batch, tenant: str, value: bytes, ts: int) -> str | None:
    reports = report_fields(value)
    if reports is None:
        return None  # a ScheduleCommand: its accepted effect is on schedule-history
    return _each(batch, [_add_report(batch, tenant, d) for d in reports])


def _each(batch: Batch, outcomes: list[str | None]) -> str | None:
    """The first problem of a record's items (its reports or events, each mapped alone), the
    others counted in ``batch.skipped`` here: the caller counts the one returned."""
    problems = [p for p in outcomes if p is not None]
    if len(problems) > 1:
        batch.skipped.update(problems[1:])
    return problems[0] if problems else None


def _add_report(batch: Batch, tenant: str, d: dict[str, Any]) -> str | None:
    """Map one report's fields (an ``AttemptReport``, alone or in an ``AttemptReports``)."""
    oid, sid, version, sf = d["occurrence_id"], d["schedule_id"], d["version"], d["scheduled_for_ms"]
    problem = _checked(tenant, d["tenant"], oid, sid, version, sf, True)  # workers' word: always checked
    if problem is not None:
        return problem
    attempt, at, report = d["attempt"], d["reported_at_ms"], str(d["kind"])
    final = report in ("SUCCEEDED", "FAILED")
    batch.put_attempt(AttemptRow(
        oid, attempt, d["token"], tenant, sid, d["worker_id"],
        # a fast handler sends no STARTED: its final report carries the start (AttemptReport v2)
        at if report == "STARTED" else d["started_at_ms"], at if report == "HEARTBEAT" else None,
        at if final else None, report if final else None, d["retryable"] if final else None,
        d["error_class"] if final else None, d["error_message"] if final else None,
    ))
    batch.put_occurrence(OccurrenceRow(
        oid, tenant, sid, version, sf, None, None, "RUNNING", rank("RUNNING", attempt), at, attempt, None
    ))
    return None


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def spec_json(spec: Any) -> str | None:
    """The spec record as canonical JSON (bytes as base64), or None."""
    return None if spec is None else json.dumps(asdict(spec), sort_keys=True, default=_json_default)


def _add_history(batch: Batch, tenant: str, value: bytes, ts: int) -> str | None:
    h = decode(value, ScheduleHistoryEntry)
    batch.put_version(VersionRow(
        h.schedule_id, h.version, h.tenant, str(h.state), h.effective_from_ms, str(h.command),
        h.request_id, h.applied_at_ms, spec_json(h.spec), None, None, None, None,
    ))
    batch.changes.setdefault((h.schedule_id, h.request_id), ChangeRow(
        h.schedule_id, h.request_id, h.tenant, h.version, str(h.command), str(h.state), h.applied_at_ms,
        h.effective_from_ms, ts,
    ))
    return None


def _add_schedule(batch: Batch, tenant: str, value: bytes, ts: int) -> str | None:
    s = decode(value, Schedule)
    batch.put_version(VersionRow(
        s.schedule_id, s.version, s.tenant, str(s.state), s.effective_from_ms, None, None, None,
        spec_json(s.spec), s.created_at_ms, s.idempotency_key, s.paused_at_ms, s.resumed_at_ms,
    ))
    return None


_ADD = {
    Source.DISPATCH: _add_dispatch,
    Source.EVENTS: _add_event,
    Source.COMMANDS: _add_command,
    Source.HISTORY: _add_history,
    Source.SCHEDULES: _add_schedule,
}
