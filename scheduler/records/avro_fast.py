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


def avro_long(n: int) -> bytes:
    """Avro ``long`` / ``int``: zig-zag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


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


class _Reader:
    """A cursor over one record's bytes."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def long(self) -> int:
        data, pos, end = self.data, self.pos, self.end
        if pos >= end:
            raise _Bad
        b = data[pos]
        pos += 1
        if b < 0x80:  # one byte: the common case (versions, attempts, lengths < 64)
            self.pos = pos
            return (b >> 1) ^ -(b & 1)
        z = b & 0x7F
        shift = 7
        while True:
            if pos >= end or shift > 63:
                raise _Bad
            b = data[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        self.pos = pos
        return (z >> 1) ^ -(z & 1)

    def string(self) -> str:
        n = self.long()
        start = self.pos
        stop = start + n
        if n < 0 or stop > self.end:
            raise _Bad
        self.pos = stop
        try:
            return self.data[start:stop].decode()
        except UnicodeDecodeError:
            raise _Bad from None

    def branch(self) -> bool:
        """A ``["null", T]`` union's index: False for null, True for the value."""
        i = self.long()
        if i == 0:
            return False
        if i == 1:
            return True
        raise _Bad


def scan_report(data: bytes, start: int, kinds: tuple[str, ...]) -> ScannedReport | None:
    """The ``AttemptReport`` body at ``data[start:]`` (``kinds``: the report kind enum's
    symbols), or None when the bytes are not exactly one such body (truncated, trailing bytes,
    an int or symbol out of range, invalid UTF-8): the general decoder then answers why."""
    r = _Reader(data, start)
    try:
        oid = r.string()
        sid = r.string()
        tenant = r.string()
        version = r.long()
        scheduled_for_ms = r.long()
        attempt = r.long()
        token = r.string()
        k = r.long()
        retryable: bool | None = None
        if r.branch():
            if r.pos >= r.end or data[r.pos] > 1:
                raise _Bad
            retryable = data[r.pos] == 1
            r.pos += 1
        error_class = r.string() if r.branch() else None
        error_message = r.string() if r.branch() else None
        worker_id = r.string()
        reported_at_ms = r.long()
        started_at_ms = r.long() if r.branch() else None
    except _Bad:
        return None
    if r.pos != r.end or not 0 <= k < len(kinds) or not _INT_MIN <= attempt <= _INT_MAX:
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
