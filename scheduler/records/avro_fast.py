"""Avro binary by hand for the records of the hot paths: varints, the attempt report's body
read, the occurrence event's body written. Standard library only and fully typed, so that it
can be compiled with mypyc (docs/decisions.md) while this file stays the source of truth.

Nothing here knows a schema: :mod:`scheduler.records.report_scan` checks the field order of
the current ``AttemptReport`` and ``OccurrenceEvent`` schemas against the order these
functions read and write, and passes in the enum symbols. Tests pin every function byte for
byte against fastavro.
"""

from __future__ import annotations

from typing import NamedTuple

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


class ScannedReport(NamedTuple):
    """An ``AttemptReport`` read by :func:`scan_report`: the record class's field names, so the
    processor applies either without telling them apart."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for_ms: int
    attempt: int
    token: str
    kind: str
    retryable: bool | None
    error_class: str | None
    error_message: str | None
    worker_id: str
    reported_at_ms: int
    started_at_ms: int | None


class _Bad(Exception):
    """The bytes are not a complete encoding: the caller's general decoder says why."""


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """The long at ``data[pos:]`` and the position after it (_Bad past the end)."""
    end = len(data)
    if pos >= end:
        raise _Bad
    b = data[pos]
    pos += 1
    if b < 0x80:  # one byte: the common case (versions, attempts, string lengths < 64)
        return (b >> 1) ^ -(b & 1), pos
    z = b & 0x7F
    shift = 7
    while True:
        if pos >= end or shift > 63:
            raise _Bad
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


def _string(data: bytes, pos: int) -> tuple[str, int]:
    """The string at ``data[pos:]`` and the position after it (_Bad if truncated or not UTF-8)."""
    n, pos = _long(data, pos)
    stop = pos + n
    if n < 0 or stop > len(data):
        raise _Bad
    try:
        return data[pos:stop].decode(), stop
    except UnicodeDecodeError:
        raise _Bad from None


def _branch(data: bytes, pos: int) -> tuple[bool, int]:
    """A ``["null", T]`` union's index at ``data[pos:]``: False for null, True for the value."""
    if pos >= len(data):
        raise _Bad
    i = data[pos]
    if i > 2 or i == 1:  # the index is 0 or 1, zig-zag encoded: byte 0 or 2
        raise _Bad
    return i == 2, pos + 1


def scan_report(data: bytes, start: int, kinds: tuple[str, ...]) -> ScannedReport | None:
    """The ``AttemptReport`` body at ``data[start:]`` (``kinds``: the report kind enum's
    symbols), or None when the bytes are not exactly one such body (truncated, trailing bytes,
    an int or symbol out of range, invalid UTF-8): the general decoder then answers why."""
    try:
        oid, pos = _string(data, start)
        sid, pos = _string(data, pos)
        tenant, pos = _string(data, pos)
        version, pos = _long(data, pos)
        scheduled_for_ms, pos = _long(data, pos)
        attempt, pos = _long(data, pos)
        token, pos = _string(data, pos)
        k, pos = _long(data, pos)
        retryable: bool | None = None
        present, pos = _branch(data, pos)
        if present:
            if pos >= len(data) or data[pos] > 1:
                raise _Bad
            retryable = data[pos] == 1
            pos += 1
        error_class: str | None = None
        present, pos = _branch(data, pos)
        if present:
            error_class, pos = _string(data, pos)
        error_message: str | None = None
        present, pos = _branch(data, pos)
        if present:
            error_message, pos = _string(data, pos)
        worker_id, pos = _string(data, pos)
        reported_at_ms, pos = _long(data, pos)
        started_at_ms: int | None = None
        present, pos = _branch(data, pos)
        if present:
            started_at_ms, pos = _long(data, pos)
    except _Bad:
        return None
    if pos != len(data) or not 0 <= k < len(kinds) or not _INT_MIN <= attempt <= _INT_MAX:
        return None
    return ScannedReport(
        oid, sid, tenant, version, scheduled_for_ms, attempt, token, kinds[k], retryable,
        error_class, error_message, worker_id, reported_at_ms, started_at_ms,
    )


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
    return b"".join((
        header,
        avro_string(occurrence_id),
        avro_string(schedule_id),
        avro_string(tenant),
        avro_long(version),
        avro_long(scheduled_for_ms),
        avro_long(state_index),
        b"\x00" if attempt is None else b"\x02" + avro_long(attempt),
        b"\x00" if reason is None else b"\x02" + avro_string(reason),
        avro_long(at_ms),
    ))
