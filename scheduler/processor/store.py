"""The shard store: one shard's schedules, lane queues, watermark and runtime state (no Kafka).

The store is the state; the roles that change it are functions of it, each in
its own module (Kafka Streams' store / processor / punctuator / restore):

- :mod:`scheduler.processor.commands` applies schedule commands;
- :mod:`scheduler.processor.tick` decides what is due (the punctuator);
- :mod:`scheduler.processor.lifecycle` applies attempt reports, and
  :mod:`scheduler.processor.retry_lane` runs the overlap gate and the RETRY lane,
  both through the narrow :class:`~scheduler.processor.lifecycle.LifecycleContext`;
- :mod:`scheduler.processor.rearm` is restore's last step (arm what was read).

What lives here is what more than one role needs: arming a schedule in its
lane queue, the watermark, the catch-up backlog, the per-tenant quota buckets,
the persisted runtime view of a schedule, and the retention of finished
schedules. Everything is deterministic given (restored state, commands, now).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from scheduler.domain import available_at
from scheduler.processor.attempts import Attempt, Attempts, attempt_event, persisted_running
from scheduler.processor.lanes import Cursor, LaneQueue
from scheduler.processor.model import ACTIVE, COMPLETED, PAUSED, TERMINAL, DueOccurrence, Entry, Event
from scheduler.processor.quota_gate import QuotaGate
from scheduler.processor.quotas import TokenBucket
from scheduler.processor.recent import Applied, recent_requests
from scheduler.processor.shares import RETRY, TRIGGER
from scheduler.tenants import Tenant
from scheduler.vocabulary import Lane, OccurrenceState

_CATCH_UP = int(Lane.CATCH_UP)


@dataclass(slots=True)
class ScheduleRuntimeView:
    """A schedule's persisted runtime state (``ScheduleRuntime`` on ``ksched.state``)."""

    version: int
    catch_up: tuple[int, int] | None = None  # next scheduled_for to emit, last (inclusive)
    running: list[Attempt] = field(default_factory=list)  # overlap-tracked, or retried, in flight
    retries: list[Attempt] = field(default_factory=list)  # RETRY_WAIT attempts
    queued: tuple[str, int, int] | None = None  # QUEUE_ONE waiting (oid, version, scheduled_for)
    finished: list[tuple[str, int, int]] = field(default_factory=list)  # (oid, attempt, until): fencing


