"""Hand readers of Avro's binary encoding: varints, strings and the whole ``Schedule`` body. Kept
self-contained (stdlib only, fully typed) so that :mod:`scheduler.native` compiles it: restore
reads a million Schedule records through it, the history indexer and the reconciler every
dispatch and occurrence-event record.

:mod:`scheduler.records.schedule_scan` holds the schema checks and the slow paths and explains the
method; this module only walks the bytes. Its functions raise IndexError, ValueError or
UnicodeDecodeError on a truncated or corrupt body; the caller turns them into a
RecordDecodeError.
"""

from __future__ import annotations

from collections.abc import Callable

# The fields in the order of the Schedule schema, the spec as its encoded key without the payload:
# (tenant, schedule_id, version, state, spec_key, payload, created_at_ms, updated_at_ms,
#  effective_from_ms, idempotency_key, paused_at_ms, resumed_at_ms, last_request_id)
Scanned = tuple[
    str, str, int, str, bytes, bytes, int, int, int, "str | None", "int | None", "int | None", "str | None"
]


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


def _opt_long(b: bytes, i: int) -> tuple[int | None, int]:
    return (None, i + 1) if _null(b, i) else read_long(b, i + 1)


def _opt_string(b: bytes, i: int) -> tuple[str | None, int]:
    return (None, i + 1) if _null(b, i) else read_string(b, i + 1)


def _null(b: bytes, i: int) -> bool:
    """Whether the ``["null", T]`` union at ``i`` (its branch byte: 0 or 2) is null."""
    branch = b[i]
    if branch == 0:
        return True
    if branch != 2:
        raise ValueError(f"union branch byte {branch} of [null, ...]")
    return False
