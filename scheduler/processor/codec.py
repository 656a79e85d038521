"""The processor's glue between the shard model and the Avro records (``scheduler.records``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.processor import lifecycle
from scheduler.processor.attempts import Attempt
from scheduler.processor.lifecycle import ReportResult
from scheduler.processor.model import Entry, Event, Lane, Occurrence, SpecParts, spec_parts
from scheduler.processor.shard import CommandOutcome, ScheduleRuntimeView, Shard
from scheduler.records import (
    AttemptReport,
    CommandResult,
    DlqEntry,
    FinishedAttempt,
    LaneCursor,
    OccurrenceEvent,
    QueuedOccurrence,
    RecordDecodeError,
    RetryTimer,
    RunningAttempt,
    Schedule,
    ScheduleCommand,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ScheduleSpecRecord,
    ShardState,
    VersionRecord,
    decode,
    decode_command_topic,
    decode_fields,
    encode,
    record_type,
)
from scheduler.records.dispatch import avro_long, dispatch_head, dispatch_tail

__all__ = [
    "AttemptReport",
    "RecordDecodeError",
    "apply_command",
    "apply_report",
    "decode_command_topic",
    "decode_schedule_entry",
    "dispatch_stamp",
    "encode_dead_letter",
    "encode_dispatch",
    "encode_event",
    "encode_result",
    "encode_runtime",
    "encode_schedule_change",
    "encode_shard_state",
    "encode_undecodable_result",
    "prepare_heads",
    "restore_state_record",
    "shard_state_key",
]


MAX_ID_CHARS = 256  # request_id, tenant, schedule_id, idempotency_key: answers and records stay small
MAX_REASON_CHARS = 2000


def _lit(value: str) -> Any:
    """A state name checked by the shard model, passed where the records want a Literal."""
    return value


def shard_state_key(p: int) -> bytes:
    return f"shard:{p}".encode()


def encode_shard_state(shard: Shard, clock: float) -> bytes:
    throttled = shard.throttled_map()
    cursors = tuple(
        LaneCursor(
            tenant=t, lane=lane.name, at_s=c[0], schedule_id=c[1],  # type: ignore[arg-type]
            throttled_from_s=throttled.get((t, lane)),
        )
        for (t, lane), c in sorted(shard.cursor_map().items())
    )
    return encode(
        ShardState(
            shard=shard.shard_id,
            watermark_ms=shard.watermark() * 1000,
            ticks=0,
            occurrences_emitted=0,
            updated_at_ms=int(clock * 1000),
            cursors=cursors,
        )
    )


def restore_state_record(shard: Shard, key: bytes | None, value: bytes) -> None:
    cls = record_type(value)
    if cls is ShardState:
        st = decode(value, ShardState)
        shard.cursors = {(c.tenant, Lane[c.lane]): (c.at_s, c.schedule_id) for c in st.cursors}
        shard.restored_throttled = {
            (c.tenant, Lane[c.lane]): c.throttled_from_s for c in st.cursors if c.throttled_from_s is not None
        }
    elif cls is ScheduleRuntime:
        rt = decode(value, ScheduleRuntime)
        catch_up = None
        if rt.catch_up_cursor_ms is not None and rt.catch_up_until_ms is not None:
            catch_up = (rt.catch_up_cursor_ms // 1000, rt.catch_up_until_ms // 1000)
        shard.restored_runtime[rt.schedule_id] = ScheduleRuntimeView(
            version=rt.version,
            catch_up=catch_up,
            running=[
                Attempt(r.occurrence_id, rt.schedule_id, rt.tenant, r.version, r.scheduled_for_ms // 1000,
                        r.attempt, r.token, r.lease_expires_at_ms // 1000 or None)
                for r in rt.running
            ],
            retries=[
                Attempt(r.occurrence_id, rt.schedule_id, rt.tenant, r.version, r.scheduled_for_ms // 1000,
                        r.attempt, None, None, r.due_at_ms // 1000, r.last_error_class, r.last_error_message)
                for r in rt.retries
            ],
            queued=None if rt.queued is None else (
                rt.queued.occurrence_id, rt.queued.version, rt.queued.scheduled_for_ms // 1000
            ),
            finished=[(f.occurrence_id, f.attempt, f.until_ms // 1000) for f in rt.finished],
        )
    else:
        raise RecordDecodeError(f"state record {key!r} is a {cls.__name__}, not ShardState/ScheduleRuntime")


_PARTS_BY_RECORD: dict[tuple[object, ...], SpecParts] = {}


def _parts_of(spec: dict[str, Any]) -> SpecParts:
    """The interned parts of a decoded spec record without its payload: restore validates
    and compiles each distinct spec once, not once per schedule."""
    key = tuple(spec.values())
    parts = _PARTS_BY_RECORD.get(key)
    if parts is None:
        parts = spec_parts(ScheduleSpecRecord(**spec).to_domain())
        if len(_PARTS_BY_RECORD) >= 100_000:
            _PARTS_BY_RECORD.clear()
        _PARTS_BY_RECORD[key] = parts
    return parts


def encode_runtime(sid: str, tenant: str, view: ScheduleRuntimeView | None, now: int) -> bytes | None:
    """The ``ksched.state`` value of a schedule's runtime state; None (a tombstone) when empty."""
    if view is None:
        return None
    return encode(
        ScheduleRuntime(
            schedule_id=sid,
            tenant=tenant,
            version=view.version,
            running=tuple(
                RunningAttempt(
                    occurrence_id=a.occurrence_id, version=a.version, scheduled_for_ms=a.scheduled_for * 1000,
                    attempt=a.attempt, token=a.token, lease_expires_at_ms=(a.lease_until or 0) * 1000,
                )
                for a in view.running
            ),
            retries=tuple(
                RetryTimer(
                    occurrence_id=a.occurrence_id, version=a.version, scheduled_for_ms=a.scheduled_for * 1000,
                    attempt=a.attempt, due_at_ms=(a.retry_at or 0) * 1000,
                    last_error_class=a.last_error_class, last_error_message=a.last_error_message,
                )
                for a in view.retries
            ),
            queued=None if view.queued is None else QueuedOccurrence(
                occurrence_id=view.queued[0], version=view.queued[1],
                scheduled_for_ms=view.queued[2] * 1000, available_at_ms=view.queued[2] * 1000,
            ),
            finished=tuple(
                FinishedAttempt(occurrence_id=oid, attempt=n, until_ms=until * 1000)
                for oid, n, until in view.finished
                if until > now
            ),
            catch_up_cursor_ms=None if view.catch_up is None else view.catch_up[0] * 1000,
            catch_up_until_ms=None if view.catch_up is None else view.catch_up[1] * 1000,
            updated_at_ms=now * 1000,
        )
    )