class ShardStore:
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
        self.tenants = tenants
        self.partitions = partitions
        self.lease_s = lease_s
        self.finished_retention_s = finished_retention_s
        self.entries: dict[str, Entry] = {}
        self.active_count: dict[str, int] = {}  # ACTIVE or PAUSED schedules per tenant (max_schedules)
        self.queues: dict[tuple[str, Lane], LaneQueue] = {}
        self.cursors: dict[tuple[str, Lane], Cursor] = {}  # restored, before queues exist
        self.restored_throttled: dict[tuple[str, Lane], int] = {}  # the same, for throttled_from
        self.restored_runtime: dict[str, ScheduleRuntimeView] = {}
        self.attempts = Attempts(start_lease_s)
        # Late occurrences waiting on the catch-up lane, per tenant; and per schedule the span
        # [next scheduled_for to emit, last (inclusive)], persisted on ksched.state (ScheduleRuntime)
        # whenever it changes, since the lane cursor that decided them has moved past them.
        self.catch_up: dict[str, deque[DueOccurrence]] = {}
        self.catch_up_span: dict[str, tuple[int, int]] = {}
        self.catch_up_throttled: dict[str, int] = {}  # tenant -> since when its quota holds it back
        self.runtime_dirty: set[str] = set()  # schedules whose runtime state to rewrite this tick
        self.recent = recent_requests()
        self.ticked_at = 0  # the last tick's now: the watermark of a shard with no lanes
        self.trigger_buckets: dict[str, TokenBucket] = {}
        self.catch_up_buckets: dict[str, TokenBucket] = {}
        self.retry_buckets: dict[str, TokenBucket] = {}
        self.gate = QuotaGate(shard_id, partitions)  # the shard's part of the cluster-wide quotas
        self._finished: list[tuple[int, str]] = []  # heap of (finished_at, schedule_id): purge order
        # Schedules a tick or a restore found with no fire time left, whose COMPLETED record is not
        # written yet (:meth:`complete_later`), by id, in the order they completed.
        self.completing: dict[str, Entry] = {}
        self._prep: Iterator[Entry] | None = None

    # -- lane queues and the watermark ----------------------------------------------
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
    def available(self, e: Entry, f: int) -> int:
        """``available_at`` of ``e``'s occurrence at ``f`` (:func:`scheduler.domain.available_at`);
        the strict test is repeated here only to save a call per strict fire (the burst path)."""
        parts = e.parts
        window_s = parts.policy.window_s
        return available_at(parts.compiled, e.schedule_id, e.version, f, window_s) if window_s else f

    def arm_from(self, e: Entry, after: int, first: dict[tuple[int, int], int | None] | None = None) -> bool:
        """Arm ``e`` at its first occurrence with ``scheduled_for > after`` that is past its lane cursor.

        Returns False (and leaves it disarmed) when the schedule has no further fire time.
        ``first``: a memo of first fire times by (id of the compiled spec, start), for a caller
        arming many schedules at once that keeps their specs alive meanwhile (restore): schedules
        of one spec mostly start from the same second (their lane cursor), and a compiled spec is
        a pure function of time.
        """
        parts = e.parts
        compiled = parts.compiled
        q = self.queue(e.tenant, parts.lane)
        cur = q.cursor
        start = max(after, e.effective_from - 1, cur[0] - parts.policy.window_s - 1)
        if first is None:
            f = compiled.next_after_epoch(start)
        else:
            key = (id(compiled), start)
            f = first.get(key, -1)  # -1: not known yet (a fire time is after start, and start >= -1)
            if f == -1:
                f = first[key] = compiled.next_after_epoch(start)
        while f is not None:
            avail = self.available(e, f)
            if (avail, e.schedule_id) > cur:
                e.next_for = f
                e.prepared = None
                q.arm(e, avail)
                return True
            f = compiled.next_after_epoch(f)
        e.next_for = None
        q.disarm(e)
        return False

    def disarm(self, e: Entry) -> None:
        LaneQueue.disarm(e)
        e.next_for = None
        e.prepared = None

    # -- a schedule's place in the counts ----------------------------------------------
    def add(self, e: Entry) -> None:
        """Hold ``e``: a new schedule, a new version replacing the one held, or a record read
        by restore (which replaces any earlier record of the schedule)."""
        old = self.entries.get(e.schedule_id)
        if old is not None:
            self.count(old, -1)
        self.entries[e.schedule_id] = e
        self.count(e, 1)

    def count(self, e: Entry, delta: int) -> None:
        """Count ``e`` in (1) or out of (-1) its tenant's schedules, if it is one that counts."""
        if e.state in (ACTIVE, PAUSED):  # what max_schedules counts
            self.active_count[e.tenant] = self.active_count.get(e.tenant, 0) + delta

    def complete(self, e: Entry, now: int) -> None:
        """``e`` has no fire time left: COMPLETED at ``now`` (purged after retention)."""
        e.next_for = None
        e.state = COMPLETED
        self.active_count[e.tenant] -= 1
        self.finished(e, now)

    def complete_later(self, e: Entry, now: int) -> None:
        """:meth:`complete`, its record written by a later :meth:`take_completions` (a tick's).

        A COMPLETED record costs ~10x a dispatch record (two full ``Schedule`` encodings): a
        burst of one-time schedules would spend most of its time on them. The completion needs
        no hurry: the tick's watermark already says the schedule has no fire time left, and a
        restore that finds it ACTIVE completes it again (:func:`scheduler.processor.rearm.finish_restore`).
        """
        self.complete(e, now)
        self.completing[e.schedule_id] = e

    def take_completions(self, limit: int) -> list[Entry]:
        """Up to ``limit`` schedules completed since, oldest first, whose COMPLETED record to write
        now; one replaced or changed since (a new version, a cancel, a record read by a warm copy)
        is dropped: its record would overwrite a newer one."""
        entries, completing = self.entries, self.completing
        taken = list(itertools.islice(completing.items(), limit))
        for sid, _ in taken:
            del completing[sid]
        return [e for sid, e in taken if entries.get(sid) is e and e.state == COMPLETED]

    def take_completion(self, schedule_id: str, purged: Entry | None = None) -> Entry | None:
        """The schedule's queued completion, to write now: before a command changes it (its
        version's COMPLETED record comes first), or before its purge's tombstone (``purged``: the
        entry the purge dropped). None when none is queued."""
        e = self.completing.get(schedule_id)
        held = e is purged or (self.entries.get(schedule_id) is e and e is not None and e.state == COMPLETED)
        if e is None or not held:
            return None
        del self.completing[schedule_id]
        return e

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

    def close(self) -> None:
        """Drop references the shard holds to itself (the preparation pass), so that a dropped
        shard is freed even though its entries were frozen out of the cyclic GC."""
        self._prep = None

    # -- the catch-up backlog ---------------------------------------------------------
    def queue_catch_up(self, e: Entry, late: list[tuple[int, int]]) -> None:
        """Queue ``e``'s late occurrences ``(scheduled_for, available_at)`` on the catch-up lane;
        the span is persisted on ``ksched.state`` until they are emitted."""
        self.catch_up_span[e.schedule_id] = (late[0][0], late[-1][0])
        self.runtime_dirty.add(e.schedule_id)
        cq = self.catch_up.setdefault(e.tenant, deque())
        for sf, avail in late:
            cq.append(
                DueOccurrence(
                    e.schedule_id, e.tenant, e.version, sf, avail, _CATCH_UP, e.base.handler, e.payload
                )
            )

    def caught_up(self, occ: DueOccurrence) -> None:
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

    def drop_pending(
        self, e: Entry, reason: str, state: OccurrenceState = OccurrenceState.CANCELED
    ) -> list[Event]:
        """Drop the schedule's waiting work — catch-up occurrences, retries, the QUEUE_ONE
        occurrence, a released one not yet emitted; each gets a ``state`` event. A ``MISSED``
        drop (a later misfire superseding it) drops only the catch-up backlog."""
        sid = e.schedule_id
        events: list[Event] = []
        q = self.catch_up.get(e.tenant)
        if q:
            keep: deque[DueOccurrence] = deque()
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
        if state != OccurrenceState.CANCELED:
            return events
        at = self.attempts
        queued = at.queued.get(sid)
        if queued is not None:
            oid, version, f = queued
            events.append(Event(oid, sid, e.tenant, version, f, state, reason, 1))
        at.released = [r for r in at.released if r[0] != sid]
        for a in at.drop_schedule(sid):
            at.retry_throttled.pop(a.occurrence_id, None)
            events.append(attempt_event(a, state, reason))
        return events

    # -- quotas (the shard's part of each cluster-wide quota: quota_gate.py) ---------------
    def bucket(
        self, buckets: dict[str, TokenBucket], tenant: str, rate: float, clock: float, kind: int = TRIGGER
    ) -> TokenBucket:
        return self.gate.bucket(buckets, tenant, rate, clock, kind)

    def retry_bucket(self, tenant: str, rate: float, clock: float) -> TokenBucket:
        return self.gate.bucket(self.retry_buckets, tenant, rate, clock, RETRY)

    def begin_quotas(self, now: int, clock: float) -> None:
        self.gate.begin_tick(self.tenants, self.queues, self.catch_up, self.attempts, now, clock)

    def running_room(self, tenant: str, cap: int) -> int:
        return self.gate.room(tenant, cap, self.attempts.running.get(tenant, 0))

    def took_running(self, tenant: str, n: int) -> None:
        self.gate.took(tenant, n)

    def track_dispatched(self, dispatch: list[DueOccurrence], start: int) -> None:
        self.gate.dispatched(self.attempts, dispatch, start)

    def catch_up_wait_s(self, clock: float) -> float | None:
        """Seconds until pending catch-up work may be emitted (its tenant's catch-up rate);
        None when there is none."""
        waits = [
            b.wait_s(clock) if (b := self.catch_up_buckets.get(t)) is not None else 0.0
            for t, cq in self.catch_up.items()
            if cq
        ]
        return min(waits) if waits else None

    def due_backlog(self, now: int) -> int:
        """Occurrences due at ``now`` but not yet emitted (throttled or beyond the tick budget)."""
        n = sum(len(cq) for cq in self.catch_up.values()) + len(self.attempts.released)
        return n + sum(q.due_count(now) for q in self.queues.values())

    def upcoming(self, now: int, horizons: tuple[int, ...]) -> list[int]:
        """For each horizon h (seconds), occurrences due by ``now + h`` and not yet emitted (the due
        backlog included; upper bounds like :meth:`due_backlog`). O(buckets): call it sparingly."""
        due_now = sum(len(cq) for cq in self.catch_up.values()) + len(self.attempts.released)
        totals = [due_now] * len(horizons)
        untils = tuple(now + h for h in horizons)
        for q in self.queues.values():
            for i, n in enumerate(q.counts_until(untils)):
                totals[i] += n
        return totals

    # -- the persisted runtime view -------------------------------------------------
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

    # -- records read by restore, tombstones, retention ---------------------------------
    def restore_entry(self, e: Entry) -> None:
        """Add a schedule read from ``ksched.schedules`` (called before cursors are final); ``e`` is
        the record's own new entry, never one the shard already holds."""
        old = self.entries.setdefault(e.schedule_id, e)  # one lookup in a dict of millions
        if old is not e:  # an older record of it not compacted away yet
            self.disarm(old)
            self.count(old, -1)
            self.entries[e.schedule_id] = e
        if e.state in (ACTIVE, PAUSED):  # count(e, 1) inline: once per restored schedule
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
            self.disarm(e)
            self.count(e, -1)
        return e

    def finished(self, e: Entry, at: int) -> None:
        """``e`` reached COMPLETED or CANCELED at ``at``: it is purged ``finished_retention_s`` later."""
        e.finished_at = at
        heapq.heappush(self._finished, (at, e.schedule_id))
        if len(self._finished) > 2 * len(self.entries) + 1024:
            # Stale items (revived, finished again, forgotten) are dropped at their turn; a warm
            # copy never takes turns (only an owner purges), so it drops them here instead.
            self._finished = [
                (x.finished_at, sid)
                for sid, x in self.entries.items()
                if x.state in TERMINAL and x.finished_at is not None
            ]
            heapq.heapify(self._finished)

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
            or any(r[0] == sid for r in at.released)
        )
