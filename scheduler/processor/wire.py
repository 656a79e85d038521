"""The tick's outbound records: dispatch, occurrence events, command results, dead letters.

Conversions from the processor's model (:mod:`scheduler.processor.model`, the shard's outcomes)
to the Avro records of :mod:`scheduler.records`; no Kafka here (the checkpoint produces them).
The records a shard restores from are in :mod:`scheduler.processor.wire_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scheduler.domain import occurrence_id
from scheduler.processor.attempts import Attempt
from scheduler.processor.model import DueOccurrence, Entry, Event
from scheduler.processor.outputs import CommandOutcome
from scheduler.processor.store import ShardStore
from scheduler.records import (
    CommandResult,
    DlqEntry,
    Occurrence,
    OccurrenceEvent,
    encode,
    report_scan,
    schema_header,
)
from scheduler.records.dispatch import avro_long, dispatch_head, dispatch_record, dispatch_run, lane_index
from scheduler.vocabulary import CommandStatus, Lane, LaneSymbol, RejectCode, lane_symbol

if TYPE_CHECKING:  # the type only: no Kafka here
    from scheduler.kafka.clients import Messages

MAX_REASON_CHARS = 2000
LANE_NAMES: tuple[LaneSymbol, ...] = tuple(lane_symbol(lane) for lane in Lane)  # by Lane value
_LANE_INDEX: tuple[int, ...] = tuple(lane_index(name) for name in LANE_NAMES)  # by Lane value


_SINGLE_OBJECT = schema_header(Occurrence)
_EVENT_HEADER = schema_header(OccurrenceEvent)


def single_object(tenant: str) -> bytes:
    """The dispatch header of any tenant in the default framing (Confluent: ``Topics.dispatch_header``)."""
    return _SINGLE_OBJECT


def lit(value: str) -> Any:
    """A state name checked by the shard model, passed where the records want a Literal."""
    return value


def prepare_heads(entries: Iterable[Entry]) -> None:
    """Encode, ahead of time, the head of each armed entry's next dispatch record: its occurrence id
    (a hash) and its schedule id's length (:func:`scheduler.records.dispatch.dispatch_head`). The
    schedule id's bytes are the record's key, written as it fires; the rest is shared by the
    occurrences due together, or known only then. What is kept per schedule until its instant is
    a burst's peak memory: 80 B for a 32-character id, where both ids took 112 (docs/decisions.md,
    "only a dispatch record's head is prepared ahead", session 31)."""
    for e in entries:
        f = e.next_for
        if f is None or e.armed_at is None:
            continue
        sid = e.schedule_id
        e.prepared = dispatch_head(occurrence_id(sid, e.version, f), sid)


def dispatch_stamp(enqueued_at_ms: int) -> bytes:
    """The ``enqueued_at_ms`` piece, encoded once per tick."""
    return avro_long(enqueued_at_ms)


def encode_dispatch(
    o: DueOccurrence, stamp: bytes, header_of: Callable[[str], bytes] = single_object
) -> bytes:
    """The dispatch record of ``o`` (its prepared head, or one encoded now) stamped with the tick."""
    head = o.prepared
    if head is None:
        head = dispatch_head(o.occurrence_id, o.schedule_id)
    run = dispatch_run(o.tenant, o.version, o.scheduled_for * 1000, o.available_at * 1000)
    return dispatch_record(header_of(o.tenant), head, o.schedule_id.encode(), run, stamp, o.attempt,
                           _LANE_INDEX[o.lane], o.handler, o.payload, None)


Send = Callable[[str, "Messages", int], None]
"""``send(topic, messages, partition)``: hands ``[{"value": …, "key": …}, …]`` to the client in
order (:func:`scheduler.kafka.clients.produce_run`)."""

DISPATCH_RUN_MAX = 1_000
"""Dispatch records handed to the client at once: enough that a call's cost is shared, few enough
that librdkafka starts sending a burst's first records while the tick encodes the rest."""


def produce_dispatch(
    occs: Iterable[DueOccurrence], stamp: bytes, topic_of: Callable[[str], str],
    header_of: Callable[[str], bytes], send: Send, partition: int,
) -> None:
    """Encode the dispatch record of each of ``occs`` (as :func:`encode_dispatch`), keyed by its
    schedule id, and ``send`` them in order: a run of one tenant's records, up to
    :data:`DISPATCH_RUN_MAX`, at a time.

    The hot path of a burst, one call per tick: each occurrence is unpacked once and its
    record composed here rather than through :func:`encode_dispatch` (a frame and six field
    lookups fewer: ~0.35 µs of ~1.9 per record with ``produce``, measured in session 12)."""
    record, lanes, run_of = dispatch_record, _LANE_INDEX, dispatch_run
    last: str | None = None
    topic, header = "", b""
    runs: dict[int, bytes] = {}  # by version: the runs of one tenant's occurrences due at (f, avail)
    run_f = run_a = -1
    out: Messages = []
    for occ in occs:
        sid, tenant, version, f, avail, lane, handler, payload, attempt, head = occ  # a DueOccurrence
        if tenant is not last:  # a tick's dispatch comes in runs of one tenant
            if out:
                send(topic, out, partition)
                out = []
            last, topic, header = tenant, topic_of(tenant), header_of(tenant)
            run_f = -1
        if f != run_f or avail != run_a:  # a burst's strict ones share (f, avail); a flexible one has its own
            run_f, run_a = f, avail
            runs.clear()
        run = runs.get(version)
        if run is None:  # schedules updated since their creation interleave their versions
            run = runs[version] = run_of(tenant, version, f * 1000, avail * 1000)
        if head is None:
            head = dispatch_head(occ.occurrence_id, sid)
        key = sid.encode()
        value = record(header, head, key, run, stamp, attempt, lanes[lane], handler, payload, None)
        out.append({"value": value, "key": key})
        if len(out) == DISPATCH_RUN_MAX:
            send(topic, out, partition)
            out = []
    if out:
        send(topic, out, partition)