def encode_dead_letter(a: Attempt, entry: Entry | None, shard: Shard, now: int) -> bytes:
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
            lane="STRICT" if entry is None else _LANE_NAMES[entry.lane],  # type: ignore[arg-type]
            handler="" if entry is None else entry.base.handler,
            payload=b"" if entry is None else entry.payload,
            attempts=a.attempt,
            last_error_class=a.last_error_class,
            last_error_message=a.last_error_message,
            dead_at_ms=now * 1000,
            reason="dead",
        )
    )


def apply_report(shard: Shard, rep: AttemptReport, now: int) -> ReportResult:
    return lifecycle.apply_report(
        shard,
        kind=rep.kind,
        oid=rep.occurrence_id,
        schedule_id=rep.schedule_id,
        tenant=rep.tenant,
        version=rep.version,
        scheduled_for=rep.scheduled_for_ms // 1000,
        attempt=rep.attempt,
        token=rep.token,
        retryable=rep.retryable,
        error_class=rep.error_class,
        error_message=rep.error_message,
        now=now,
    )


def decode_schedule_entry(value: bytes) -> Entry:
    """An entry from its ``ksched.schedules`` record (the hot path of restore: no dataclasses).

    Raises RecordDecodeError, also for a spec that no longer validates, so that
    restore skips the record with a log line instead of stopping.
    """
    s = decode_fields(value, Schedule)
    spec = s["spec"]
    payload = spec.pop("payload")
    try:
        parts = _parts_of(spec)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordDecodeError(f"schedule {s['schedule_id']}: invalid spec: {exc}") from None
    return Entry(
        schedule_id=s["schedule_id"],
        tenant=s["tenant"],
        version=s["version"],
        state=s["state"],
        parts=parts,
        payload=payload,
        effective_from=s["effective_from_ms"] // 1000,
        idempotency_key=s["idempotency_key"],
        created_at_ms=s["created_at_ms"],
        paused_at_ms=s["paused_at_ms"],
        resumed_at_ms=s["resumed_at_ms"],
        last_request_id=s.get("last_request_id"),
        finished_at=s["updated_at_ms"] // 1000 if s["state"] in ("COMPLETED", "CANCELED") else None,
    )


