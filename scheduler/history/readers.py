"""Hand-rolled readers of the two records a replay is made of (dispatch records and events).

They read the *current* schema's layout straight from the Avro body (about three times faster
than fastavro plus a dict), check that the whole body is consumed, and fall back to the generic
decoder for a record written with an older schema version (another fingerprint). Field orders
are checked against the schemas at import, so a schema change cannot desynchronise them. Any
malformed body raises ``ValueError``/``IndexError``/``RecordDecodeError``.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.native import load
from scheduler.records import Occurrence, OccurrenceEvent, current_schema, decode_fields
from scheduler.records.avro_fast import OccurrenceBody

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
_long: Callable[[bytes, int], tuple[int, int]] = _avro.read_long
_text: Callable[[bytes, int], tuple[str, int]] = _avro.read_string
_occurrence_body: Callable[[bytes], OccurrenceBody] = _avro.occurrence_body


def dispatch_fields(value: bytes) -> tuple[str, str, str, int, int, int, int]:
    """(occurrence_id, schedule_id, tenant, version, scheduled_for, available_at, attempt)."""
    if value[:10] == _OCC_HEADER:
        f = _occurrence_body(value)
        return f[0], f[1], f[2], f[3], f[4], f[5], f[7]
    d = decode_fields(value, Occurrence)  # an older writer schema: resolved the slow way
    return (d["occurrence_id"], d["schedule_id"], d["tenant"], d["version"], d["scheduled_for_ms"],
            d["available_at_ms"], d["attempt"])


def event_fields(value: bytes) -> tuple[str, str, str, int, int, str, int, str | None, int]:
    """(occurrence_id, schedule_id, tenant, version, scheduled_for, state, attempt or 0, reason, at)."""
    if value[:10] != _EVENT_HEADER:
        d = decode_fields(value, OccurrenceEvent)  # an older writer schema
        return (d["occurrence_id"], d["schedule_id"], d["tenant"], d["version"], d["scheduled_for_ms"],
                str(d["state"]), d["attempt"] or 0, d["reason"], d["at_ms"])
    oid, p = _text(value, 10)
    sid, p = _text(value, p)
    ten, p = _text(value, p)
    ver, p = _long(value, p)
    sf, p = _long(value, p)
    state_index, p = _long(value, p)
    branch, p = _long(value, p)
    attempt = 0
    if branch == 1:
        attempt, p = _long(value, p)
    reason_branch, p = _long(value, p)
    reason = None
    if reason_branch == 1:
        reason, p = _text(value, p)
    at, p = _long(value, p)
    if p != len(value) or branch not in (0, 1) or reason_branch not in (0, 1):
        raise ValueError(f"OccurrenceEvent: malformed body (end {p} of {len(value)} bytes)")
    return oid, sid, ten, ver, sf, _EVENT_STATES[state_index], attempt, reason, at