def encode_event(ev: Event, now: int, header: bytes | None = None) -> bytes:
    """The ``ksched.occurrence-events`` record of ``ev``, stamped ``now`` (epoch s); ``header``:
    the framing's (None: single-object), as for every encoder here. Written by hand (one per
    report applied: :mod:`scheduler.records.report_scan`; a batch's: :func:`event_runs`)."""
    return report_scan.event_record(report_scan.STATE_INDEX, now * 1000,
                                    _EVENT_HEADER if header is None else header, ev)


# An OccurrenceEvents record is cut at this many bytes of events: well under the topics'
# max.message.bytes (1 MB by default), as the workers' AttemptReports (worker/reports.py).
EVENT_BATCH_BYTES = 256 * 1024


def event_runs(
    events: list[Event], now: int, events_of: Callable[[str], tuple[str, bytes, bytes]],
    counts: dict[tuple[str, str], int],
) -> Iterator[tuple[str, Messages]]:
    """The records of ``events`` stamped ``now``, in order, in runs of one tenant (a batch's come
    in runs: its reports arrive on one topic per tenant): ``(topic, messages)`` for
    ``produce_batch`` each. ``events_of(tenant)`` gives the tenant's events topic, the
    ``OccurrenceEvent`` header, and the ``OccurrenceEvents`` header (empty: one record an event;
    else a run's events go as batches of up to :data:`EVENT_BATCH_BYTES`, a lone event as its own
    record). Each event is added to ``counts`` by (tenant, state). Each run's records and counts
    are built by one compiled call, not a Python loop."""
    at_ms, i, n = now * 1000, 0, len(events)
    while i < n:
        tenant = events[i][2]
        topic, header, batch_header = events_of(tenant)
        states: dict[str, int] = {}
        # an Event is an EventFields (a named tuple of its fields); a list is invariant
        run, i = report_scan.event_run(report_scan.STATE_INDEX, at_ms, header, events, i, states,  # type: ignore[arg-type]
                                       batch_header, EVENT_BATCH_BYTES)
        for state, k in states.items():
            counts[(tenant, state)] = counts.get((tenant, state), 0) + k
        yield topic, run


def encode_dead_letter(
    a: Attempt, entry: Entry | None, shard: ShardStore, now: int, header: bytes | None = None
) -> bytes:
    """The DLQ record of a dead occurrence (handler and payload of the schedule as it now is)."""
    avail = shard.available(entry, a.scheduled_for) if entry is not None else a.scheduled_for
    return encode(
        DlqEntry(
            occurrence_id=a.occurrence_id,
            schedule_id=a.schedule_id,
            tenant=a.tenant,
            version=a.version,
            scheduled_for_ms=a.scheduled_for * 1000,
            available_at_ms=avail * 1000,
            lane=lane_symbol(Lane.STRICT) if entry is None else LANE_NAMES[entry.lane],
            handler="" if entry is None else entry.base.handler,
            payload=b"" if entry is None else entry.payload,
            attempts=a.attempt,
            last_error_class=a.last_error_class,
            last_error_message=a.last_error_message,
            dead_at_ms=now * 1000,
            reason="dead",
        ),
        header,
    )


def encode_result(o: CommandOutcome, now: int, header: bytes | None = None) -> bytes:
    """The results record answering a command (its reason cut to MAX_REASON_CHARS)."""
    return encode(
        CommandResult(
            request_id=o.request_id,
            tenant=o.tenant,
            schedule_id=o.schedule_id or None,
            status=CommandStatus.ACCEPTED if o.accepted else CommandStatus.REJECTED,
            version=o.version,
            reason=None if o.reason is None else o.reason[:MAX_REASON_CHARS],
            code=o.code,
            processed_at_ms=now * 1000,
        ),
        header,
    )


def encode_undecodable_result(
    rid: str, partition: int, offset: int, key: bytes | None, reason: str, now: int,
    header: bytes | None = None,
) -> bytes:
    """The answer to a record that is not a command: it names what the sender can match, the
    partition and offset it landed on and the key it was sent with."""
    sent = key.decode("utf-8", "replace")[:200] if key else None
    return encode(
        CommandResult(
            request_id=rid,
            tenant="?",
            schedule_id=sent,
            status=CommandStatus.REJECTED,
            version=None,
            reason=f"record at partition {partition} offset {offset} (key {sent!r}): {reason}"[
                :MAX_REASON_CHARS
            ],
            code=RejectCode.UNDECODABLE,
            processed_at_ms=now * 1000,
        ),
        header,
    )