def apply_command(shard: Shard, cmd: ScheduleCommand | AttemptReport, now: int) -> CommandOutcome:
    """Apply a decoded schedule command to ``shard``. A spec that does not convert (a bound
    overflowed, a bad value) is answered INVALID_SPEC, never raised."""
    assert isinstance(cmd, ScheduleCommand)
    for name, value in (
        ("request_id", cmd.request_id),
        ("tenant", cmd.tenant),
        ("schedule_id", cmd.schedule_id),
        ("idempotency_key", cmd.idempotency_key),
    ):
        if value is not None and len(value) > MAX_ID_CHARS:
            return CommandOutcome(
                cmd.request_id[:MAX_ID_CHARS], cmd.tenant[:MAX_ID_CHARS], "", False,
                code="INVALID_COMMAND", kind=cmd.kind,
                reason=f"{name} is {len(value)} characters long; the limit is {MAX_ID_CHARS}",
            )
    spec: ScheduleSpec | None = None
    if cmd.spec is not None:
        try:
            spec = cmd.spec.to_domain()
        except (ValueError, OverflowError) as exc:
            return CommandOutcome(
                cmd.request_id,
                cmd.tenant,
                cmd.schedule_id or "",
                False,
                code="INVALID_SPEC",
                reason=str(exc),
                kind=cmd.kind,
            )
    return shard.apply(
        kind=cmd.kind,
        request_id=cmd.request_id,
        tenant=cmd.tenant,
        schedule_id=cmd.schedule_id,
        idempotency_key=cmd.idempotency_key,
        expected_version=cmd.expected_version,
        spec=spec,
        issued_at=cmd.issued_at_ms // 1000,
        now=now,
    )


def encode_result(o: CommandOutcome, now: int) -> bytes:
    return encode(
        CommandResult(
            request_id=o.request_id,
            tenant=o.tenant,
            schedule_id=o.schedule_id or None,
            status="ACCEPTED" if o.accepted else "REJECTED",
            version=o.version,
            reason=None if o.reason is None else o.reason[:MAX_REASON_CHARS],
            code=o.code,
            processed_at_ms=now * 1000,
        )
    )


def encode_undecodable_result(
    rid: str, partition: int, offset: int, key: bytes | None, reason: str, now: int
) -> bytes:
    """The answer to a record that is not a command: it names what the sender can match, the
    partition and offset it landed on and the key it was sent with."""
    sent = key.decode("utf-8", "replace")[:200] if key else None
    return encode(
        CommandResult(
            request_id=rid,
            tenant="?",
            schedule_id=sent,
            status="REJECTED",
            version=None,
            reason=f"record at partition {partition} offset {offset} (key {sent!r}): {reason}"[
                :MAX_REASON_CHARS
            ],
            code="UNDECODABLE",
            processed_at_ms=now * 1000,
        )
    )


