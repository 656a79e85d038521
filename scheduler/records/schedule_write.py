"""The ``Schedule`` and ``VersionRecord`` records' fast write path (:func:`schedule_record`,
:func:`version_record`): one of each per accepted command's change, a ``Schedule`` alone per
completed schedule (a burst of one-time schedules completes them all at once).

Through the record dataclasses and the generated writer, a schedule record costs a
``ScheduleSpecRecord`` built from the shared spec and two dataclass constructions. Here the spec
is written as the key :mod:`scheduler.records.schedule_scan` reads back: every spec field but
the payload, encoded once per distinct spec by the generated writer (:func:`spec_key`), then joined
with the record's own fields by the compiled :func:`scheduler.records.avro_fast.schedule_record`.
The bytes are those :func:`scheduler.records.encode` writes (tests pin this). The field orders are
checked against the current schemas at import, like :mod:`scheduler.records.report_scan`. Unlike
the codec, the writers do not check that integers fit an Avro long: the processor's do.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.native import load
from scheduler.records.codec import checked_fields, current_schema
from scheduler.records.fast_write import writer_for
from scheduler.records.schedule_scan import HEADER, KEY_SCHEMA, STATES
from scheduler.records.types import ScheduleSpecRecord, VersionRecord

_VERSION_FIELDS = (
    "schedule_id", "tenant", "version", "state", "updated_at_ms", "paused_at_ms", "resumed_at_ms",
)


_VERSION = checked_fields(VersionRecord, _VERSION_FIELDS, __name__)
# The Schedule's field order, header and states are schedule_scan's, which checks them at import.
STATE_INDEX = {s: i for i, s in enumerate(STATES)}
if _VERSION[3]["type"]["symbols"] != list(STATES):  # pragma: no cover - guards a schema edit
    raise RuntimeError(f"VersionRecord's states differ from Schedule's: update {__name__}")
_VERSION_HEADER = current_schema(VersionRecord).header
_key = writer_for(KEY_SCHEMA)
if _key is None:  # pragma: no cover - guards a schema edit
    raise RuntimeError(f"the generated writer leaves the spec key's schema to fastavro: update {__name__}")
_key_writer: Callable[[ScheduleSpecRecord], bytes] = _key
_fast = load("scheduler.records.avro_fast")  # compiled when built
_schedule_record: Callable[..., bytes] = _fast.schedule_record
_version_record: Callable[..., bytes] = _fast.version_record


def spec_key(spec: ScheduleSpecRecord) -> bytes:
    """``spec``'s fields but its payload, encoded: the key :func:`schedule_scan.scan` returns for a
    schedule record of this spec, whatever its payload. Written by the generated writer of the
    spec's schema without its payload (once per distinct spec: the caller keeps it)."""
    return _key_writer(spec)


def schedule_record(
    tenant: str, schedule_id: str, version: int, state: str, key: bytes, payload: bytes,
    created_at_ms: int, updated_at_ms: int, effective_from_ms: int, idempotency_key: str | None,
    paused_at_ms: int | None, resumed_at_ms: int | None, last_request_id: str | None,
) -> bytes:
    """The ``Schedule`` record of one change: what every accepted change and every tick's
    completion writes (a burst of one-time schedules brings hundreds of thousands of these). The
    spec is given as its :func:`spec_key` ``key`` and ``payload``; ``state`` a symbol of
    ``ScheduleState`` (KeyError otherwise)."""
    return _schedule_record(
        HEADER, tenant, schedule_id, version, STATE_INDEX[state], key, payload, created_at_ms, updated_at_ms,
        effective_from_ms, idempotency_key, paused_at_ms, resumed_at_ms, last_request_id,
    )


def version_record(
    schedule_id: str, tenant: str, version: int, state: str, updated_at_ms: int,
    paused_at_ms: int | None, resumed_at_ms: int | None,
) -> bytes:
    """The ``VersionRecord`` of an accepted command's change (a tick's completion writes none:
    :meth:`scheduler.processor.checkpoint.Checkpoint.completions`); ``state`` as in
    :func:`schedule_record`."""
    return _version_record(
        _VERSION_HEADER, schedule_id, tenant, version, STATE_INDEX[state], updated_at_ms, paused_at_ms,
        resumed_at_ms,
    )
