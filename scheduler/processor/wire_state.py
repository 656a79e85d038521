"""The records a shard is restored from: ``ksched.schedules`` and ``ksched.state``.

Each converter has its inverse here: :func:`encode_schedule_change` / :func:`decode_schedule_entry`
(a schedule, with its history and versions records), :func:`encode_shard_state` /
:func:`encode_runtime` / :func:`restore_state_record` (cursors and runtime state). No Kafka here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from scheduler.domain import ScheduleSpec
from scheduler.domain.bounds import MAX_PAYLOAD_BYTES, check_payload
from scheduler.processor.attempts import Attempt
from scheduler.processor.model import (
    TERMINAL,
    Entry,
    SpecParts,
    entry_rare_times,
    known_spec_parts,
    spec_parts_by,
)
from scheduler.processor.store import ScheduleRuntimeView, ShardStore
from scheduler.processor.wire import lit
from scheduler.records import (
    FinishedAttempt,
    LaneCursor,
    QueuedOccurrence,
    RecordDecodeError,
    RetryTimer,
    RunningAttempt,
    Schedule,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ScheduleSpecRecord,
    ShardState,
    decode,
    decode_fields,
    encode,
    record_type,
    schedule_write,
)
from scheduler.records.avro_fast import Scanned
from scheduler.records.schedule_scan import ScannedSchedule, scan_fields, spec_of_key
from scheduler.records.schedule_write import schedule_record, version_record
from scheduler.vocabulary import CommandKind, Lane

_ON_TIME = (Lane.STRICT, Lane.FLEXIBLE)


def shard_state_key(p: int) -> bytes:
    """The ``ksched.state`` key of shard ``p``'s cursors record (schedules' runtime records use their id)."""
    return f"shard:{p}".encode()


def encode_shard_state(shard: ShardStore, clock: float) -> bytes:
    """The shard's cursors (its watermark) and throttled lanes as one ``ShardState`` record."""
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


def tenant_cursors(shard: ShardStore, tenant: str) -> tuple[LaneCursor, ...]:
    """``tenant``'s STRICT and FLEXIBLE cursors on ``shard`` now (a lane not used yet: the start,
    (0, "")). Called while a tick applies commands, before it emits: what a change applied now
    finds already given its fate."""
    out = []
    for lane in _ON_TIME:
        q = shard.queues.get((tenant, lane))
        at, sid = q.cursor if q is not None else shard.cursors.get((tenant, lane), (0, ""))
        out.append(LaneCursor(tenant=tenant, lane=lane.name, at_s=at, schedule_id=sid))  # type: ignore[arg-type]
    return tuple(out)


def restore_state_record(shard: ShardStore, key: bytes | None, value: bytes) -> None:
    """Load one ``ksched.state`` record into a shard being restored (cursors, or one schedule's
    runtime state for :meth:`Shard.finish_restore`). Raises RecordDecodeError for another type."""
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


_SPEC_KEYS: dict[int, tuple[SpecParts, bytes]] = {}  # id(parts) -> (parts, its spec key)
# Distinct specs remembered; past it the table starts over (a cache). It keeps the parts alive: of
# schedules that ended too, until it starts over. A spec met once (a one-time schedule's own
# instant) costs what the record cost before: one encode.
_SPEC_KEYS_LIMIT = 10_000


def _spec_key(parts: SpecParts, rec: ScheduleSpecRecord | None = None) -> bytes:
    """The encoded spec (all but the payload) of the schedules sharing ``parts``: encoded once
    per distinct spec, not once per record, from ``rec`` (the record of ``parts.base`` with any
    payload) when the caller has it. Kept by the parts' identity (parts are interned, and the
    table holds them, so an id is never reused while it is in the table): a hash of their
    fields costs more than encoding the few ids a burst writes."""
    got = _SPEC_KEYS.get(id(parts))
    if got is not None and got[0] is parts:
        return got[1]
    key = schedule_write.spec_key(rec or ScheduleSpecRecord.from_domain(parts.base, b""))
    if len(_SPEC_KEYS) >= _SPEC_KEYS_LIMIT:
        _SPEC_KEYS.clear()
    _SPEC_KEYS[id(parts)] = (parts, key)
    return key


def decode_schedule_entry(value: bytes) -> Entry:
    """An entry from its ``ksched.schedules`` record (the hot path of restore: no dataclasses;
    a record of the current schema is scanned by hand, its spec compiled once per distinct
    spec: :mod:`scheduler.records.schedule_scan`).

    Raises RecordDecodeError, also for a spec that no longer validates, so that
    restore skips the record with a log line instead of stopping.
    """
    try:
        s = scan_fields(value)
    except RecordDecodeError:  # what the general decoder makes of it decides (it is the laxer)
        s = None
    if s is None:  # also a record of a released schema: resolved by the general decoder
        return _decode_resolved(value)
    key = s[4]
    parts = known_spec_parts(key)
    if parts is None:
        parts = _spec_parts(key, lambda: _spec_of_key(key), s[1])
    return _entry(s, parts)


