"""Hand-rolled readers of the records a replay is made of (dispatch records and events, alone or
several in an ``OccurrenceEvents`` record).

They read the *current* schema's layout straight from the Avro body (about three times faster
than fastavro plus a dict), check that the whole body is consumed, and fall back to the generic
decoder for a record written with an older schema version (another fingerprint). Field orders
are checked against the schemas at import, so a schema change cannot desynchronise them. Any
malformed body raises ``ValueError``/``IndexError``/``RecordDecodeError``.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.native import load
from scheduler.records import (
    Occurrence,
    OccurrenceEvent,
    current_schema,
    decode_fields,
    occurrence_events,
)
from scheduler.records.avro_fast import EventBody, OccurrenceBody
from scheduler.records.report_scan import EVENTS_HEADER  # its items checked there: OccurrenceEvent bodies

_OCC_SCHEMA = current_schema(Occurrence)
_OCC_HEADER = _OCC_SCHEMA.header
_OCC_FIELDS = ("occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "available_at_ms",
               "enqueued_at_ms", "attempt", "lane", "handler", "payload", "deadline_ms")
if tuple(f["name"] for f in _OCC_SCHEMA.expanded["fields"]) != _OCC_FIELDS:  # pragma: no cover
    raise RuntimeError("Occurrence fields changed: update scheduler/history/readers.py")
_EVENT_SCHEMA = current_schema(OccurrenceEvent)
_EVENT_HEADER = _EVENT_SCHEMA.header
_EVENT_FIELDS = ("occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "state", "attempt",
                 "reason", "at_ms")
if tuple(f["name"] for f in _EVENT_SCHEMA.expanded["fields"]) != _EVENT_FIELDS:  # pragma: no cover
    raise RuntimeError("OccurrenceEvent fields changed: update scheduler/history/readers.py")
_EVENT_STATES: tuple[str, ...] = tuple(
    next(f["type"]["symbols"] for f in _EVENT_SCHEMA.expanded["fields"] if f["name"] == "state")
)
_avro = load("scheduler.records.avro_fast")  # the compiled varint and string readers, when built
_occurrence_body: Callable[[bytes], OccurrenceBody] = _avro.occurrence_body
_event_body: Callable[[bytes], EventBody] = _avro.event_body
_event_bodies: Callable[[bytes], list[EventBody]] = _avro.event_bodies
EventTuple = tuple[str, str, str, int, int, str, int, "str | None", int]
"""(occurrence_id, schedule_id, tenant, version, scheduled_for, state, attempt or 0, reason, at)."""


def dispatch_fields(value: bytes) -> tuple[str, str, str, int, int, int, int]:
    """(occurrence_id, schedule_id, tenant, version, scheduled_for, available_at, attempt)."""
    if value[:10] == _OCC_HEADER:
        f = _occurrence_body(value)
        return f[0], f[1], f[2], f[3], f[4], f[5], f[7]
    d = decode_fields(value, Occurrence)  # an older writer schema: resolved the slow way
    return (d["occurrence_id"], d["schedule_id"], d["tenant"], d["version"], d["scheduled_for_ms"],
            d["available_at_ms"], d["attempt"])


def events_fields(value: bytes) -> list[EventTuple]:
    """The events of an ``OccurrenceEvent`` record (one) or an ``OccurrenceEvents`` record (each,
    in order), as :data:`EventTuple` s."""
    head = value[:10]
    if head == _EVENT_HEADER:
        return [_event_tuple(_event_body(value))]
    if head == EVENTS_HEADER:
        return [_event_tuple(body) for body in _event_bodies(value)]
    return [(e.occurrence_id, e.schedule_id, e.tenant, e.version, e.scheduled_for_ms, str(e.state),
             e.attempt or 0, e.reason, e.at_ms)
            for e in occurrence_events(value)]  # an older writer schema, or another framing


def _event_tuple(body: EventBody) -> EventTuple:
    oid, sid, ten, ver, sf, state_index, attempt, reason, at = body
    if not 0 <= state_index < len(_EVENT_STATES):
        raise ValueError(f"state index {state_index} is no OccurrenceState symbol")
    return oid, sid, ten, ver, sf, _EVENT_STATES[state_index], attempt or 0, reason, at
