"""The few leading fields the reconciler needs of a dispatch record or an occurrence event, fast.

A replay of a million occurrences reads two million records: the reconciler reads only what
it accounts with — occurrence id, schedule id, tenant, version, ``scheduled_for`` and, for a
dispatch record, the attempt (skipping ``available_at`` and ``enqueued_at``); for an event,
the state and the attempt — straight from the current schema's Avro body, one function call
per record, for an event without a reason (the common SUCCEEDED) whose body ends where it should.
The events of an ``OccurrenceEvents`` record are read by the compiled reader of its whole body,
a record at a time. Any record that is not in the current layout's common shape (another writer
schema, a string of 64 bytes or more, a long attempt number) is read by the complete readers
of :mod:`scheduler.history.readers`, which check the whole body. Field orders are theirs (checked
at import there).
"""

from __future__ import annotations

from scheduler.history.readers import (
    _EVENT_HEADER,
    _EVENT_STATES,
    _OCC_HEADER,
    _long,
    dispatch_fields,
    events_fields,
)

Head = tuple[str, str, str, int, int, int]  # oid, schedule id, tenant, version, scheduled_for_ms, attempt


def dispatch_head(v: bytes) -> Head:
    """(occurrence_id, schedule_id, tenant, version, scheduled_for_ms, attempt) of a dispatch record."""
    if v[:10] == _OCC_HEADER:
        head = _strings_and_version(v)
        if head is not None:
            oid, sid, ten, ver, p = head
            sf, p = _long(v, p)
            while v[p] & 0x80:  # available_at_ms: skipped
                p += 1
            p += 1
            while v[p] & 0x80:  # enqueued_at_ms: skipped
                p += 1
            b = v[p + 1]
            if b < 0x80:
                return oid, sid, ten, ver, sf, (b >> 1) ^ -(b & 1)
    f = dispatch_fields(v)
    return f[0], f[1], f[2], f[3], f[4], f[6]


EventHead = tuple[str, str, str, int, int, str, int]
"""(occurrence_id, schedule_id, tenant, version, scheduled_for_ms, state, attempt or 0)."""


def event_heads(v: bytes) -> list[EventHead]:
    """The :data:`EventHead` of each event of an ``OccurrenceEvent`` or ``OccurrenceEvents``
    record, in order."""
    if v[:10] == _EVENT_HEADER:
        head = _strings_and_version(v)
        if head is not None:
            oid, sid, ten, ver, p = head
            sf, p = _long(v, p)
            state, branch = v[p], v[p + 1]
            if state < 0x80 and not state & 1 and (state >> 1) < len(_EVENT_STATES) and branch in (0, 2):
                attempt, p = 0, p + 2
                if branch == 2:
                    b = v[p]
                    if b >= 0x80:
                        return _events_slow(v)
                    attempt, p = (b >> 1) ^ -(b & 1), p + 1
                if v[p] == 0 and _long(v, p + 1)[1] == len(v):  # no reason, and at_ms ends the body
                    return [(oid, sid, ten, ver, sf, _EVENT_STATES[state >> 1], attempt)]
    return _events_slow(v)


def _events_slow(v: bytes) -> list[EventHead]:
    """Every event's head through the complete readers (a batch's events included)."""
    return [f[:7] for f in events_fields(v)]


def _strings_and_version(v: bytes) -> tuple[str, str, str, int, int] | None:
    """The three leading strings and the version after the 10-byte header, when each string is
    shorter than 64 bytes and the version fits one byte (one-byte lengths); else None."""
    p = 10
    n = v[p]
    if n >= 0x80:
        return None
    e = p + 1 + (n >> 1)
    oid = v[p + 1:e].decode()
    n = v[e]
    if n >= 0x80:
        return None
    p, e = e + 1, e + 1 + (n >> 1)
    sid = v[p:e].decode()
    n = v[e]
    if n >= 0x80:
        return None
    p, e = e + 1, e + 1 + (n >> 1)
    ten = v[p:e].decode()
    b = v[e]
    if b >= 0x80:
        return None
    return oid, sid, ten, (b >> 1) ^ -(b & 1), e + 1