def _decode_resolved(value: bytes) -> Entry:
    s = decode_fields(value, Schedule)
    spec, sid = s["spec"], s["schedule_id"]
    s["payload"] = spec.pop("payload")
    parts = _spec_parts(tuple(spec.values()), lambda: ScheduleSpecRecord(**spec).to_domain(), sid)
    return _entry(tuple(s.get(f) for f in ScannedSchedule._fields), parts)  # a field older schemas lack: None


def _spec_of_key(key: bytes) -> ScheduleSpec:
    return ScheduleSpecRecord(**spec_of_key(key), payload=b"").to_domain()


def _spec_parts(key: Hashable, build: Callable[[], ScheduleSpec], schedule_id: str) -> SpecParts:
    try:
        return spec_parts_by(key, build)
    except (TypeError, ValueError, OverflowError, EOFError) as exc:
        raise RecordDecodeError(f"schedule {schedule_id}: invalid spec: {exc}") from None


def _entry(f: Scanned | tuple[Any, ...], parts: SpecParts) -> Entry:
    """The entry of a schedule record's fields ``f`` in :class:`ScannedSchedule`'s order (the
    scan's or the general decoder's) and its spec's shared ``parts``."""
    tenant, sid, version, state, _, payload, created, updated, effective, idem, paused, resumed, last = f
    # Positional: a million restored entries pay for keyword matching otherwise (Entry's order).
    return Entry(
        sid, tenant, version, state, parts, payload, effective // 1000, idem, created, paused, resumed, last,
        updated // 1000 if state in TERMINAL else None,
    )


def encode_schedule_change(
    entry: Entry, kind: str, request_id: str, now: int, shard: ShardStore | None = None
) -> tuple[bytes, bytes, bytes]:
    """The schedules, history and versions records of an accepted command's change (a
    completion, the shard's own change, has only its schedules record: :func:`encode_completion`).

    The schedules record is rebuilt from the entry (its spec is the shared base
    plus its payload), so the shard keeps no copy of the record. The history record carries
    the tenant's on-time lane cursors of ``shard`` (:func:`tenant_cursors`): the reconciler's
    bound of which occurrences a change cut off or let in.
    """
    now_ms = now * 1000
    spec_rec = None  # entry.spec()'s record without building that spec: the history's, when it has one
    if kind in (CommandKind.CREATE, CommandKind.UPDATE):
        spec_rec = ScheduleSpecRecord.from_domain(entry.parts.base, check_payload(entry.payload))
    sched, version = encode_schedule_and_version(entry, now_ms, spec_rec)
    hist = encode(
        ScheduleHistoryEntry(
            schedule_id=entry.schedule_id,
            tenant=entry.tenant,
            version=entry.version,
            command=kind,  # type: ignore[arg-type]
            request_id=request_id,
            spec=spec_rec,
            state=lit(entry.state),  # type: ignore[arg-type]
            applied_at_ms=now_ms,
            effective_from_ms=entry.effective_from * 1000,
            cursors=() if shard is None else tenant_cursors(shard, entry.tenant),
        )
    )
    return sched, hist, version


def encode_schedule_and_version(
    entry: Entry, now_ms: int, spec_rec: ScheduleSpecRecord | None = None
) -> tuple[bytes, bytes]:
    """The schedules and versions records of ``entry`` as it is now, after a command
    (:func:`encode_schedule_change` adds its history record). ``spec_rec``: the record of its spec
    when the caller has one (it serves the spec key)."""
    # the last pause: workers refuse an occurrence that was pending through it
    version = version_record(entry.schedule_id, entry.tenant, entry.version, entry.state, now_ms,
                             entry.paused_at_ms, entry.resumed_at_ms)
    return schedule_record(*_schedule_args(entry, now_ms, spec_rec)), version


def encode_completion(entry: Entry, now_ms: int) -> bytes:
    """The schedules record of ``entry``, completed by a tick: no versions record
    (:meth:`Checkpoint.completions` says why)."""
    return schedule_record(*_schedule_args(entry, now_ms, None))


def _schedule_args(entry: Entry, now_ms: int, spec_rec: ScheduleSpecRecord | None) -> tuple[Any, ...]:
    """:func:`schedule_record`'s arguments for ``entry`` as it is now."""
    payload = entry.payload
    if len(payload) > MAX_PAYLOAD_BYTES:
        check_payload(payload)  # a stored payload over the limit raises, as a spec would
    rare, (created_ms, effective) = entry_rare_times(entry)
    return (
        entry.tenant, entry.schedule_id, entry.version, entry.state, _spec_key(entry.parts, spec_rec),
        payload, created_ms, now_ms, effective * 1000, entry.idempotency_key,
        rare.paused_at_ms, rare.resumed_at_ms, rare.last_request_id,
    )
