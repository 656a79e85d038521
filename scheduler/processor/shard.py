"""One shard: its schedules, lane queues and the decisions of a tick (no Kafka).

The runtime (``scheduler.processor.runtime``) feeds it commands and the clock
and writes what it returns inside one transaction. Everything here is
deterministic given (restored state, commands, now), except that ``now`` is
the wall clock: decisions taken from it are safe because they commit
atomically with the cursor they move.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from scheduler.domain import ScheduleSpec, occurrence_id, schedule_id_for
from scheduler.domain.ids import jitter_within_s, new_schedule_id
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.attempts import Attempt, Attempts, persisted_running
from scheduler.processor.lanes import Cursor, LaneQueue
from scheduler.processor.lifecycle import admit, attempt_event, emit_retries
from scheduler.processor.model import (
    ACTIVE,
    CANCELED,
    COMPLETED,
    PAST_ONCE_LIMIT_S,
    PAUSED,
    TERMINAL,
    Entry,
    Event,
    Lane,
    Occurrence,
    SpecParts,
    spec_parts,
)
from scheduler.processor.quotas import TokenBucket
from scheduler.processor.recent import Applied, recent_requests
from scheduler.tenants import Tenant

_CATCH_UP = int(Lane.CATCH_UP)
MISFIRE_SCAN_LIMIT = 10_000  # occurrences examined per schedule per misfire pass
PURGE_PER_TICK = 1_000  # finished schedules dropped per tick: keeps a mass expiry's transactions short


def jittered(oid: str, scheduled_for: int, window_s: int, next_for: int | None) -> int:
    """``available_at`` of an occurrence (DESIGN.md §1, refined).

    ``scheduled_for + H(oid) mod w`` with ``w = min(window, next_for - scheduled_for)``:
    capping the window at the gap to the next fire keeps one schedule's
    occurrences in order, so a cursor over ``available_at`` never skips one.
    Uncapped it equals :func:`scheduler.domain.available_at`. Never earlier than
    nominal; a 0 window is strict.
    """
    w = window_s if next_for is None else min(window_s, next_for - scheduled_for)
    return scheduled_for + jitter_within_s(oid, w)


@dataclass(slots=True)
class CommandOutcome:
    """What applying one command produced."""

    request_id: str
    tenant: str
    schedule_id: str
    accepted: bool
    version: int | None = None
    code: str | None = None
    reason: str | None = None
    kind: str = ""
    entry: Entry | None = None  # the schedule as it now is (accepted changes only)
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class TickOutput:
    dispatch: list[Occurrence] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    completed: list[Entry] = field(default_factory=list)  # schedules that reached COMPLETED
    throttled: dict[str, int] = field(default_factory=dict)  # occurrences emitted late by a quota
    throttle_delays: list[tuple[str, int]] = field(default_factory=list)  # (tenant, seconds) of each
    dead: list[Attempt] = field(default_factory=list)  # occurrences declared DEAD (to the DLQ)
    purged: list[Entry] = field(default_factory=list)  # finished schedules past retention: tombstones


@dataclass(slots=True)
class ScheduleRuntimeView:
    """A schedule's persisted runtime state (``ScheduleRuntime`` on ``ksched.state``)."""

    version: int
    catch_up: tuple[int, int] | None = None  # next scheduled_for to emit, last (inclusive)
    running: list[Attempt] = field(default_factory=list)  # overlap-tracked, or retried, in flight
    retries: list[Attempt] = field(default_factory=list)  # RETRY_WAIT attempts
    queued: tuple[str, int, int] | None = None  # QUEUE_ONE waiting (oid, version, scheduled_for)
    finished: list[tuple[str, int, int]] = field(default_factory=list)  # (oid, attempt, until): fencing


