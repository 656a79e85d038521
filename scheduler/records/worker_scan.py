"""The two records a worker reads per occurrence, read by hand: the dispatch record and the
version record (the pre-effect recheck's view).

fastavro's general reader, and the dataclass built from its dict, cost a worker more CPU per
occurrence than the rest of its no-op path (docs/decisions.md, "Issue 14, item 1"). Records
written with the current schema take these readers; any other (a released older schema, the
Confluent wire format) returns None and is decoded the general way by the caller. A truncated
or corrupt body is a :class:`RecordDecodeError`, as from :func:`scheduler.records.decode`.

:func:`scan_occurrence` also returns where ``scheduled_for_ms`` ends: an ``AttemptReport``
begins with the same five fields, so its encoder copies those bytes
(:func:`scheduler.records.report.report_value`). The field orders are checked against the
current schemas at import, like :mod:`scheduler.records.dispatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.native import load
from scheduler.records.avro_fast import OccurrenceBody, VersionBody
from scheduler.records.codec import current_schema
from scheduler.records.errors import RecordDecodeError
from scheduler.records.types import Occurrence, VersionRecord

_OCC = current_schema(Occurrence)
_OCC_FIELDS = (
    "occurrence_id", "schedule_id", "tenant", "version", "scheduled_for_ms", "available_at_ms",
    "enqueued_at_ms", "attempt", "lane", "handler", "payload", "deadline_ms",
)
_VER = current_schema(VersionRecord)
_VER_FIELDS = ("schedule_id", "tenant", "version", "state", "updated_at_ms", "paused_at_ms", "resumed_at_ms")
_fast = load("scheduler.records.avro_fast")  # compiled when built
occurrence_body: Callable[[bytes], OccurrenceBody] = _fast.occurrence_body
version_body: Callable[[bytes], VersionBody] = _fast.version_body
for _schema, _fields in ((_OCC, _OCC_FIELDS), (_VER, _VER_FIELDS)):
    _actual = tuple(f["name"] for f in _schema.expanded["fields"])
    if _actual != _fields:  # pragma: no cover - guards a schema edit that forgot this module
        raise RuntimeError(f"{_schema.name} fields changed to {_actual}: update {__name__}")


def _symbols(schema: Any, field: str) -> tuple[str, ...]:
    return tuple(next(f["type"]["symbols"] for f in schema.expanded["fields"] if f["name"] == field))


_LANES = _symbols(_OCC, "lane")
_STATES = _symbols(_VER, "state")
_OCC_HEADER = _OCC.header
_VER_HEADER = _VER.header
_ERRORS = (IndexError, UnicodeDecodeError, ValueError)


def scan_occurrence(value: bytes) -> tuple[Occurrence, int] | None:
    """``value`` as an :class:`Occurrence` and the offset where its ``scheduled_for_ms`` ends,
    if it is one in the current schema; else None (decode it the general way)."""
    if value[:10] != _OCC_HEADER:
        return None
    try:
        return _occurrence(value)
    except _ERRORS as exc:
        raise RecordDecodeError(f"Occurrence (current schema): truncated or corrupt body: "
                                f"{type(exc).__name__}: {exc}") from None


def _occurrence(b: bytes) -> tuple[Occurrence, int]:
    oid, sid, tenant, version, scheduled_for, available_at, enqueued_at, attempt, lane, handler, payload, \
        deadline, cut = occurrence_body(b)
    if not 0 <= lane < len(_LANES):
        raise ValueError(f"lane index {lane} of {len(_LANES)} symbols")
    occ = Occurrence(
        occurrence_id=oid, schedule_id=sid, tenant=tenant, version=version, scheduled_for_ms=scheduled_for,
        available_at_ms=available_at, enqueued_at_ms=enqueued_at, attempt=attempt,
        lane=_LANES[lane],  # type: ignore[arg-type]  # a symbol of the schema's enum
        handler=handler, payload=payload, deadline_ms=deadline,
    )
    return occ, cut


VersionFields = tuple[str, str, int, str, int | None, int | None]
"""(schedule_id, tenant, version, state, paused_at_ms, resumed_at_ms) of a version record."""


def scan_version(value: bytes) -> VersionFields | None:
    """What the worker's view keeps of a :class:`VersionRecord` in the current schema (not
    ``updated_at_ms``), or None for any other (decode it the general way)."""
    if value[:10] != _VER_HEADER:
        return None
    try:
        sid, tenant, version, state, _updated, paused, resumed = version_body(value)
        if not 0 <= state < len(_STATES):
            raise ValueError(f"state index {state} of {len(_STATES)} symbols")
        return sid, tenant, version, _STATES[state], paused, resumed
    except _ERRORS as exc:
        raise RecordDecodeError(f"VersionRecord (current schema): truncated or corrupt body: "
                                f"{type(exc).__name__}: {exc}") from None
