"""The ``Schedule`` record's fast read path: restore reads a million of them.

Restore needs every field of a ``Schedule`` but the spec, which thousands of
schedules share byte for byte except for their payload (its last field). So
:func:`scan` reads the record's own fields by hand and returns the encoded spec
*without its payload* as an opaque key: the caller decodes and compiles a spec
once per distinct key (:func:`spec_of_key`), not once per record.

Finding the end of that key without decoding it relies on Avro's binary
encoding being self-delimiting: if the bytes at the spec's start begin with a
complete encoding ``k`` of the fields before ``payload``, the decoder reads
exactly ``k`` there and stops at its end. So a key seen before is recognised
by one slice and one set lookup per known key length; an unseen one is walked
field by field (:func:`_skip`) once and remembered.

Only records written with the current ``Schedule`` schema take this path;
:func:`scan` returns None for any other, which the caller decodes with
:func:`scheduler.records.decode_fields` (the released versions' resolution).
The field order is checked against the current schema at import, like
:mod:`scheduler.records.dispatch`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, NamedTuple

from fastavro import parse_schema, schemaless_reader

from scheduler.native import load
from scheduler.records.avro_fast import Scanned
from scheduler.records.codec import checked_fields, current_schema
from scheduler.records.errors import RecordDecodeError
from scheduler.records.types import Schedule

_SCHEMA = current_schema(Schedule)
HEADER = _SCHEMA.header
SCHEDULE_FIELDS = (  # the Schedule schema's, in order: what the hand-written reader and writer follow
    "tenant", "schedule_id", "version", "state", "spec", "created_at_ms", "updated_at_ms",
    "effective_from_ms", "idempotency_key", "paused_at_ms", "resumed_at_ms", "last_request_id",
)
_TOP = checked_fields(Schedule, SCHEDULE_FIELDS, __name__)
STATES: tuple[str, ...] = tuple(_TOP[3]["type"]["symbols"])  # ScheduleState's symbols, in order
_SPEC: dict[str, Any] = _TOP[4]["type"]
if _SPEC["fields"][-1]["name"] != "payload":  # pragma: no cover - guards a schema edit
    raise RuntimeError(f"ScheduleSpec's last field is no longer payload: update {__name__}")
# The spec without its payload, as a schema of its own: what a key decodes with.
KEY_SCHEMA: dict[str, Any] = {**_SPEC, "name": "ksched.v1.ScheduleSpecKey", "fields": _SPEC["fields"][:-1]}
_KEY_PARSED = parse_schema(KEY_SCHEMA)
_KEY_LIMIT = 100_000  # distinct keys remembered; past it the table starts over (a cache, not state)


class ScannedSchedule(NamedTuple):
    """A ``Schedule`` record's fields, its spec as ``spec_key`` (every spec field but the
    payload, still encoded) and ``payload``."""

    tenant: str
    schedule_id: str
    version: int
    state: str
    spec_key: bytes
    payload: bytes
    created_at_ms: int
    updated_at_ms: int
    effective_from_ms: int
    idempotency_key: str | None
    paused_at_ms: int | None
    resumed_at_ms: int | None
    last_request_id: str | None


_core = load("scheduler.records.avro_fast")  # compiled when built (make install)
_scan_body: Callable[..., Scanned] = _core.scan_body
_long: Callable[[bytes, int], tuple[int, int]] = _core.read_long
_size: Callable[[bytes, int], tuple[int, int]] = _core.read_size
_make = ScannedSchedule._make  # tuple.__new__: a quarter of the NamedTuple constructor's cost
_known: set[bytes] = set()
_lengths: list[int] = []


def scan(value: bytes) -> ScannedSchedule | None:
    """``value``'s fields if it is a ``Schedule`` in the current schema, else None (decode it
    the general way). Raises :class:`RecordDecodeError` for a truncated or corrupt body."""
    fields = scan_fields(value)
    return None if fields is None else _make(fields)


def scan_fields(value: bytes) -> Scanned | None:
    """:func:`scan`'s fields as a plain tuple in :class:`ScannedSchedule`'s order: restore's hot
    path (a named tuple's attributes cost more than unpacking)."""
    if value[:10] != HEADER:
        return None
    try:
        return _scan_body(value, STATES, _known, _lengths, _key_end)
    except (IndexError, UnicodeDecodeError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise RecordDecodeError(f"Schedule (current schema): truncated or corrupt body: {why}") from None


def _key_end(b: bytes, i: int) -> int:
    """The end of a spec key not seen before (walked field by field), now remembered."""
    end = _skip(KEY_SCHEMA, b, i)
    _remember(b[i:end])
    return end


def _remember(key: bytes) -> None:
    if len(_known) >= _KEY_LIMIT:
        _known.clear()
        _lengths.clear()
    _known.add(key)
    if len(key) not in _lengths:
        _lengths.append(len(key))


def spec_of_key(key: bytes) -> dict[str, Any]:
    """The spec fields (all but ``payload``) a :attr:`ScannedSchedule.spec_key` encodes."""
    try:
        datum: Any = schemaless_reader(io.BytesIO(key), _KEY_PARSED, None)
    except Exception as exc:  # fastavro's errors for a bad body vary (IndexError, ValueError, ...)
        raise RecordDecodeError(f"ScheduleSpec: corrupt body: {type(exc).__name__}: {exc}") from None
    return dict(datum)


_FIXED_SIZE = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_names: dict[str, Any] = {}


def _skip(t: Any, b: bytes, i: int) -> int:
    """The offset after a value of Avro type ``t`` (expanded JSON) starting at ``i``: the slow
    walk, once per distinct spec key."""
    if isinstance(t, list):
        branch, i = _long(b, i)
        return _skip(t[branch], b, i)
    if isinstance(t, dict):
        if "name" in t:
            _names[t["name"]] = _names[t["name"].rsplit(".", 1)[-1]] = t
        return _COMPLEX.get(t["type"], _skip_wrapped)(t, b, i)
    if t in ("int", "long"):
        return _long(b, i)[1]
    if t in ("string", "bytes"):
        n, i = _size(b, i)
        end = i + n
    elif t in _FIXED_SIZE:
        end = i + _FIXED_SIZE[t]
    else:
        return _skip(_names[t], b, i)
    if end > len(b):
        raise IndexError(f"{t} runs past the end")
    return end


def _skip_record(t: Any, b: bytes, i: int) -> int:
    for f in t["fields"]:
        i = _skip(f["type"], b, i)
    return i


def _skip_fixed(t: Any, b: bytes, i: int) -> int:
    end = i + int(t["size"])
    if end > len(b):
        raise IndexError("fixed runs past the end")
    return end


def _skip_blocks(t: Any, b: bytes, i: int) -> int:
    """An array or a map: blocks of items, the last one empty."""
    while True:
        count, i = _long(b, i)
        if count == 0:
            return i
        if count < 0:  # a block with its size in bytes
            count = -count
            i = _long(b, i)[1]
        for _ in range(count):
            if t["type"] == "map":
                i = _skip("string", b, i)
            i = _skip(t["items"] if t["type"] == "array" else t["values"], b, i)


def _skip_wrapped(t: Any, b: bytes, i: int) -> int:
    return _skip(t["type"], b, i)  # {"type": "long"} and the like


_COMPLEX: dict[str, Callable[[Any, bytes, int], int]] = {
    "record": _skip_record,
    "error": _skip_record,
    "enum": lambda t, b, i: _long(b, i)[1],
    "fixed": _skip_fixed,
    "array": _skip_blocks,
    "map": _skip_blocks,
}