def encode_schedule_change(
    entry: Entry, kind: str, request_id: str, now: int
) -> tuple[bytes, bytes | None, bytes]:
    """The schedules, history and versions records of an accepted change (or a completion).

    The schedules record is rebuilt from the entry (its spec is the shared base
    plus its payload), so the shard keeps no copy of the record.
    """
    now_ms = now * 1000
    spec_rec = ScheduleSpecRecord.from_domain(entry.spec())
    sched = encode(
        Schedule(
            tenant=entry.tenant,
            schedule_id=entry.schedule_id,
            version=entry.version,
            state=_lit(entry.state),
            spec=spec_rec,
            created_at_ms=entry.created_at_ms,  # type: ignore[arg-type]
            updated_at_ms=now_ms,
            effective_from_ms=entry.effective_from * 1000,
            idempotency_key=entry.idempotency_key,
            paused_at_ms=entry.paused_at_ms,
            resumed_at_ms=entry.resumed_at_ms,
            last_request_id=entry.last_request_id,
        )
    )
    hist = None
    if kind in ("CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL"):
        hist = encode(
            ScheduleHistoryEntry(
                schedule_id=entry.schedule_id,
                tenant=entry.tenant,
                version=entry.version,
                command=kind,  # type: ignore[arg-type]
                request_id=request_id,
                spec=spec_rec if kind in ("CREATE", "UPDATE") else None,
                state=_lit(entry.state),  # type: ignore[arg-type]
                applied_at_ms=now_ms,
                effective_from_ms=entry.effective_from * 1000,
            )
        )
    version = encode(
        VersionRecord(
            schedule_id=entry.schedule_id,
            tenant=entry.tenant,
            version=entry.version,
            state=_lit(entry.state),
            updated_at_ms=now_ms,
            # the last pause: workers refuse an occurrence that was pending through it
            paused_at_ms=entry.paused_at_ms,
            resumed_at_ms=entry.resumed_at_ms,
        )
    )  # type: ignore[arg-type]
    return sched, hist, version


_LANE_NAMES = tuple(lane.name for lane in Lane)


def prepare_heads(entries: Iterable[Entry]) -> None:
    """Encode, ahead of time, the head of each armed entry's next dispatch record."""
    for e in entries:
        f, avail = e.next_for, e.armed_at
        if f is None or avail is None:
            continue
        sid = e.schedule_id
        e.prepared = dispatch_head(
            occurrence_id(sid, e.version, f), sid, e.tenant, e.version, f * 1000, avail * 1000
        )


def dispatch_stamp(enqueued_at_ms: int) -> bytes:
    """The ``enqueued_at_ms`` piece, encoded once per tick."""
    return avro_long(enqueued_at_ms)


def encode_dispatch(o: Occurrence, stamp: bytes) -> bytes:
    """The dispatch record of ``o`` (its prepared head, or one encoded now) stamped with the tick."""
    head = o.prepared
    if head is None:
        head = dispatch_head(
            o.occurrence_id, o.schedule_id, o.tenant, o.version, o.scheduled_for * 1000, o.available_at * 1000
        )
    return head + stamp + dispatch_tail(o.attempt, _LANE_NAMES[o.lane], o.handler, o.payload, None)


def encode_event(ev: Event, now: int) -> bytes:
    return encode(
        OccurrenceEvent(
            occurrence_id=ev.occurrence_id,
            schedule_id=ev.schedule_id,
            tenant=ev.tenant,
            version=ev.version,
            scheduled_for_ms=ev.scheduled_for * 1000,
            state=_lit(ev.state),
            attempt=ev.attempt,
            reason=ev.reason,
            at_ms=now * 1000,
        )
    )  # type: ignore[arg-type]
