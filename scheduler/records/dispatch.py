"""The dispatch record's fast path: an ``Occurrence`` encoded from a head prepared ahead.

At the top of an hour a processor emits hundreds of thousands of dispatch
records; DESIGN.md §4 asks that payloads due soon be encoded ahead of time so
that firing costs little more than ``produce()``. Of the ``Occurrence`` fields
only ``enqueued_at_ms`` is unknown before the moment of firing, so a record is

    head  = header | occurrence_id | schedule_id | tenant | version
            | scheduled_for_ms | available_at_ms          (known once the occurrence is)
    stamp = enqueued_at_ms                               (one per tick, shared)
    then    attempt | lane | handler | payload | deadline_ms

and :func:`dispatch_record` of them is byte for byte what
:func:`scheduler.records.encode` writes for the same ``Occurrence`` (a test
pins this against fastavro). The field order is checked against the current
schema at import, so a schema change cannot silently desynchronise the two.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.native import load
from scheduler.records.codec import current_schema
from scheduler.records.types import Occurrence

_fast = load("scheduler.records.avro_fast")  # compiled when built
avro_long: Callable[[int], bytes] = _fast.avro_long
_head: Callable[[bytes, str, str, str, int, int, int], bytes] = _fast.occurrence_head
dispatch_record: Callable[[bytes, bytes, int, int, str, bytes, int | None], bytes] = _fast.occurrence_record
"""``dispatch_record(head, stamp, attempt, lane_index, handler, payload, deadline_ms)``: a whole
record from its head and stamp, as the processor writes one per occurrence (``lane_index``:
:func:`lane_index`)."""
_FIELDS = (
    "occurrence_id",
    "schedule_id",
    "tenant",
    "version",
    "scheduled_for_ms",
    "available_at_ms",
    "enqueued_at_ms",
    "attempt",
    "lane",
    "handler",
    "payload",
    "deadline_ms",
)
_SCHEMA = current_schema(Occurrence)
_actual = tuple(f["name"] for f in _SCHEMA.expanded["fields"])
if _actual != _FIELDS:  # pragma: no cover - guards a schema edit that forgot this module
    raise RuntimeError(f"Occurrence fields changed to {_actual}: update scheduler/records/dispatch.py")
_LANES: tuple[str, ...] = tuple(
    next(f["type"]["symbols"] for f in _SCHEMA.expanded["fields"] if f["name"] == "lane")
)
_LANE_INDEX = {lane: i for i, lane in enumerate(_LANES)}
_HEADER = _SCHEMA.header

__all__ = ["avro_bytes", "avro_long", "dispatch_head", "dispatch_record", "lane_index"]


def avro_bytes(raw: bytes) -> bytes:
    return avro_long(len(raw)) + raw


def dispatch_head(
    occurrence_id: str,
    schedule_id: str,
    tenant: str,
    version: int,
    scheduled_for_ms: int,
    available_at_ms: int,
    header: bytes = _HEADER,
) -> bytes:
    """Everything of the record before ``enqueued_at_ms``, ``header`` included: the single-object
    one by default, or a Confluent one (:class:`scheduler.records.framer.Framer`)."""
    return _head(header, occurrence_id, schedule_id, tenant, version, scheduled_for_ms, available_at_ms)


def lane_index(lane: str) -> int:
    """The position of ``lane`` (a symbol of the ``Lane`` enum) among the schema's symbols."""
    return _LANE_INDEX[lane]
