"""Commands: apply one schedule command to the shard store (DESIGN.md §4 "Commands"), no Kafka.

:func:`apply` is the only entry. Its numbered steps address the command
(replay, tenant, schedule id, partition), then validate what every kind shares
(owner, spec, effective time); a CREATE then goes to :func:`_create`, and every
other kind, once its schedule is found at the expected version and not
canceled, to its row in :data:`CHANGES`. Adding a command kind is one member of
the ``CommandKind`` enum and one row there. Bad input is answered, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.domain import ScheduleSpec, schedule_id_for
from scheduler.domain.ids import new_schedule_id
from scheduler.kafka.partitioner import partition_for
from scheduler.processor import tick
from scheduler.processor.model import (
    ACTIVE,
    CANCELED,
    COMPLETED,
    PAST_ONCE_LIMIT_S,
    PAUSED,
    Entry,
    Event,
    SpecParts,
    spec_parts,
)
from scheduler.processor.outputs import CommandOutcome, TickOutput
from scheduler.processor.recent import Applied
from scheduler.processor.store import ShardStore
from scheduler.tenants import Tenant
from scheduler.vocabulary import CommandKind, RejectCode, ScheduleKind

# Read per command: module globals, where an enum class attribute lookup costs ~100 ns.
_CREATE, _UPDATE, _ONCE = CommandKind.CREATE, CommandKind.UPDATE, ScheduleKind.ONCE
CLOCK_SKEW_S = 300  # a command's issued_at is trusted within this much of the shard's clock


@dataclass(slots=True)
class Command:
    """A command addressed to a schedule of this shard, with what every kind needs checked."""

    kind: str
    request_id: str
    tenant: str
    quota: Tenant
    schedule_id: str
    idempotency_key: str | None
    expected_version: int | None
    spec: ScheduleSpec | None
    parts: SpecParts | None
    effective: int  # from when the change takes effect (epoch s)
    now: int

    def reject(self, code: RejectCode, reason: str) -> CommandOutcome:
        return CommandOutcome(self.request_id, self.tenant, self.schedule_id, False, code=code,
                              reason=reason, kind=self.kind)

    def accepted(self, e: Entry, events: list[Event] | None = None) -> CommandOutcome:
        return CommandOutcome(self.request_id, self.tenant, self.schedule_id, True, version=e.version,
                              kind=self.kind, entry=e, events=events or [])


def apply(
    store: ShardStore,
    *,
    kind: str,
    request_id: str,
    tenant: str,
    schedule_id: str | None,
    idempotency_key: str | None,
    expected_version: int | None,
    spec: ScheduleSpec | None,
    issued_at: int,
    now: int,
) -> CommandOutcome:
    """Validate and apply one schedule command; never raises for bad input.

    1. a ``request_id`` already applied is answered as it was, and changes nothing;
    2. the tenant must be registered and not disabled;
    3. the schedule id: given, or derived for a CREATE (from the idempotency key,
       or a fresh one of this shard);
    4. it must belong to this partition (the producer keyed it by schedule id);
    5. owner, spec and effective time (:func:`_validate`);
    6. a CREATE creates (:func:`_create`); any other kind needs the schedule, at
       the expected version, not canceled, and goes to its row in :data:`CHANGES`;
    7. an accepted change remembers its request id (on the schedule's record too).

    The new state takes effect from ``max(issued_at, lane cursor)``: a create
    fires only at times after it was issued, an update's new version only
    after the update (DESIGN.md §4). A one-time schedule whose time has
    already passed is a late occurrence: the misfire policy decides
    (:func:`arm_new`).
    """
    sid = schedule_id or ""
    done = store.recent.get(request_id) if kind != _CREATE else None
    if done is not None and done.schedule_id == sid and done.kind in (kind, ""):
        return CommandOutcome(
            request_id, done.tenant, done.schedule_id, True, version=done.version, kind=kind,
            reason=f"request {request_id} was already applied (replay): nothing changed",
        )
    t = store.tenants.get(tenant)
    if t is None or not t.active:
        code, why = _tenant_refused(tenant, t)
        return CommandOutcome(request_id, tenant, sid, False, code=code, reason=why, kind=kind)
    addressed = _address(store, kind, tenant, schedule_id, idempotency_key)
    if not isinstance(addressed, str):
        addressed.request_id = request_id
        return addressed
    cmd = Command(kind, request_id, tenant, t, addressed, idempotency_key, expected_version, spec, None,
                  issued_at, now)
    outcome = _validate(store, cmd) or _dispatch(store, cmd)
    if outcome.entry is not None and kind != _CREATE:  # a create's replay: by its key and spec
        store.recent.remember(request_id, Applied(cmd.schedule_id, tenant, kind, outcome.version))
        outcome.entry.last_request_id = request_id
    return outcome


def _tenant_refused(tenant: str, t: Tenant | None) -> tuple[RejectCode, str]:
    """Step 2's rejection: the tenant is not registered, or it is disabled."""
    if t is None:
        return RejectCode.UNKNOWN_TENANT, (
            f"tenant {tenant!r} is not registered: run `ksched tenants add {tenant}`"
        )
    return RejectCode.TENANT_DISABLED, (
        f"tenant {tenant!r} is disabled: its commands are refused and its schedules do not fire "
        f"until an admin runs `ksched tenants enable {tenant}`"
    )


def _address(
    store: ShardStore, kind: str, tenant: str, schedule_id: str | None, key: str | None
) -> str | CommandOutcome:
    """Steps 3-4: the schedule id the command is for, or its rejection (request id unset)."""

    def rej(sid: str, code: RejectCode, reason: str) -> CommandOutcome:
        return CommandOutcome("", tenant, sid, False, code=code, reason=reason, kind=kind)

    if not schedule_id:
        if kind != _CREATE:
            return rej("", RejectCode.INVALID_COMMAND, f"schedule_id is required for {kind}")
        schedule_id = _new_id(store, tenant, key)
    elif kind == _CREATE and key is not None:
        expected_id = schedule_id_for(tenant, key)
        if schedule_id != expected_id:
            return rej(
                schedule_id, RejectCode.INVALID_COMMAND,
                f"schedule_id {schedule_id} is not the id derived from tenant {tenant!r} and "
                f"idempotency_key {key!r} ({expected_id}): derive it with "
                "scheduler.domain.schedule_id_for, or send schedule_id null",
            )
    owner = partition_for(schedule_id.encode(), store.partitions)
    if owner != store.shard_id:
        return rej(
            schedule_id, RejectCode.WRONG_PARTITION,
            f"schedule {schedule_id} belongs to partition {owner}, but the command came on "
            f"partition {store.shard_id}: key the record by its schedule_id and use the "
            "murmur2_random partitioner (docs/contract.md)",
        )
    return schedule_id


def _new_id(store: ShardStore, tenant: str, key: str | None) -> str:
    """The id of a CREATE sent with a null ``schedule_id``: derived from (tenant, key), or a
    random one that belongs to this shard (the record had no schedule id to be keyed by)."""
    if key is not None:
        return schedule_id_for(tenant, key)
    while True:
        sid = new_schedule_id()
        if partition_for(sid.encode(), store.partitions) == store.shard_id:
            return sid


def _validate(store: ShardStore, c: Command) -> CommandOutcome | None:
    """Step 5: the schedule must be the tenant's; a CREATE or UPDATE needs a valid spec; the
    effective time is ``issued_at`` within ±5 min of the shard's clock (client skew), and
    never after now for a one-time spec, which must not be more than a day in the past."""
    e = store.entries.get(c.schedule_id)
    if e is not None and e.tenant != c.tenant:
        return _not_found(c)
    if c.kind in (_CREATE, _UPDATE):
        if c.spec is None:
            return c.reject(RejectCode.INVALID_SPEC, f"{c.kind} needs a spec")
        try:
            c.parts = spec_parts(c.spec)
        except (ValueError, OverflowError) as exc:  # SpecError is a ValueError
            return c.reject(RejectCode.INVALID_SPEC, str(exc))
    c.effective = min(max(c.effective, c.now - CLOCK_SKEW_S), c.now + CLOCK_SKEW_S)
    if c.parts is not None and c.parts.compiled.kind == _ONCE:
        # A one-time job's time is its own: a client clock running ahead must not skip it.
        c.effective = min(c.effective, c.now)
        too_old = _too_old_once(c.parts, c.now)
        replay = c.kind == _CREATE and e is not None  # (answered by _create_again)
        if too_old is not None and not replay:
            return c.reject(RejectCode.INVALID_SPEC, too_old)
    return None


def _not_found(c: Command) -> CommandOutcome:
    return c.reject(RejectCode.NOT_FOUND, f"schedule {c.schedule_id} does not exist for tenant {c.tenant}")


def _too_old_once(parts: SpecParts, now: int) -> str | None:
    """Why a one-time spec is refused for being too far in the past, or None."""
    at = parts.compiled.at_epoch
    if at is None or now - at <= PAST_ONCE_LIMIT_S + parts.policy.max_lateness_s:
        return None
    return (
        f"at: {parts.base.at} ({parts.base.timezone}) is more than {PAST_ONCE_LIMIT_S // 3600} h "
        "(plus max_lateness_s) in the past: give a time in the future, or now to run it at once"
    )


def _dispatch(store: ShardStore, c: Command) -> CommandOutcome:
    """Step 6."""
    e = store.entries.get(c.schedule_id)
    if c.kind == _CREATE:
        return _create(store, c, e)
    if e is None:
        return _not_found(c)
    if c.expected_version is not None and c.expected_version != e.version:
        return c.reject(
            RejectCode.STALE_VERSION,
            f"expected version {c.expected_version} but schedule {c.schedule_id} "
            f"is at version {e.version}: re-read it and retry",
        )
    if e.state == CANCELED:
        return c.reject(RejectCode.TERMINAL, f"schedule {c.schedule_id} is {e.state}; it cannot be changed")
    change = CHANGES.get(c.kind)
    if change is None:
        return c.reject(RejectCode.INVALID_COMMAND, f"kind {c.kind!r} is unknown")
    # A COMPLETED schedule has no fire time left, but its last occurrence may still wait for a
    # worker: cancel still invalidates it (workers recheck the state), and update gives it a new
    # version that fires again (rescheduling a one-time job).
    return change(store, c, e)


def _create(store: ShardStore, c: Command, e: Entry | None) -> CommandOutcome:
    assert c.spec is not None and c.parts is not None
    if e is not None:
        return _create_again(c, e)
    limit = -(-c.quota.max_schedules // store.partitions)
    if store.active_count.get(c.tenant, 0) >= limit:
        return c.reject(
            RejectCode.QUOTA_EXCEEDED,
            f"tenant {c.tenant} has reached max_schedules={c.quota.max_schedules} "
            f"({limit} per shard): cancel schedules or raise the quota",
        )
    e = Entry(
        schedule_id=c.schedule_id, tenant=c.tenant, version=1, state=ACTIVE, parts=c.parts,
        payload=c.spec.payload, effective_from=c.effective, idempotency_key=c.idempotency_key,
        created_at_ms=c.now * 1000,
    )
    store.add(e)
    return c.accepted(e, arm_new(store, e, c.effective, c.now))


def _create_again(c: Command, e: Entry) -> CommandOutcome:
    """A CREATE of a schedule id that exists (the same idempotency key, docs/schedules.md):
    the same spec as the current version is a replay, answered with the schedule as it is;
    a canceled schedule's key is never reused; another spec is a conflict."""
    sid, key = e.schedule_id, c.idempotency_key
    if e.state == CANCELED:
        return c.reject(
            RejectCode.TERMINAL,
            f"schedule {sid} (idempotency_key {key!r}) was canceled at version {e.version}; "
            "a key is never reused: create with another idempotency key",
        )
    if e.spec() != c.spec:
        return c.reject(
            RejectCode.CONFLICT,
            f"schedule {sid} (idempotency_key {key!r}) already exists at version {e.version} with "
            f"a different spec: update it (expected_version {e.version}) or use another key",
        )
    return CommandOutcome(c.request_id, e.tenant, sid, True, version=e.version, kind=CommandKind.CREATE,
                          reason=f"already exists: version {e.version}, {e.state}")


def _update(store: ShardStore, c: Command, e: Entry) -> CommandOutcome:
    assert c.spec is not None and c.parts is not None
    was_counted = e.state in (ACTIVE, PAUSED)
    events = store.drop_pending(e, f"superseded by version {e.version + 1}")
    store.disarm(e)
    new = Entry(
        schedule_id=c.schedule_id, tenant=c.tenant, version=e.version + 1,
        state=e.state if was_counted else ACTIVE, parts=c.parts, payload=c.spec.payload,
        effective_from=c.effective, idempotency_key=e.idempotency_key, created_at_ms=e.created_at_ms,
        # A pause belongs to the version it paused: the workers' recheck refuses that version's
        # occurrences pending through it, never a later version's.
        paused_at_ms=c.now * 1000 if e.state == PAUSED else None, resumed_at_ms=None,
    )
    store.add(new)
    if new.state == ACTIVE:
        events += arm_new(store, new, c.effective, c.now)
    return c.accepted(new, events)


def _pause(store: ShardStore, c: Command, e: Entry) -> CommandOutcome:
    events: list[Event] = []
    if e.state == ACTIVE:
        events = store.drop_pending(e, "paused")
        store.disarm(e)
        e.state = PAUSED
        e.paused_at_ms = c.now * 1000
    elif e.state == COMPLETED and c.schedule_id in store.catch_up_span:
        # A one-time schedule whose late occurrence still waits on the catch-up lane: its time
        # falls in the pause, so it does not run (as for an ACTIVE schedule).
        events = store.drop_pending(e, "paused")
    return c.accepted(e, events)


def _resume(store: ShardStore, c: Command, e: Entry) -> CommandOutcome:
    if e.state == PAUSED:
        e.state = ACTIVE
        e.resumed_at_ms = c.now * 1000
        e.effective_from = max(c.effective, c.now)  # nothing for the paused span
        if not store.arm_from(e, e.effective_from):
            store.complete(e, c.now)
    return c.accepted(e)


def _cancel(store: ShardStore, c: Command, e: Entry) -> CommandOutcome:
    events = store.drop_pending(e, "canceled")
    store.disarm(e)
    store.count(e, -1)
    e.state = CANCELED
    store.finished(e, c.now)
    return c.accepted(e, events)


# The changes of an existing schedule, keyed by CommandKind (CREATE is :func:`_create`); a test checks
# that every kind has its row.
CHANGES: dict[str, Callable[[ShardStore, Command, Entry], CommandOutcome]] = {
    CommandKind.UPDATE: _update,
    CommandKind.PAUSE: _pause,
    CommandKind.RESUME: _resume,
    CommandKind.CANCEL: _cancel,
}


def arm_new(store: ShardStore, e: Entry, after: int, now: int) -> list[Event]:
    """Arm a created or updated version at its first fire time after ``after``.

    A one-time schedule whose time is at or before ``after`` is a late
    occurrence like any other: within ``max_lateness_s`` it is emitted by
    the next tick (this is "run once, now"); beyond it the misfire policy
    decides (SKIP: MISSED; FIRE_ONCE, CATCH_UP: emitted). Either way its
    fate is recorded; the schedule has no further fire time (COMPLETED).
    Returns the events to record.
    """
    if store.arm_from(e, after):
        return []
    store.complete(e, now)
    at = e.compiled.at_epoch
    if at is None or not e.compiled.is_fire_time(at):
        return []  # a cron schedule past its end, or a one-time outside its bounds
    out = TickOutput()
    avail = store.available(e, at)
    if now - avail <= e.policy.max_lateness_s:
        store.queue_catch_up(e, [(at, avail)])
    else:
        tick.misfire(store, e, at, now, out)
    return out.events