class Shard:
    """The state of shard ``shard_id``, owned by exactly one processor at a time."""

    def __init__(
        self,
        shard_id: int,
        tenants: dict[str, Tenant],
        *,
        partitions: int,
        lease_s: int = 30,
        start_lease_s: int = 300,
        finished_retention_s: int = 7 * 86_400,
    ) -> None:
        self.shard_id = shard_id
        self.lease_s = lease_s
        self.finished_retention_s = finished_retention_s
        self._finished: list[tuple[int, str]] = []  # heap of (finished_at, schedule_id): purge order
        self.attempts = Attempts(start_lease_s)
        self.released: list[tuple[str, str, int, int]] = []  # QUEUE_ONE (sid, oid, version, f) to emit
        self._retry_buckets: dict[str, TokenBucket] = {}
        self.restored_runtime: dict[str, ScheduleRuntimeView] = {}
        self.tenants = tenants
        self.partitions = partitions
        self.entries: dict[str, Entry] = {}
        self.queues: dict[tuple[str, Lane], LaneQueue] = {}
        self.cursors: dict[tuple[str, Lane], Cursor] = {}  # restored, before queues exist
        self.restored_throttled: dict[tuple[str, Lane], int] = {}  # the same, for throttled_from
        self.catch_up: dict[str, deque[Occurrence]] = {}
        # Pending catch-up per schedule: [next scheduled_for to emit, last (inclusive)], persisted
        # on ksched.state (ScheduleRuntime) whenever it changes, since the lane cursor that decided
        # them has moved past them. ``runtime_dirty`` names the schedules to rewrite this tick.
        self.catch_up_span: dict[str, tuple[int, int]] = {}
        self.runtime_dirty: set[str] = set()
        self.active_count: dict[str, int] = {}
        self._trigger: dict[str, TokenBucket] = {}
        self._catchup_rate: dict[str, TokenBucket] = {}
        self._prep: Iterator[Entry] | None = None
        self.recent = recent_requests()
        self.ticked_at = 0  # the last tick's now: the watermark of a shard with no lanes
        self._catch_up_throttled: dict[str, int] = {}  # tenant -> since when its quota holds it back
        self.retry_throttled: dict[str, int] = {}  # occurrence id -> since when the retry budget holds it

    # -- queues -----------------------------------------------------------------
    def queue(self, tenant: str, lane: Lane) -> LaneQueue:
        q = self.queues.get((tenant, lane))
        if q is None:
            q = LaneQueue(self.cursors.get((tenant, lane), (0, "")))
            q.throttled_from = self.restored_throttled.pop((tenant, lane), None)
            self.queues[(tenant, lane)] = q
        return q

    def throttled_map(self) -> dict[tuple[str, Lane], int]:
        """``throttled_from`` of each throttled lane (persisted with its cursor)."""
        out = {k: q.throttled_from for k, q in self.queues.items() if q.throttled_from is not None}
        return {**self.restored_throttled, **out}

    def cursor_map(self) -> dict[tuple[str, Lane], Cursor]:
        out = dict(self.cursors)
        out.update({k: q.cursor for k, q in self.queues.items()})
        return out

    def watermark(self) -> int:
        """The shard watermark: the least cursor time over its tenants' lanes."""
        cm = self.cursor_map()
        return min((c[0] for c in cm.values()), default=self.ticked_at)

    # -- arming -----------------------------------------------------------------
    def _occurrence_at(self, e: Entry, f: int) -> tuple[str, int, int | None]:
        oid = occurrence_id(e.schedule_id, e.version, f)
        nxt = e.compiled.next_after_epoch(f) if e.policy.window_s else None
        return oid, jittered(oid, f, e.policy.window_s, nxt), nxt

    def _available(self, e: Entry, f: int) -> int:
        """``available_at`` of ``e``'s occurrence at ``f``; a strict one needs no occurrence id."""
        if not e.policy.window_s:
            return f
        return self._occurrence_at(e, f)[1]

    def arm_from(self, e: Entry, after: int) -> bool:
        """Arm ``e`` at its first occurrence with ``scheduled_for > after`` that is past its lane cursor.

        Returns False (and leaves it disarmed) when the schedule has no further fire time.
        """
        q = self.queue(e.tenant, e.lane)
        cur = q.cursor
        start = max(after, e.effective_from - 1, cur[0] - e.policy.window_s - 1)
        f = e.compiled.next_after_epoch(start)
        while f is not None:
            avail = self._available(e, f)
            if (avail, e.schedule_id) > cur:
                e.next_for = f
                e.prepared = None
                q.arm(e, avail)
                return True
            f = e.compiled.next_after_epoch(f)
        e.next_for = None
        q.disarm(e)
        return False

    def _disarm(self, e: Entry) -> None:
        LaneQueue.disarm(e)
        e.next_for = None
        e.prepared = None

    # -- work ahead of time -------------------------------------------------------
    def to_prepare(self, until: int, limit: int) -> list[Entry]:
        """Up to ``limit`` armed entries due at or before ``until`` whose dispatch record head
        is not yet encoded (DESIGN.md §4: payloads due soon are encoded ahead of time).

        Resumes where the previous call stopped; a new pass, with the ``until`` of
        the call that starts it, begins once the previous pass is done. Entries
        re-armed meanwhile lose their head (``prepared = None``) and are picked up
        by a later pass, or encoded at firing time.
        """
        if self._prep is None:
            self._prep = self._unprepared(until)
        out: list[Entry] = []
        for e in self._prep:
            out.append(e)
            if len(out) >= limit:
                return out
        self._prep = None
        return out

    def _unprepared(self, until: int) -> Iterator[Entry]:
        for q in list(self.queues.values()):
            for obj in q.prepare(until):
                e: Entry = obj  # type: ignore[assignment]
                if e.prepared is None and e.armed_at is not None and e.armed_at <= until:
                    yield e

    def _caught_up(self, occ: Occurrence) -> None:
        """Move the schedule's persisted catch-up span past an emitted catch-up occurrence."""
        span = self.catch_up_span.get(occ.schedule_id)
        if span is None:
            return
        e = self.entries.get(occ.schedule_id)
        nxt = e.compiled.next_after_epoch(occ.scheduled_for) if e is not None else None
        if nxt is None or nxt > span[1]:
            del self.catch_up_span[occ.schedule_id]
        else:
            self.catch_up_span[occ.schedule_id] = (nxt, span[1])
        self.runtime_dirty.add(occ.schedule_id)

    def runtime_changes(self) -> list[tuple[str, ScheduleRuntimeView | None]]:
        """The schedules whose persisted runtime state changed since the last call, with that
        state (None: nothing left, write a tombstone)."""
        dirty = self.runtime_dirty | self.attempts.dirty
        self.runtime_dirty.clear()
        self.attempts.dirty.clear()
        return [(sid, self.runtime_view(sid)) for sid in sorted(dirty)]

    def runtime_view(self, sid: str) -> ScheduleRuntimeView | None:
        e = self.entries.get(sid)
        if e is None:
            return None
        mine = self.attempts.of_schedule(sid)
        overlap = e.policy.overlap
        view = ScheduleRuntimeView(
            version=e.version,
            catch_up=self.catch_up_span.get(sid),
            running=[a for a in mine if a.retry_at is None and persisted_running(a, overlap)],
            retries=[a for a in mine if a.retry_at is not None],
            queued=self.attempts.queued.get(sid),
            finished=self.attempts.fenced_of(sid),
        )
        if (view.catch_up is None and not view.running and not view.retries and view.queued is None
                and not view.finished):
            return None
        return view

    def catch_up_wait_s(self, clock: float) -> float | None:
        """Seconds until pending catch-up work may be emitted (its tenant's catch-up rate);
        None when there is none."""
        waits = [
            b.wait_s(clock) if (b := self._catchup_rate.get(t)) is not None else 0.0
            for t, cq in self.catch_up.items()
            if cq
        ]
        return min(waits) if waits else None

    def due_backlog(self, now: int) -> int:
        """Occurrences due at ``now`` but not yet emitted (throttled or beyond the tick budget)."""
        n = sum(len(cq) for cq in self.catch_up.values()) + len(self.released)
        return n + sum(q.due_count(now) for q in self.queues.values())

    def available(self, e: Entry, f: int) -> int:
        """``available_at`` of ``e``'s occurrence at ``f``."""
        return self._available(e, f)

    def retry_bucket(self, tenant: str, rate: float) -> TokenBucket:
        return self._bucket(self._retry_buckets, tenant, rate)

    # -- restore ----------------------------------------------------------------
    def restore_entry(self, e: Entry) -> None:
        """Add a schedule read from ``ksched.schedules`` (called before cursors are final)."""
        old = self.entries.get(e.schedule_id)
        if old is not None:
            self._disarm(old)
            if old.state in (ACTIVE, PAUSED):
                self.active_count[old.tenant] -= 1
        self.entries[e.schedule_id] = e
        if e.state in (ACTIVE, PAUSED):
            self.active_count[e.tenant] = self.active_count.get(e.tenant, 0) + 1
        if e.last_request_id is not None:
            self.recent.remember(e.last_request_id, Applied(e.schedule_id, e.tenant, "", e.version))
        if e.state in TERMINAL:
            self.finished(e, e.finished_at or e.effective_from)

    def forget(self, schedule_id: str) -> Entry | None:
        """Drop a schedule from the shard (a tombstone read in restore, or a purge)."""
        e = self.entries.pop(schedule_id, None)
        self.attempts.fenced.pop(schedule_id, None)
        if e is not None:
            self._disarm(e)
            if e.state in (ACTIVE, PAUSED):
                self.active_count[e.tenant] -= 1
        return e

    # -- retention of finished schedules ---------------------------------------------
    def finished(self, e: Entry, at: int) -> None:
        """``e`` reached COMPLETED or CANCELED at ``at``: it is purged ``finished_retention_s`` later."""
        e.finished_at = at
        heapq.heappush(self._finished, (at, e.schedule_id))

    def purge(self, now: int, limit: int) -> list[Entry]:
        """Up to ``limit`` finished schedules whose retention ran out, dropped from the shard; the
        caller tombstones their records. One still busy (an attempt in flight, late work
        queued) is looked at again a minute later: retention counts from when nothing of it is
        left to run."""
        out: list[Entry] = []
        heap, keep = self._finished, self.finished_retention_s
        while heap and heap[0][0] + keep <= now and len(out) < limit:
            at, sid = heapq.heappop(heap)
            e = self.entries.get(sid)
            if e is None or e.finished_at != at or e.state not in TERMINAL:
                continue  # revived by an update, finished again later, or gone
            if self._busy(sid):
                self.finished(e, now - keep + 60)
                continue
            self.forget(sid)
            out.append(e)
        return out

    def _busy(self, sid: str) -> bool:
        at = self.attempts
        return (
            bool(at.of_schedule(sid))
            or sid in at.queued
            or sid in self.catch_up_span
            or any(r[0] == sid for r in self.released)
        )

    def finish_restore(self, now: int = 0) -> None:
        """Arm every active schedule from the restored cursors; ``now`` dates the completion of
        those that turn out to have no fire time left."""
        for tenant, lane in list(self.cursors):
            self.queue(tenant, lane)  # an idle lane's cursor must follow time too (the watermark)
        for e in self.entries.values():
            if e.state == ACTIVE and not self.arm_from(e, -1):
                e.state = COMPLETED
                self.active_count[e.tenant] -= 1
                self.finished(e, now or e.effective_from)
        for sid, view in sorted(self.restored_runtime.items()):
            owner = self.entries.get(sid)
            if owner is None or owner.version != view.version or owner.state not in (ACTIVE, COMPLETED):
                self.runtime_dirty.add(sid)  # stale: cleared by the next tick
                continue
            if view.catch_up is not None:
                first, last = view.catch_up
                cq = self.catch_up.setdefault(owner.tenant, deque())
                f: int | None = first
                while f is not None and f <= last:
                    cq.append(
                        Occurrence(sid, owner.tenant, owner.version, f, self._available(owner, f),
                                   _CATCH_UP, owner.base.handler, owner.payload)
                    )
                    f = owner.compiled.next_after_epoch(f)
                self.catch_up_span[sid] = view.catch_up
            for a in (*view.running, *view.retries):
                self.attempts.track(a)
                if owner.policy.overlap != "ALLOW":  # a retrying occurrence still occupies it
                    self.attempts.occupying.setdefault(sid, a.occurrence_id)
            if view.finished:
                self.attempts.restore_fenced(sid, view.finished)
            if view.queued is not None:
                self.attempts.queued[sid] = view.queued
                if sid not in self.attempts.occupying:  # released before the crash, not yet emitted
                    self.released.append((sid, *view.queued))
        self.restored_runtime.clear()

    # -- commands ---------------------------------------------------------------
    def _reject(
        self, cmd_kind: str, rid: str, tenant: str, sid: str, code: str, reason: str
    ) -> CommandOutcome:
        return CommandOutcome(rid, tenant, sid, False, code=code, reason=reason, kind=cmd_kind)

    def apply(
        self,
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

        The new state takes effect from ``max(issued_at, lane cursor)``: a create
        fires only at times after it was issued, an update's new version only
        after the update (DESIGN.md §4). A one-time schedule whose time has
        already passed is a late occurrence: the misfire policy decides
        (:meth:`_arm_new`). A command whose ``request_id`` was already applied
        is answered as it was, and changes nothing (``self.recent``).
        """
        rej = self._reject
        sid = schedule_id or ""
        done = self.recent.get(request_id) if kind != "CREATE" else None
        if done is not None and done.schedule_id == sid and done.kind in (kind, ""):
            return CommandOutcome(
                request_id, done.tenant, done.schedule_id, True, version=done.version, kind=kind,
                reason=f"request {request_id} was already applied (replay): nothing changed",
            )
        t = self.tenants.get(tenant)
        if t is None:
            return rej(
                kind,
                request_id,
                tenant,
                sid,
                "UNKNOWN_TENANT",
                f"tenant {tenant!r} is not registered: run `ksched tenants add {tenant}`",
            )
        if not schedule_id:
            if kind != "CREATE":
                return rej(kind, request_id, tenant, "", "INVALID_COMMAND",
                           f"schedule_id is required for {kind}")
            schedule_id = self._new_id(tenant, idempotency_key)
        elif kind == "CREATE" and idempotency_key is not None:
            expected_id = schedule_id_for(tenant, idempotency_key)
            if schedule_id != expected_id:
                return rej(
                    kind, request_id, tenant, schedule_id, "INVALID_COMMAND",
                    f"schedule_id {schedule_id} is not the id derived from tenant {tenant!r} and "
                    f"idempotency_key {idempotency_key!r} ({expected_id}): derive it with "
                    "scheduler.domain.schedule_id_for, or send schedule_id null",
                )
        owner = partition_for(schedule_id.encode(), self.partitions)
        if owner != self.shard_id:
            return rej(
                kind, request_id, tenant, schedule_id, "WRONG_PARTITION",
                f"schedule {schedule_id} belongs to partition {owner}, but the command came on "
                f"partition {self.shard_id}: key the record by its schedule_id and use the "
                "murmur2_random partitioner (docs/contract.md)",
            )
        outcome = self._apply(
            kind=kind, request_id=request_id, t=t, tenant=tenant, schedule_id=schedule_id,
            idempotency_key=idempotency_key, expected_version=expected_version, spec=spec,
            issued_at=issued_at, now=now,
        )
        if outcome.entry is not None and kind != "CREATE":  # a create's replay: by its key and spec
            self.recent.remember(request_id, Applied(schedule_id, tenant, kind, outcome.version))
            outcome.entry.last_request_id = request_id
        return outcome

    def _new_id(self, tenant: str, key: str | None) -> str:
        """The id of a CREATE sent with a null ``schedule_id``: derived from (tenant, key), or a
        random one that belongs to this shard (the record had no schedule id to be keyed by)."""
        if key is not None:
            return schedule_id_for(tenant, key)
        while True:
            sid = new_schedule_id()
            if partition_for(sid.encode(), self.partitions) == self.shard_id:
                return sid

    def _apply(
        self,
        *,
        kind: str,
        request_id: str,
        t: Tenant,
        tenant: str,
        schedule_id: str,
        idempotency_key: str | None,
        expected_version: int | None,
        spec: ScheduleSpec | None,
        issued_at: int,
        now: int,
    ) -> CommandOutcome:
        rej = self._reject
        e = self.entries.get(schedule_id)
        if e is not None and e.tenant != tenant:
            return rej(
                kind,
                request_id,
                tenant,
                schedule_id,
                "NOT_FOUND",
                f"schedule {schedule_id} does not exist for tenant {tenant}",
            )
        parts: SpecParts | None = None
        if kind in ("CREATE", "UPDATE"):
            if spec is None:
                return rej(kind, request_id, tenant, schedule_id, "INVALID_SPEC", f"{kind} needs a spec")
            try:
                parts = spec_parts(spec)
            except (ValueError, OverflowError) as exc:  # SpecError is a ValueError
                return rej(kind, request_id, tenant, schedule_id, "INVALID_SPEC", str(exc))
        effective = min(max(issued_at, now - 300), now + 300)  # clamp client clock skew to ±5 min
        if parts is not None and parts.compiled.kind == "once":
            # A one-time job's time is its own: a client clock running ahead must not skip it.
            effective = min(effective, now)
            too_old = self._too_old_once(parts, now)
            if too_old is not None and not (kind == "CREATE" and e is not None):  # (a replay is answered)
                return rej(kind, request_id, tenant, schedule_id, "INVALID_SPEC", too_old)
        if kind == "CREATE":
            assert spec is not None and parts is not None
            if e is not None:
                return self._create_again(e, request_id, spec, idempotency_key)
            limit = -(-t.max_schedules // self.partitions)
            if self.active_count.get(tenant, 0) >= limit:
                return rej(
                    kind,
                    request_id,
                    tenant,
                    schedule_id,
                    "QUOTA_EXCEEDED",
                    f"tenant {tenant} has reached max_schedules={t.max_schedules} "
                    f"({limit} per shard): cancel schedules or raise the quota",
                )
            e = Entry(
                schedule_id=schedule_id,
                tenant=tenant,
                version=1,
                state=ACTIVE,
                parts=parts,
                payload=spec.payload,
                effective_from=effective,
                idempotency_key=idempotency_key,
                created_at_ms=now * 1000,
            )
            self.entries[schedule_id] = e
            self.active_count[tenant] = self.active_count.get(tenant, 0) + 1
            return CommandOutcome(
                request_id, tenant, schedule_id, True, version=1, kind=kind, entry=e,
                events=self._arm_new(e, effective, now),
            )
        if e is None:
            return rej(
                kind,
                request_id,
                tenant,
                schedule_id,
                "NOT_FOUND",
                f"schedule {schedule_id} does not exist for tenant {tenant}",
            )
        if expected_version is not None and expected_version != e.version:
            return rej(
                kind,
                request_id,
                tenant,
                schedule_id,
                "STALE_VERSION",
                f"expected version {expected_version} but schedule {schedule_id} "
                f"is at version {e.version}: re-read it and retry",
            )
        if e.state == CANCELED:
            return rej(
                kind,
                request_id,
                tenant,
                schedule_id,
                "TERMINAL",
                f"schedule {schedule_id} is {e.state}; it cannot be changed",
            )
        # A COMPLETED schedule has no fire time left, but its last occurrence may still
        # wait for a worker: cancel still invalidates it (workers recheck the state), and
        # update gives it a new version that fires again (rescheduling a one-time job).
        was_counted = e.state in (ACTIVE, PAUSED)
        events: list[Event] = []
        if kind == "UPDATE":
            assert spec is not None and parts is not None
            events = self._drop_pending(e, f"superseded by version {e.version + 1}")
            self._disarm(e)
            new = Entry(
                schedule_id=schedule_id,
                tenant=tenant,
                version=e.version + 1,
                state=e.state if was_counted else ACTIVE,
                parts=parts,
                payload=spec.payload,
                effective_from=effective,
                idempotency_key=e.idempotency_key,
                created_at_ms=e.created_at_ms,
                # A pause belongs to the version it paused: the workers' recheck refuses that
                # version's occurrences pending through it, never a later version's.
                paused_at_ms=now * 1000 if e.state == PAUSED else None,
                resumed_at_ms=None,
            )
            self.entries[schedule_id] = new
            if not was_counted:
                self.active_count[tenant] = self.active_count.get(tenant, 0) + 1
            if new.state == ACTIVE:
                events += self._arm_new(new, effective, now)
            return CommandOutcome(
                request_id,
                tenant,
                schedule_id,
                True,
                version=new.version,
                kind=kind,
                entry=new,
                events=events,
            )
        if kind == "PAUSE":
            if e.state == ACTIVE:
                events = self._drop_pending(e, "paused")
                self._disarm(e)
                e.state = PAUSED
                e.paused_at_ms = now * 1000
            elif e.state == COMPLETED and schedule_id in self.catch_up_span:
                # A one-time schedule whose late occurrence still waits on the catch-up lane:
                # its time falls in the pause, so it does not run (as for an ACTIVE schedule).
                events = self._drop_pending(e, "paused")
            return CommandOutcome(
                request_id, tenant, schedule_id, True, version=e.version, kind=kind, entry=e, events=events
            )
        if kind == "RESUME":
            if e.state == PAUSED:
                e.state = ACTIVE
                e.resumed_at_ms = now * 1000
                e.effective_from = max(effective, now)  # nothing for the paused span
                if not self.arm_from(e, e.effective_from):
                    e.state = COMPLETED
                    self.active_count[tenant] -= 1
                    self.finished(e, now)
            return CommandOutcome(
                request_id, tenant, schedule_id, True, version=e.version, kind=kind, entry=e
            )
        if kind == "CANCEL":
            events = self._drop_pending(e, "canceled")
            self._disarm(e)
            e.state = CANCELED
            if was_counted:
                self.active_count[tenant] -= 1
            self.finished(e, now)
            return CommandOutcome(
                request_id, tenant, schedule_id, True, version=e.version, kind=kind, entry=e, events=events
            )
        return rej(kind, request_id, tenant, schedule_id, "INVALID_COMMAND", f"kind {kind!r} is unknown")

    def _create_again(
        self, e: Entry, request_id: str, spec: ScheduleSpec, key: str | None
    ) -> CommandOutcome:
        """A CREATE of a schedule id that exists (the same idempotency key, docs/schedules.md):
        the same spec as the current version is a replay, answered with the schedule as it is;
        a canceled schedule's key is never reused; another spec is a conflict."""
        sid, tenant = e.schedule_id, e.tenant
        if e.state == CANCELED:
            return self._reject(
                "CREATE", request_id, tenant, sid, "TERMINAL",
                f"schedule {sid} (idempotency_key {key!r}) was canceled at version {e.version}; "
                "a key is never reused: create with another idempotency key",
            )
        if e.spec() != spec:
            return self._reject(
                "CREATE", request_id, tenant, sid, "CONFLICT",
                f"schedule {sid} (idempotency_key {key!r}) already exists at version {e.version} with "
                f"a different spec: update it (expected_version {e.version}) or use another key",
            )
        return CommandOutcome(
            request_id, tenant, sid, True, version=e.version, kind="CREATE",
            reason=f"already exists: version {e.version}, {e.state}",
        )

    @staticmethod
    def _too_old_once(parts: SpecParts, now: int) -> str | None:
        """Why a one-time spec is refused for being too far in the past, or None."""
        at = parts.compiled.at_epoch
        if at is None or now - at <= PAST_ONCE_LIMIT_S + parts.policy.max_lateness_s:
            return None
        return (
            f"at: {parts.base.at} ({parts.base.timezone}) is more than {PAST_ONCE_LIMIT_S // 3600} h "
            "(plus max_lateness_s) in the past: give a time in the future, or now to run it at once"
        )

    def _arm_new(self, e: Entry, after: int, now: int) -> list[Event]:
        """Arm a created or updated version at its first fire time after ``after``.

        A one-time schedule whose time is at or before ``after`` is a late
        occurrence like any other: within ``max_lateness_s`` it is emitted by
        the next tick (this is "run once, now"); beyond it the misfire policy
        decides (SKIP: MISSED; FIRE_ONCE, CATCH_UP: emitted). Either way its
        fate is recorded; the schedule has no further fire time (COMPLETED).
        Returns the events to record.
        """
        if self.arm_from(e, after):
            return []
        e.state = COMPLETED
        self.active_count[e.tenant] -= 1
        self.finished(e, now)
        at = e.compiled.at_epoch
        if at is None or e.compiled.next_after_epoch(at - 1) != at:
            return []  # a cron schedule past its end, or a one-time outside its bounds
        out = TickOutput()
        avail = self._available(e, at)
        if now - avail <= e.policy.max_lateness_s:
            self._queue_catch_up(e, [(at, avail)])
        else:
            self._misfire(e, at, now, out)
        return out.events

    def _queue_catch_up(self, e: Entry, late: list[tuple[int, int]]) -> None:
        """Queue ``e``'s late occurrences ``(scheduled_for, available_at)`` on the catch-up lane;
        the span is persisted on ``ksched.state`` until they are emitted."""
        self.catch_up_span[e.schedule_id] = (late[0][0], late[-1][0])
        self.runtime_dirty.add(e.schedule_id)
        cq = self.catch_up.setdefault(e.tenant, deque())
        for sf, avail in late:
            cq.append(
                Occurrence(
                    e.schedule_id, e.tenant, e.version, sf, avail, _CATCH_UP, e.base.handler, e.payload
                )
            )

    def _drop_pending(self, e: Entry, reason: str, state: str = "CANCELED") -> list[Event]:
        """Drop the schedule's waiting work — catch-up occurrences, retries, the QUEUE_ONE
        occurrence, a released one not yet emitted; each gets a ``state`` event."""
        sid = e.schedule_id
        events: list[Event] = []
        q = self.catch_up.get(e.tenant)
        if q:
            keep: deque[Occurrence] = deque()
            for o in q:
                if o.schedule_id == sid:
                    events.append(
                        Event(o.occurrence_id, sid, o.tenant, o.version, o.scheduled_for, state, reason)
                    )
                else:
                    keep.append(o)
            self.catch_up[e.tenant] = keep
        if self.catch_up_span.pop(sid, None) is not None:
            self.runtime_dirty.add(sid)
        if state != "CANCELED":
            return events  # a later misfire supersedes only the catch-up backlog
        queued = self.attempts.queued.get(sid)
        if queued is not None:
            oid, version, f = queued
            events.append(Event(oid, sid, e.tenant, version, f, state, reason, 1))
        self.released = [r for r in self.released if r[0] != sid]
        for a in self.attempts.drop_schedule(sid):
            self.retry_throttled.pop(a.occurrence_id, None)
            events.append(attempt_event(a, state, reason))
        return events

    def close(self) -> None:
        """Drop references the shard holds to itself (the preparation pass), so that a dropped
        shard is freed even though its entries were frozen out of the cyclic GC."""
        self._prep = None

    # -- the tick ---------------------------------------------------------------
    def _bucket(self, buckets: dict[str, TokenBucket], tenant: str, rate: float) -> TokenBucket:
        """The shard's token bucket for ``tenant`` in ``buckets``, at this shard's share of the
        tenant's cluster-wide ``rate``: ``rate / partitions`` (docs/schedules.md, quotas)."""
        share = rate / self.partitions
        b = buckets.get(tenant)
        if b is None or b.rate != share:
            b = TokenBucket(share, burst=max(int(share), 1))
            buckets[tenant] = b
        return b

    def due(self, now: int, budget: int, clock: float) -> TickOutput:
        """Decide the occurrences to emit now: strict, then flexible, then catch-up.

        Round-robin across tenants within a lane, each within its trigger-rate
        quota (catch-up: catch-up rate). At most ``budget`` dispatches; what is
        left stays due for the next tick. Throttled work is delayed, never
        dropped: from the tick a tenant's quota first holds a lane back, that
        lane's lateness is measured at that tick, not now (``LaneQueue.throttled_from``),
        so waiting for one's own quota never turns an occurrence MISSED.
        """
        self.ticked_at = now
        out = TickOutput()
        tenants = sorted({t for t, _ in self.queues} | set(self.catch_up))
        for lane in (Lane.STRICT, Lane.FLEXIBLE):
            active = [t for t in tenants if (t, lane) in self.queues]
            while budget > 0 and active:
                share = max(1, budget // len(active))
                still: list[str] = []
                for tenant in active:
                    quota = self.tenants.get(tenant)
                    rate = quota.trigger_rate_per_s if quota else 0
                    bucket = self._bucket(self._trigger, tenant, rate)
                    q = self.queues[(tenant, lane)]
                    allowed = min(share, budget, bucket.available(clock))
                    if allowed > 0:
                        taken = q.take(now, allowed)
                        bucket.spend(self._fire(taken, now, out, q.throttled_from), clock)
                        budget -= len(taken)
                    else:
                        taken = []
                    nd = q.next_due()
                    if nd is None or nd > now:
                        q.throttled_from = None
                    elif bucket.available(clock) <= 0:
                        if q.throttled_from is None:
                            q.throttled_from = now
                    elif taken:
                        still.append(tenant)
                active = still
        for tenant in tenants:
            cq = self.catch_up.get(tenant)
            if not cq:
                self._catch_up_throttled.pop(tenant, None)
                continue
            if budget <= 0:
                continue
            quota = self.tenants.get(tenant)
            bucket = self._bucket(self._catchup_rate, tenant, quota.catch_up_rate_per_s if quota else 0)
            tokens = bucket.available(clock)
            n = min(budget, tokens, len(cq))
            since = self._catch_up_throttled.get(tenant)
            for _ in range(n):
                occ = cq.popleft()
                out.dispatch.append(occ)
                self._caught_up(occ)
                if since is not None and now > since:
                    self.record_throttled(out, occ, now - since, "catch_up_rate_per_s")
            bucket.spend(n, clock)
            budget -= n
            if cq and n == tokens and since is None:
                self._catch_up_throttled[tenant] = now  # held back by the quota, not the tick budget
        budget = emit_retries(self, now, budget, clock, out)
        out.purged = self.purge(now, PURGE_PER_TICK)
        # Idle lanes' cursors follow time so the watermark advances.
        for q in self.queues.values():
            if q.next_due() is None or (q.next_due() or 0) > now:
                q.take(now, 0)
        return out

    def record_throttled(self, out: TickOutput, occ: Occurrence, delay_s: int, quota: str) -> None:
        """Record that ``occ`` was emitted ``delay_s`` late because of its tenant's ``quota``."""
        out.throttled[occ.tenant] = out.throttled.get(occ.tenant, 0) + 1
        out.throttle_delays.append((occ.tenant, delay_s))
        out.events.append(
            Event(
                occ.occurrence_id, occ.schedule_id, occ.tenant, occ.version, occ.scheduled_for, "ENQUEUED",
                f"throttled: delayed {delay_s}s by the tenant's {quota} quota", occ.attempt,
            )
        )

    def _fire(self, taken: Iterable[object], now: int, out: TickOutput, throttled_from: int | None) -> int:
        """Give each taken entry its fate and re-arm it; returns the number emitted on time.

        Lateness is measured at ``throttled_from`` when the lane has been held back by its
        tenant's quota since then (time spent throttled is not a misfire), else at ``now``.
        """
        emitted = 0
        ref = now if throttled_from is None else min(now, throttled_from)
        for obj in taken:
            e: Entry = obj  # type: ignore[assignment]
            f = e.next_for
            if f is None or e.state != ACTIVE:
                continue
            pol = e.policy
            avail = self._available(e, f) if pol.window_s else f
            if ref - avail > pol.max_lateness_s:
                nxt = self._misfire(e, f, ref, out)
            elif pol.overlap != "ALLOW" and not admit(self, e, f, avail, out):
                nxt = e.compiled.next_after_epoch(f)
            else:
                occ = Occurrence(
                    e.schedule_id,
                    e.tenant,
                    e.version,
                    f,
                    avail,
                    int(e.lane),
                    e.base.handler,
                    e.payload,
                    1,
                    e.prepared,
                )
                out.dispatch.append(occ)
                emitted += 1
                if throttled_from is not None and now > max(avail, throttled_from):
                    self.record_throttled(out, occ, now - max(avail, throttled_from), "trigger_rate_per_s")
                nxt = e.compiled.next_after_epoch(f)
            e.prepared = None
            if nxt is None:
                e.next_for = None
                e.state = COMPLETED
                self.active_count[e.tenant] -= 1
                self.finished(e, now)
                out.completed.append(e)
            else:
                e.next_for = nxt
                self.queue(e.tenant, e.lane).arm(e, self._available(e, nxt))
        return emitted

    def _misfire(self, e: Entry, f: int, now: int, out: TickOutput) -> int | None:
        """Apply the misfire policy to ``e``'s occurrences from ``f`` that are later than max_lateness.

        Returns the first fire time still within lateness (or future), to re-arm at.
        """
        pol = e.policy
        late: list[tuple[str, int, int]] = []
        cur: int | None = f
        while cur is not None and len(late) < MISFIRE_SCAN_LIMIT:
            oid, avail, _ = self._occurrence_at(e, cur)
            if now - avail <= pol.max_lateness_s:
                break
            late.append((oid, cur, avail))
            cur = e.compiled.next_after_epoch(cur)
        if pol.misfire == "FIRE_ONCE":
            keep = 1
        elif pol.misfire == "CATCH_UP":
            keep = max(0, pol.catch_up_limit)
        else:
            keep = 0
        cut = len(late) - min(keep, len(late))
        for oid, sf, _ in late[:cut]:
            out.events.append(
                Event(
                    oid,
                    e.schedule_id,
                    e.tenant,
                    e.version,
                    sf,
                    "MISSED",
                    f"later than max_lateness={pol.max_lateness_s}s ({pol.misfire})",
                )
            )
        if cut < len(late):
            if e.schedule_id in self.catch_up_span:
                # One backlog per schedule, always its latest late occurrences: the older pending
                # ones are recorded MISSED (the span persisted on ksched.state stays one range).
                out.events += self._drop_pending(e, "superseded by a later misfire", "MISSED")
            self._queue_catch_up(e, [(sf, avail) for _oid, sf, avail in late[cut:]])
        return cur
