"""Avro binary by hand for the records of the hot paths: varints, strings and bytes, the
``Schedule`` body read (restore reads a million), the dispatch and version bodies a worker
reads per occurrence, the attempt report's body read, the occurrence event's body written.

Standard library only and fully typed, so that it is compiled with mypyc
(:mod:`scheduler.native`; callers take it through ``native.load``) while this file stays the
source of truth. The readers raise IndexError, ValueError or UnicodeDecodeError on a truncated
or corrupt body; their callers decide what that means.

Nothing here knows a schema: :mod:`scheduler.records.schedule_scan`,
:mod:`scheduler.records.worker_scan` and :mod:`scheduler.records.report_scan` check the field
order of the current schemas against the order these functions read and write, and pass in
the enum symbols. Tests pin every function byte for byte against fastavro.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SMALL = tuple(bytes([i]) for i in range(0x80))
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


# Large longs met again and again (a tick's clock in ms, a burst's scheduled_for): their varint
# is a dict lookup instead of a six-step loop. A cache, not state: emptied when full.
_LONGS: dict[int, bytes] = {}
_LONGS_LIMIT = 4096


def avro_long(n: int) -> bytes:
    """Avro ``long`` / ``int``: zig-zag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    known = _LONGS.get(n)
    if known is not None:
        return known
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    if len(_LONGS) >= _LONGS_LIMIT:
        _LONGS.clear()
    value = _LONGS[n] = bytes(out)
    return value


def avro_string(s: str) -> bytes:
    raw = s.encode()
    return avro_long(len(raw)) + raw


# Names met again and again (a burst's dispatch records share a few handlers): their encoding is
# a dict lookup instead of an encode and a concatenation. A cache, not state: emptied when full.
_NAMES: dict[str, bytes] = {}
_NAMES_LIMIT = 1024


def avro_name(s: str) -> bytes:
    """:func:`avro_string` of a string from a small set (a handler name), cached."""
    known = _NAMES.get(s)
    if known is not None:
        return known
    if len(_NAMES) >= _NAMES_LIMIT:
        _NAMES.clear()
    value = _NAMES[s] = avro_string(s)
    return value


def _w_opt_long(n: int | None) -> bytes:
    """A ``["null", "long"]`` union."""
    return b"\x00" if n is None else b"\x02" + avro_long(n)


def _w_opt_string(s: str | None) -> bytes:
    """A ``["null", "string"]`` union."""
    return b"\x00" if s is None else b"\x02" + avro_string(s)


# What scan_body reads: the Schedule schema's fields in order, the spec as its encoded key
# without the payload: (tenant, schedule_id, version, state, spec_key, payload, created_at_ms, updated_at_ms,
#  effective_from_ms, idempotency_key, paused_at_ms, resumed_at_ms, last_request_id)
Scanned = tuple[
    str, str, int, str, bytes, bytes, int, int, int, "str | None", "int | None", "int | None", "str | None"
]


ScannedReport = tuple[
    str, str, str, int, int, int, str, str, "bool | None", "str | None", "str | None", str, int, "int | None"
]
"""An ``AttemptReport`` read by :func:`scan_report`: the record's fields in schema order (occurrence_id,
schedule_id, tenant, version, scheduled_for_ms, attempt, token, kind, retryable, error_class,
error_message, worker_id, reported_at_ms, started_at_ms). A plain tuple, not a named one: built
here it costs a third of the scan less (1.12 against 0.79 µs), and the inbox unpacks it in one step."""


def read_long(b: bytes, i: int) -> tuple[int, int]:
    """Avro ``long``/``int`` at ``i`` (a zig-zag varint) and the offset after it."""
    x = b[i]
    if x < 0x80:  # lengths, versions, enum indexes, union branches: one byte
        return (x >> 1) ^ -(x & 1), i + 1
    n = x & 0x7F
    shift = 7
    while True:
        i += 1
        x = b[i]
        n |= (x & 0x7F) << shift
        if x < 0x80:
            if n >> 64:  # a tenth byte past bit 63: no long (fastavro would wrap it around)
                raise ValueError("varint over 64 bits")
            return (n >> 1) ^ -(n & 1), i + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def read_string(b: bytes, i: int) -> tuple[str, int]:
    """Avro ``string`` at ``i`` and the offset after it."""
    raw, i = read_bytes(b, i)
    return raw.decode(), i


def read_bytes(b: bytes, i: int) -> tuple[bytes, int]:
    """Avro ``bytes`` at ``i`` and the offset after it."""
    n, i = read_size(b, i)
    end = i + n
    if end > len(b):
        raise IndexError("string or bytes run past the end")
    return b[i:end], end


