"""The attempt report's fast read and the occurrence event's fast write (issue 14, item 2).

A burst of N occurrences brings the processor N to 2N attempt reports, and each one it applies
writes an occurrence event: through fastavro and the record dataclasses that cost more CPU
than applying the report. :func:`scan` reads a single-object ``AttemptReport`` written with the
current schema by hand (:mod:`scheduler.records.avro_fast`), and :func:`event` writes an
``OccurrenceEvent`` the same way; both are byte for byte what the general codec reads and
writes (tests pin this). A record with another header (a released schema, the Confluent
framing) or that does not scan returns None: the caller decodes it with
:func:`scheduler.records.decode_command_topic`, which resolves it or names what is wrong.
The field orders are checked against the current schemas at import, like
:mod:`scheduler.records.dispatch`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from scheduler.native import load
from scheduler.records.avro_fast import EventFields, ScannedReport
from scheduler.records.codec import checked_fields, current_schema
from scheduler.records.types import AttemptReport, AttemptReports, OccurrenceEvent, OccurrenceEvents

_REPORT_FIELDS = (
    "occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "attempt", "token",
    "kind", "retryable", "error_class", "error_message", "worker_id", "reported_at_ms",
    "started_at_ms",
)
_EVENT_FIELDS = (
    "occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "state", "attempt",
    "reason", "at_ms",
)


_REPORT = checked_fields(AttemptReport, _REPORT_FIELDS, __name__)
KINDS: tuple[str, ...] = tuple(_REPORT[7]["type"]["symbols"])
REPORT_HEADER = current_schema(AttemptReport).header
REPORTS_HEADER = current_schema(AttemptReports).header
# scan_batch reads each item as scan reads a report: the items must be the very AttemptReport
if checked_fields(AttemptReports, ("reports",), __name__)[0]["type"]["items"] != current_schema(
        AttemptReport).expanded:  # pragma: no cover - guards a schema edit
    raise RuntimeError(f"AttemptReports.reports no longer holds AttemptReport records: update {__name__}")
_EVENT = checked_fields(OccurrenceEvent, _EVENT_FIELDS, __name__)
STATE_INDEX = {s: i for i, s in enumerate(_EVENT[5]["type"]["symbols"])}
EVENTS_HEADER = current_schema(OccurrenceEvents).header
# event_run writes each item of a batch as an OccurrenceEvent body: the items must be that record
if checked_fields(OccurrenceEvents, ("events",), __name__)[0]["type"]["items"] != current_schema(
        OccurrenceEvent).expanded:  # pragma: no cover - guards a schema edit
    raise RuntimeError(f"OccurrenceEvents.events no longer holds OccurrenceEvent records: update {__name__}")
_fast = load("scheduler.records.avro_fast")  # compiled when built
event_value: Callable[..., bytes] = _fast.event_value
# (STATE_INDEX, at_ms, header, processor Event): one compiled call per event the processor writes.
event_record: Callable[[dict[str, int], int, bytes, EventFields], bytes] = _fast.event_record
# (STATE_INDEX, at_ms, header, events, start, counts, batch header or b"", batch bytes): the
# records of one tenant's run of events from ``start``, for produce_batch (batches of them when a
# batch header is given), and where the run ends; ``counts`` gains the run's states.
_Run = tuple[list[dict[str, Any]], int]
_ByState = dict[str, int]  # STATE_INDEX, and the run's counts
_Events = list[EventFields]
event_run: Callable[[_ByState, int, bytes, _Events, int, _ByState, bytes, int], _Run] = _fast.event_run


# ``scan(raw)``: ``raw`` as a report of the current schema in the single-object framing (its
# fields in schema order), else None. The compiled reader itself, no Python frame per report.
scan: Callable[[bytes], ScannedReport | None] = partial(_fast.scan_report, REPORT_HEADER, KINDS)
# ``scan_batch(raw)``: ``raw`` as an ``AttemptReports`` record of the current schemas (its reports'
# fields, each as :func:`scan` returns them, in order), else None.
scan_batch: Callable[[bytes], list[ScannedReport] | None] = partial(_fast.scan_reports, REPORTS_HEADER, KINDS)


def reports_of(raw: bytes) -> Sequence[ScannedReport]:
    """The reports of ``raw``, an ``AttemptReport`` or ``AttemptReports`` record of the current
    schemas (each report's fields as :func:`scan` returns them, in order); empty for any other
    record. For readers that only count reports (benches); the processor scans as it applies."""
    one = scan(raw)
    if one is not None:
        return (one,)
    batch = scan_batch(raw)
    return () if batch is None else batch


def fields_of(rep: AttemptReport) -> ScannedReport:
    """A decoded report's fields in schema order: what :func:`scan` returns for the same record."""
    return (
        rep.occurrence_id, rep.schedule_id, rep.tenant, rep.version, rep.scheduled_for_ms, rep.attempt,
        rep.token, rep.kind, rep.retryable, rep.error_class, rep.error_message, rep.worker_id,
        rep.reported_at_ms, rep.started_at_ms,
    )


def event(
    header: bytes, occurrence_id: str, schedule_id: str, tenant: str, version: int,
    scheduled_for_ms: int, state: str, attempt: int | None, reason: str | None, at_ms: int,
) -> bytes:
    """The ``OccurrenceEvent`` record with ``header`` (the framing's); ``state`` a symbol of
    ``OccurrenceState`` (KeyError otherwise: the shard model only records those)."""
    return event_value(header, occurrence_id, schedule_id, tenant, version, scheduled_for_ms,
                       STATE_INDEX[state], attempt, reason, at_ms)
