"""The processor's glue between the shard model and the Avro records (``scheduler.records``)."""

from __future__ import annotations

from typing import Any

from scheduler.domain import ScheduleSpec, compile_spec
from scheduler.processor.model import Entry, Event, Lane, Occurrence, Policy
from scheduler.processor.shard import CommandOutcome, Shard, spec_digest
from scheduler.records import (
    AttemptReport,
    CommandResult,
    LaneCursor,
    OccurrenceEvent,
    RecordDecodeError,
    Schedule,
    ScheduleCommand,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ScheduleSpecRecord,
    ShardState,
    VersionRecord,
    decode,
    decode_command_topic,
    encode,
    record_type,
)
from scheduler.records import Occurrence as OccurrenceRecord

__all__ = [
    "RecordDecodeError",
    "apply_command",
    "decode_command_topic",
    "decode_schedule_entry",
    "encode_dispatch",
    "encode_event",
    "encode_result",
    "encode_schedule_change",
    "encode_shard_state",
    "encode_undecodable_result",
    "is_attempt_report",
    "report_kind",
    "restore_state_record",
    "shard_state_key",
]


def _lit(value: str) -> Any:
    """A state name checked by the shard model, passed where the records want a Literal."""
    return value


def shard_state_key(p: int) -> bytes:
    return f"shard:{p}".encode()


def encode_shard_state(shard: Shard, clock: float) -> bytes:
    cursors = tuple(
        LaneCursor(tenant=t, lane=lane.name, at_s=c[0], schedule_id=c[1])  # type: ignore[arg-type]
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
    elif cls is ScheduleRuntime:
        decode(value, ScheduleRuntime)  # runtime state of overlap/retries: issue 5
    else:
        raise RecordDecodeError(f"state record {key!r} is a {cls.__name__}, not ShardState/ScheduleRuntime")


def decode_schedule_entry(value: bytes) -> Entry:
    s = decode(value, Schedule)
    spec = s.spec.to_domain()
    return Entry(
        schedule_id=s.schedule_id,
        tenant=s.tenant,
        version=s.version,
        state=s.state,
        compiled=compile_spec(spec),
        policy=Policy.of(spec),
        handler=spec.handler,
        payload=spec.payload,
        effective_from=s.effective_from_ms // 1000,
        spec_digest=spec_digest(spec),
        idempotency_key=s.idempotency_key,
    )


def is_attempt_report(rec: object) -> bool:
    return isinstance(rec, AttemptReport)


def report_kind(rec: object) -> str:
    return str(getattr(rec, "kind", "?"))


def apply_command(shard: Shard, cmd: ScheduleCommand | AttemptReport, now: int) -> CommandOutcome:
    assert isinstance(cmd, ScheduleCommand)
    spec: ScheduleSpec | None = None
    if cmd.spec is not None:
        try:
            spec = cmd.spec.to_domain()
        except ValueError as exc:
            return CommandOutcome(
                cmd.request_id,
                cmd.tenant,
                cmd.schedule_id or "",
                False,
                code="INVALID_SPEC",
                reason=str(exc),
                kind=cmd.kind,
            )
    if not cmd.schedule_id:
        return CommandOutcome(
            cmd.request_id,
            cmd.tenant,
            "",
            False,
            code="INVALID_COMMAND",
            reason="schedule_id is missing: the SDK derives it from tenant and key",
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
            reason=o.reason,
            code=o.code,
            processed_at_ms=now * 1000,
        )
    )


def encode_undecodable_result(rid: str, reason: str, now: int) -> bytes:
    return encode(
        CommandResult(
            request_id=rid,
            tenant="?",
            schedule_id=None,
            status="REJECTED",
            version=None,
            reason=reason,
            code="UNDECODABLE",
            processed_at_ms=now * 1000,
        )
    )


def encode_schedule_change(
    entry: Entry,
    kind: str,
    request_id: str,
    spec: ScheduleSpec | None,
    now: int,
    previous: bytes | None = None,
) -> tuple[bytes | None, bytes | None, bytes]:
    """The schedules, history and versions records of an accepted change.

    Without a ``spec`` (pause, resume, cancel, completion) the schedules record
    cannot be rebuilt from the entry alone; the caller passes the last record
    value (``previous``) and only its state is changed.
    """
    now_ms = now * 1000
    spec_rec = ScheduleSpecRecord.from_domain(spec) if spec is not None else None
    sched: bytes | None = None
    if spec_rec is not None:
        sched = encode(
            Schedule(
                tenant=entry.tenant,
                schedule_id=entry.schedule_id,
                version=entry.version,
                state=_lit(entry.state),
                spec=spec_rec,
                created_at_ms=now_ms,  # type: ignore[arg-type]
                updated_at_ms=now_ms,
                effective_from_ms=entry.effective_from * 1000,
                idempotency_key=entry.idempotency_key,
            )
        )
    elif previous is not None:
        old = decode(previous, Schedule)
        sched = encode(
            Schedule(
                tenant=old.tenant,
                schedule_id=old.schedule_id,
                version=entry.version,
                state=_lit(entry.state),
                spec=old.spec,
                created_at_ms=old.created_at_ms,  # type: ignore[arg-type]
                updated_at_ms=now_ms,
                effective_from_ms=entry.effective_from * 1000,
                idempotency_key=old.idempotency_key,
                paused_at_ms=now_ms if entry.state == "PAUSED" else old.paused_at_ms,
                resumed_at_ms=now_ms if kind == "RESUME" else old.resumed_at_ms,
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
                spec=spec_rec,
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
        )
    )  # type: ignore[arg-type]
    return sched, hist, version


def encode_dispatch(o: Occurrence, enqueued_at_ms: int) -> bytes:
    return encode(
        OccurrenceRecord(
            occurrence_id=o.occurrence_id,
            schedule_id=o.schedule_id,
            tenant=o.tenant,
            version=o.version,
            scheduled_for_ms=o.scheduled_for * 1000,
            available_at_ms=o.available_at * 1000,
            enqueued_at_ms=enqueued_at_ms,
            attempt=o.attempt,
            lane=o.lane.name,  # type: ignore[arg-type]
            handler=o.handler,
            payload=o.payload,
        )
    )


def encode_event(ev: Event, now: int) -> bytes:
    return encode(
        OccurrenceEvent(
            occurrence_id=ev.occurrence_id,
            schedule_id=ev.schedule_id,
            tenant=ev.tenant,
            version=ev.version,
            scheduled_for_ms=ev.scheduled_for * 1000,
            state=_lit(ev.state),
            reason=ev.reason,
            at_ms=now * 1000,
        )
    )  # type: ignore[arg-type]