def read_size(b: bytes, i: int) -> tuple[int, int]:
    """A length: a varint that must not be negative."""
    n, i = read_long(b, i)
    if n < 0:
        raise ValueError(f"negative length {n}")
    return n, i


def _branch(data: bytes, pos: int) -> tuple[bool, int]:
    """A ``["null", T]`` union's index at ``data[pos:]``: False for null, True for the value."""
    i = data[pos]
    if i > 2 or i == 1:  # the index is 0 or 1, zig-zag encoded: byte 0 or 2
        raise ValueError(f"union branch byte {i} of [null, ...]")
    return i == 2, pos + 1


def _opt_long(b: bytes, i: int) -> tuple[int | None, int]:
    present, i = _branch(b, i)
    return read_long(b, i) if present else (None, i)


def _opt_string(b: bytes, i: int) -> tuple[str | None, int]:
    present, i = _branch(b, i)
    return read_string(b, i) if present else (None, i)


def scan_report(header: bytes, kinds: tuple[str, ...], data: bytes) -> ScannedReport | None:
    """The ``AttemptReport`` record ``data``: ``header`` then the body (``kinds``: the report
    kind enum's symbols). None when ``data`` has another header or is not exactly one such body
    (truncated, trailing bytes, an int or symbol out of range, invalid UTF-8): the general
    decoder then answers why. The arguments every record shares come first, for a
    ``functools.partial``."""
    if not data.startswith(header):
        return None
    try:
        report, pos = _report_body(kinds, data, len(header))
    except (IndexError, ValueError):  # UnicodeDecodeError included
        return None
    return report if pos == len(data) else None


def scan_reports(header: bytes, kinds: tuple[str, ...], data: bytes) -> list[ScannedReport] | None:
    """The ``AttemptReports`` record ``data``: ``header`` then an array of ``AttemptReport``
    bodies, each read as :func:`scan_report` reads one. None when ``data`` has another header or
    is not exactly one such record (an array block of a negative count with its byte size is
    read too, as the Avro specification allows a writer to send it)."""
    if not data.startswith(header):
        return None
    out: list[ScannedReport] = []
    try:
        count, pos = _block(data, len(header))
        while count != 0:
            for _ in range(count):
                report, pos = _report_body(kinds, data, pos)
                out.append(report)
            count, pos = _block(data, pos)
    except (IndexError, ValueError):  # UnicodeDecodeError included
        return None
    return out if pos == len(data) else None


def _block(data: bytes, pos: int) -> tuple[int, int]:
    """The item count of the array block at ``data[pos:]`` (0: the array's end) and the offset of
    its first item. A block of a negative count carries its size in bytes after the count, as the
    Avro specification allows a writer to send it: the size is skipped, the count made positive."""
    count, pos = read_long(data, pos)
    if count < 0:
        _, pos = read_long(data, pos)
        count = -count
    return count, pos


def _report_body(kinds: tuple[str, ...], data: bytes, pos: int) -> tuple[ScannedReport, int]:
    """An ``AttemptReport`` body at ``data[pos:]`` and the offset after it; ValueError for an
    attempt or a kind out of range."""
    oid, pos = read_string(data, pos)
    sid, pos = read_string(data, pos)
    tenant, pos = read_string(data, pos)
    version, pos = read_long(data, pos)
    scheduled_for_ms, pos = read_long(data, pos)
    attempt, pos = read_long(data, pos)
    token, pos = read_string(data, pos)
    k, pos = read_long(data, pos)
    retryable: bool | None = None
    present, pos = _branch(data, pos)
    if present:
        if data[pos] > 1:
            raise ValueError("boolean byte")
        retryable = data[pos] == 1
        pos += 1
    error_class, pos = _opt_string(data, pos)
    error_message, pos = _opt_string(data, pos)
    worker_id, pos = read_string(data, pos)
    reported_at_ms, pos = read_long(data, pos)
    started_at_ms, pos = _opt_long(data, pos)
    if not 0 <= k < len(kinds) or not _INT_MIN <= attempt <= _INT_MAX:
        raise ValueError("report kind or attempt out of range")
    return (
        oid, sid, tenant, version, scheduled_for_ms, attempt, token, kinds[k], retryable,
        error_class, error_message, worker_id, reported_at_ms, started_at_ms,
    ), pos


