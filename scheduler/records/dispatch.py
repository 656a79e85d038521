"""The dispatch record's fast path: an ``Occurrence`` encoded from pieces, one prepared ahead.

At the top of an hour a processor emits hundreds of thousands of dispatch
records; DESIGN.md §4 asks that payloads due soon be encoded ahead of time so
that firing costs little more than ``produce()``. A record is

    header                                       (the tenant's framing: one per tenant)
    head  = occurrence_id | len(schedule_id)     (the occurrence's own: prepared ahead)
    key   = schedule_id's bytes                  (the record's key, encoded as it fires)
    run   = tenant | version | scheduled_for_ms
            | available_at_ms                    (shared by a run of occurrences due together)
    stamp = enqueued_at_ms                       (one per tick, shared)
    then    attempt | lane | handler | payload | deadline_ms

and :func:`dispatch_record` of them is byte for byte what
:func:`scheduler.records.encode` writes for the same ``Occurrence`` (a test
pins this against fastavro). Only the head is kept per armed schedule until
its instant: the header and the run are the same for a whole burst, and the
memory a burst's prepared pieces take is its peak (docs/performance.md). The
field order is checked against the current schema at import, so a schema
change cannot silently desynchronise the pieces.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.native import load
from scheduler.records.codec import checked_fields, current_schema
from scheduler.records.types import Occurrence

_fast = load("scheduler.records.avro_fast")  # compiled when built
avro_long: Callable[[int], bytes] = _fast.avro_long
dispatch_head: Callable[[str, str], bytes] = _fast.occurrence_head
"""``dispatch_head(occurrence_id, schedule_id)``: the piece prepared ahead of the instant."""
dispatch_run: Callable[[str, int, int, int], bytes] = _fast.occurrence_run
"""``dispatch_run(tenant, version, scheduled_for_ms, available_at_ms)``: the piece a run shares."""
dispatch_record: Callable[[bytes, bytes, bytes, bytes, bytes, int, int, str, bytes, int | None], bytes] = (
    _fast.occurrence_record
)
"""``dispatch_record(header, head, key, run, stamp, attempt, lane_index, handler, payload,
deadline_ms)`` (``key``: the schedule id's UTF-8, the record's Kafka key):
a whole record from its pieces, as the processor writes one per occurrence (``lane_index``:
:func:`lane_index`; ``header``: the single-object one, ``schema_header(Occurrence)``, or a
Confluent one, :class:`scheduler.records.framer.Framer`)."""
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
_OCCURRENCE = checked_fields(Occurrence, _FIELDS, __name__)
_LANES: tuple[str, ...] = tuple(_OCCURRENCE[_FIELDS.index("lane")]["type"]["symbols"])
_LANE_INDEX = {lane: i for i, lane in enumerate(_LANES)}

__all__ = ["avro_bytes", "avro_long", "dispatch_head", "dispatch_record", "dispatch_run", "lane_index"]


def avro_bytes(raw: bytes) -> bytes:
    return avro_long(len(raw)) + raw


def lane_index(lane: str) -> int:
    """The position of ``lane`` (a symbol of the ``Lane`` enum) among the schema's symbols."""
    return _LANE_INDEX[lane]