def scan_body(
    b: bytes,
    states: tuple[str, ...],
    known: set[bytes],
    lengths: list[int],
    key_end: Callable[[bytes, int], int],
) -> Scanned:
    """The fields of the Schedule body ``b`` (after its 10-byte header). ``known``: the spec keys
    seen so far, ``lengths`` their distinct lengths; ``key_end(b, i)``, the end of a key not among
    them (which it adds to ``known``); ``states``: the state enum's symbols."""
    tenant, i = read_string(b, 10)
    sid, i = read_string(b, i)
    version, i = read_long(b, i)
    if b[i] & 0x81:
        raise ValueError(f"state symbol byte {b[i]}")
    state = states[b[i] >> 1]
    i += 1
    for n in lengths:
        key = b[i : i + n]
        if key in known:
            break
    else:
        n = key_end(b, i) - i
        key = b[i : i + n]
    i += n
    payload, i = read_bytes(b, i)
    created, i = read_long(b, i)
    updated, i = read_long(b, i)
    effective, i = read_long(b, i)
    idem, i = _opt_string(b, i)
    paused, i = _opt_long(b, i)
    resumed, i = _opt_long(b, i)
    last, i = _opt_string(b, i)
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes where the body should end")
    return (
        tenant, sid, version, state, key, payload, created, updated, effective, idem, paused, resumed, last
    )


def schedule_record(
    header: bytes, tenant: str, schedule_id: str, version: int, state_index: int, spec_key: bytes,
    payload: bytes, created_at_ms: int, updated_at_ms: int, effective_from_ms: int,
    idempotency_key: str | None, paused_at_ms: int | None, resumed_at_ms: int | None,
    last_request_id: str | None,
) -> bytes:
    """A ``Schedule`` record, what :func:`scan_body` reads (its fields in the same order, the spec
    as ``spec_key``: every spec field but the payload, encoded, then the payload)."""
    return b"".join((
        header,
        avro_string(tenant),
        avro_string(schedule_id),
        avro_long(version),
        avro_long(state_index),
        spec_key,
        avro_long(len(payload)),
        payload,
        avro_long(created_at_ms),
        avro_long(updated_at_ms),
        avro_long(effective_from_ms),
        _w_opt_string(idempotency_key),
        _w_opt_long(paused_at_ms),
        _w_opt_long(resumed_at_ms),
        _w_opt_string(last_request_id),
    ))


def version_record(
    header: bytes, schedule_id: str, tenant: str, version: int, state_index: int, updated_at_ms: int,
    paused_at_ms: int | None, resumed_at_ms: int | None,
) -> bytes:
    """A ``VersionRecord`` (``state_index``: the state's position among the enum's symbols)."""
    return b"".join((
        header,
        avro_string(schedule_id),
        avro_string(tenant),
        avro_long(version),
        avro_long(state_index),
        avro_long(updated_at_ms),
        _w_opt_long(paused_at_ms),
        _w_opt_long(resumed_at_ms),
    ))


OccurrenceBody = tuple[str, str, str, int, int, int, int, int, int, str, bytes, "int | None", int]
"""An ``Occurrence``'s fields in schema order (``lane`` its symbol's index), then the offset where
``scheduled_for_ms`` ends."""


def occurrence_body(b: bytes) -> OccurrenceBody:
    """The fields of an ``Occurrence`` body that starts at offset 10 of ``b`` and ends with it."""
    oid, i = read_string(b, 10)
    sid, i = read_string(b, i)
    tenant, i = read_string(b, i)
    version, i = read_long(b, i)
    scheduled_for, i = read_long(b, i)
    cut = i
    available_at, i = read_long(b, i)
    enqueued_at, i = read_long(b, i)
    attempt, i = read_long(b, i)
    lane, i = read_long(b, i)
    handler, i = read_string(b, i)
    payload, i = read_bytes(b, i)
    deadline, i = _opt_long(b, i)
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes where the body should end")
    if not -0x80000000 <= attempt <= 0x7FFFFFFF:
        raise ValueError(f"attempt {attempt} does not fit an Avro int")
    return (oid, sid, tenant, version, scheduled_for, available_at, enqueued_at, attempt, lane, handler,
            payload, deadline, cut)


VersionBody = tuple[str, str, int, int, int, "int | None", "int | None"]
"""A ``VersionRecord``'s fields in schema order, ``state`` its symbol's index."""


def version_body(b: bytes) -> VersionBody:
    """The fields of a ``VersionRecord`` body that starts at offset 10 of ``b`` and ends with it."""
    sid, i = read_string(b, 10)
    tenant, i = read_string(b, i)
    version, i = read_long(b, i)
    state, i = read_long(b, i)
    updated, i = read_long(b, i)
    paused, i = _opt_long(b, i)
    resumed, i = _opt_long(b, i)
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes where the body should end")
    return sid, tenant, version, state, updated, paused, resumed


EventBody = tuple[str, str, str, int, int, int, "int | None", "str | None", int]
"""An ``OccurrenceEvent``'s fields in schema order, ``state`` its symbol's index."""


def event_body(b: bytes) -> EventBody:
    """The fields of an ``OccurrenceEvent`` body that starts at offset 10 of ``b`` and ends with it
    (what :func:`event_value` writes)."""
    body, i = _event_item(b, 10)
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes where the body should end")
    return body


def event_bodies(b: bytes) -> list[EventBody]:
    """The events of an ``OccurrenceEvents`` body that starts at offset 10 of ``b`` and ends with
    it (an array of ``OccurrenceEvent`` bodies: what :func:`event_run` writes), in order."""
    out: list[EventBody] = []
    count, i = _block(b, 10)
    while count != 0:
        for _ in range(count):
            body, i = _event_item(b, i)
            out.append(body)
        count, i = _block(b, i)
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes where the body should end")
    return out


def _event_item(b: bytes, i: int) -> tuple[EventBody, int]:
    """An ``OccurrenceEvent`` body at ``b[i:]`` and the offset after it (the state as its index)."""
    oid, i = read_string(b, i)
    sid, i = read_string(b, i)
    tenant, i = read_string(b, i)
    version, i = read_long(b, i)
    scheduled_for, i = read_long(b, i)
    state, i = read_long(b, i)
    attempt, i = _opt_long(b, i)
    reason, i = _opt_string(b, i)
    at, i = read_long(b, i)
    return (oid, sid, tenant, version, scheduled_for, state, attempt, reason, at), i


def event_value(
    header: bytes,
    occurrence_id: str,
    schedule_id: str,
    tenant: str,
    version: int,
    scheduled_for_ms: int,
    state_index: int,
    attempt: int | None,
    reason: str | None,
    at_ms: int,
) -> bytes:
    """An ``OccurrenceEvent`` record: ``header`` then its body (``state_index``: the state's
    position among the enum's symbols)."""
    return _event_bytes(header, occurrence_id.encode(), schedule_id.encode(), avro_string(tenant), version,
                        scheduled_for_ms, _event_tail(state_index, attempt, reason, at_ms))


def _event_tail(state_index: int, attempt: int | None, reason: str | None, at_ms: int) -> bytes:
    """An ``OccurrenceEvent``'s fields after ``scheduled_for_ms``, encoded: what a run of a
    burst's events shares (:func:`event_run`)."""
    return b"".join((avro_long(state_index), _w_opt_long(attempt), _w_opt_string(reason), avro_long(at_ms)))


def _event_bytes(
    header: bytes, raw_oid: bytes, raw_sid: bytes, tenant_field: bytes, version: int, scheduled_for_ms: int,
    tail: bytes,
) -> bytes:
    """The ``OccurrenceEvent`` record from its pieces, in schema order: the ids as UTF-8, the
    tenant as its encoded field, and the :func:`_event_tail`. The one place the order is written."""
    return b"".join((header, avro_long(len(raw_oid)), raw_oid, avro_long(len(raw_sid)), raw_sid, tenant_field,
                     avro_long(version), avro_long(scheduled_for_ms), tail))


EventFields = tuple[str, str, str, int, int, str, "str | None", "int | None"]
"""An occurrence event as the processor holds it (``scheduler.processor.model.Event``, a named
tuple): occurrence_id, schedule_id, tenant, version, scheduled_for (epoch s), state, reason,
attempt."""


def event_record(state_index: dict[str, int], at_ms: int, header: bytes, ev: EventFields) -> bytes:
    """:func:`event_value` of the event ``ev`` (``state_index``: each state's position among the
    enum's symbols), unpacked here, compiled, rather than field by field by its caller. The
    arguments a batch shares come first, so that a ``functools.partial`` binds them once."""
    oid, sid, tenant, version, scheduled_for, state, reason, attempt = ev
    return event_value(header, oid, sid, tenant, version, scheduled_for * 1000, state_index[state], attempt,
                       reason, at_ms)


def event_run(
    state_index: dict[str, int], at_ms: int, header: bytes, events: list[EventFields], start: int,
    counts: dict[str, int], batch_header: bytes = b"", batch_bytes: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """The records of the run of ``events`` from ``start`` that share its event's tenant, as
    ``produce_batch`` takes them, and the index after the run; each event of the run is added to
    ``counts`` by its state.

    ``batch_header`` empty: one ``OccurrenceEvent`` record an event (``{"value": its
    event_record, "key": its schedule id, UTF-8}``). Else the run's events as ``OccurrenceEvents``
    records (``{"value": ...}``, unkeyed), each ``batch_header`` then one array block of events
    of at most ``batch_bytes`` (at least one event), save that a run of one event is that event's
    keyed record: one record instead of one per event is what the processor, its producer's
    thread and the broker then handle a report (docs/decisions.md, "Several events in one record").

    The loop is compiled: a Python loop building these dicts cost the processor's main thread a
    seventh of a held backlog's time, and a ``collections.Counter`` over the events after it
    another 3 % (docs/performance.md). The run's tenant and the fields after the schedule's
    instant (state, attempt, reason, ``at_ms``: one value for a burst's reports) are encoded
    once, and each schedule id once for the value and the key."""
    tenant = events[start][2]
    tenant_field = avro_string(tenant)
    out: list[dict[str, Any]] = []
    items: list[bytes] = []  # the bodies of the batch being filled
    size = 0
    last_state: str | None = None
    last_attempt: int | None = None
    last_reason: str | None = None
    tail = b""
    raw_sid = b""
    i, n = start, len(events)
    while i < n:
        ev = events[i]
        oid, sid, ev_tenant, version, scheduled_for, state, reason, attempt = ev
        if ev_tenant != tenant:
            break
        if not tail or state != last_state or attempt != last_attempt or reason != last_reason:
            tail = _event_tail(state_index[state], attempt, reason, at_ms)
            last_state, last_attempt, last_reason = state, attempt, reason
        raw_sid = sid.encode()
        value = _event_bytes(b"" if batch_header else header, oid.encode(), raw_sid, tenant_field, version,
                             scheduled_for * 1000, tail)
        if not batch_header:
            out.append({"value": value, "key": raw_sid})
        else:
            if items and size + len(value) > batch_bytes:
                out.append({"value": _events_record(batch_header, items)})
                items, size = [], 0
            items.append(value)  # a body: the batch's header is its record's
            size += len(value)
        counts[state] = counts.get(state, 0) + 1
        i += 1
    if len(items) == 1 and not out:  # a lone event: its own record, keyed, as without batches
        out.append({"value": header + items[0], "key": raw_sid})
    elif items:
        out.append({"value": _events_record(batch_header, items)})
    return out, i


def _events_record(header: bytes, bodies: list[bytes]) -> bytes:
    """An ``OccurrenceEvents`` record: ``header``, then its array as one block of ``bodies``."""
    return b"".join((header, avro_long(len(bodies)), b"".join(bodies), b"\x00"))


def occurrence_head(occurrence_id: str, schedule_id: str) -> bytes:
    """The part of an ``Occurrence`` (dispatch) record that is one occurrence's own, up to its
    schedule id's bytes: its first field and the second's length (:mod:`scheduler.records.dispatch`),
    what the processor encodes ahead of the instant. The schedule id's bytes are the record's key,
    which the processor encodes as it fires anyway."""
    return avro_string(occurrence_id) + avro_long(len(schedule_id.encode()))


def occurrence_run(tenant: str, version: int, scheduled_for_ms: int, available_at_ms: int) -> bytes:
    """The ``Occurrence`` fields after the ids up to ``enqueued_at_ms``: one encoding serves a run
    of occurrences of one tenant and version due at one instant (a burst's strict ones)."""
    return b"".join((avro_string(tenant), avro_long(version), avro_long(scheduled_for_ms),
                     avro_long(available_at_ms)))


def occurrence_record(
    header: bytes, head: bytes, key: bytes, run: bytes, stamp: bytes, attempt: int, lane_index: int,
    handler: str, payload: bytes, deadline_ms: int | None,
) -> bytes:
    """A whole ``Occurrence`` record: ``header``, its ``head`` (:func:`occurrence_head`), its
    schedule id as the UTF-8 ``key`` the record is sent with, ``run`` (:func:`occurrence_run`),
    the encoded ``enqueued_at_ms`` (``stamp``), then the fields after it
    (``lane_index``: the lane's position among the enum's symbols), in one join. A burst writes
    one per occurrence, and schedules rarely share a payload: no cached tail to look up first.

    Raises ValueError when ``attempt`` does not fit an Avro int."""
    if not 1 <= attempt <= 2_147_483_647:
        raise ValueError(f"field attempt: {attempt!r} must be 1..2147483647")
    return b"".join((
        header,
        head,
        key,
        run,
        stamp,
        avro_long(attempt),
        avro_long(lane_index),
        avro_name(handler),
        avro_long(len(payload)),
        payload,
        _w_opt_long(deadline_ms),
    ))
