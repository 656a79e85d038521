"""Attempts of emitted occurrences within one shard: fencing, leases, retries, overlap (no Kafka).

DESIGN.md §5: the processor numbers attempts, ignores a report whose token is
not the current one, expires leases that stop heartbeating, decides retries
(exponential backoff with full jitter, seeded so a replay recomputes it) and
dead-letters, and applies the overlap policy atomically. Reports must stay
cheap at peak, so per-attempt state is kept only where a policy needs it:

- every attempt that has STARTED is tracked in memory (fencing, leases) until
  it ends; it is *persisted* only for schedules whose overlap policy needs it;
- an occurrence of a ``SKIP_IF_RUNNING`` / ``QUEUE_ONE`` schedule is tracked from
  its emission (it occupies the schedule until it ends), and persisted;
- retry timers and the ``QUEUE_ONE`` waiting occurrence are persisted.

- every attempt after the first (a retry, from its RETRY_WAIT until it ends)
  is persisted, whatever the overlap policy: a new owner then knows the current
  attempt number of every occurrence that was ever retried, and fences a late
  report of an older attempt. A first attempt needs no record: no attempt
  before it exists to be confused with it, so a burst of ``ALLOW`` first
  attempts writes no state.
- an emitted occurrence that is tracked but not yet STARTED holds a *start
  lease* (``start_lease_s``): a record no worker picks up is given up like a
  failed attempt instead of occupying its schedule for ever.

Persisted state is rewritten per schedule, in the tick's transaction, only
when it changes (``dirty``). After a failover, reports of first attempts that
were not persisted are accepted as they come (a STARTED or HEARTBEAT
re-establishes the lease); a bounded memory of finished occurrences drops
duplicates.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from scheduler import native
from scheduler.processor.model import Event
from scheduler.processor.recent import LastN
from scheduler.vocabulary import Overlap

_ALLOW = Overlap.ALLOW  # a module global: read per report, cheaper than the class attribute
_recent = native.load("scheduler.processor.recent")  # LastN compiled (0.41 against 0.60 µs a remember)
FINISHED_MEMORY = 200_000  # occurrences remembered as finished, to drop duplicate reports
# A retried occurrence's final attempt is persisted this long after it finished, so that a late
# report of an older attempt (a zombie worker) is still fenced by a new owner after a failover.
FENCE_KEEP_S = 86_400


@dataclass(slots=True)
class Attempt:
    """The current attempt of one in-flight occurrence (mutable, shard-private)."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for: int
    attempt: int
    token: str | None = None  # None: emitted, not yet STARTED
    lease_until: int | None = None  # epoch s: heartbeat lease, or start lease while token is None
    retry_at: int | None = None  # epoch s: waiting to be re-emitted (RETRY_WAIT)
    last_error_class: str | None = None
    last_error_message: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one report decided. ``state`` is the occurrence event to record, if any."""

    accepted: bool
    state: str | None = None  # RUNNING, SUCCEEDED, RETRY_WAIT, DEAD, CANCELED
    reason: str | None = None
    attempt: Attempt | None = None


def persisted_running(a: Attempt, overlap: str) -> bool:
    """Whether the in-flight (not retry-waiting) attempt ``a`` is written to ``ksched.state``:
    always for an overlap-tracked schedule (it occupies the schedule), else from the second
    attempt on (so that a new owner can fence the older attempts' reports)."""
    return overlap != _ALLOW or a.attempt > 1


class Attempts:
    """In-flight occurrences of one shard."""

    def __init__(self, start_lease_s: int = 300) -> None:
        self.start_lease_s = start_lease_s
        # Tracked attempts emitted but not STARTED whose start lease is not armed yet: the
        # overlap gate does not know the tick's clock, so the RETRY lane arms them.
        self._unleased: list[Attempt] = []
        self.inflight: dict[str, Attempt] = {}  # occurrence_id -> current attempt
        self._by_schedule: dict[str, dict[str, Attempt]] = {}  # the same, indexed by schedule
        self.occupying: dict[str, str] = {}  # schedule_id -> occurrence_id (overlap-tracked)
        self.queued: dict[str, tuple[str, int, int]] = {}  # schedule_id -> (oid, version, sf) waiting
        self._retries: list[tuple[int, str, int]] = []  # heap of (retry_at, oid, attempt)
        self._leases: list[tuple[int, str, int]] = []  # heap of (lease_until, oid, attempt)
        # oid -> last attempt seen finished; compiled when built: every report of a burst remembers one
        self._finished: LastN[int] = _recent.LastN(FINISHED_MEMORY)
        # The memory's own bound methods, not methods wrapping them: a Python frame less per report.
        self.last_finished = self._finished.get  # an oid's last attempt seen finished, or None
        self.remember_finished = self._finished.remember  # (oid, its last attempt seen finished)
        # Persisted part of it: schedule_id -> {oid: (final attempt, keep until epoch s)} for
        # occurrences that had more than one attempt (ScheduleRuntime.finished).
        self.fenced: dict[str, dict[str, tuple[int, int]]] = {}
        self.dirty: set[str] = set()  # schedule ids whose persisted runtime state changed
        # QUEUE_ONE occurrences released by the end of the running one, to emit on the RETRY lane:
        # (schedule_id, oid, version, scheduled_for); persisted as ``queued`` until emitted.
        self.released: list[tuple[str, str, int, int]] = []
        self.retry_throttled: dict[str, int] = {}  # occurrence id -> since when the retry budget holds it
        self.running: dict[str, int] = {}  # tracked, not retry-waiting, per tenant: max_running's count

    # -- emission ---------------------------------------------------------------
    def occupied(self, schedule_id: str) -> bool:
        return schedule_id in self.occupying

    def occupy(self, a: Attempt) -> None:
        """An overlap-tracked schedule's occurrence was emitted: it occupies the schedule."""
        self._add(a)
        self.occupying[a.schedule_id] = a.occurrence_id
        self._unleased.append(a)
        self.dirty.add(a.schedule_id)

    def dispatched(self, a: Attempt) -> None:
        """A capped tenant's occurrence was emitted: tracked (not persisted: an ``ALLOW`` first
        attempt) from now to its final report, under a start lease, so it counts against
        ``max_running``. One already tracked (an overlap-tracked occurrence) is left as it is."""
        if a.occurrence_id not in self.inflight:
            self._add(a)
            self._unleased.append(a)

    def queue_one(self, schedule_id: str, oid: str, version: int, scheduled_for: int) -> bool:
        """Hold one occurrence until the running one ends; False if one is already waiting."""
        if schedule_id in self.queued:
            return False
        self.queued[schedule_id] = (oid, version, scheduled_for)
        self.dirty.add(schedule_id)
        return True

    def due_retries(self, now: int) -> list[Attempt]:
        """Attempts whose retry time has come (popped; the caller re-emits or re-schedules)."""
        out: list[Attempt] = []
        while self._retries and self._retries[0][0] <= now:
            _, oid, n = heapq.heappop(self._retries)
            a = self.inflight.get(oid)
            if a is not None and a.attempt == n and a.retry_at is not None:
                out.append(a)
        return out

    def next_retry(self) -> int | None:
        return self._retries[0][0] if self._retries else None

    def reemitted(self, a: Attempt, now: int) -> None:
        """``a`` (attempt already incremented) was emitted again: its start lease begins."""
        if a.retry_at is not None and self.inflight.get(a.occurrence_id) is a:
            self.running[a.tenant] = self.running.get(a.tenant, 0) + 1
        a.retry_at = None
        a.token = None
        self.lease(a, now + self.start_lease_s)
        self.dirty.add(a.schedule_id)

    def arm_start_leases(self, now: int) -> None:
        """Give every tracked attempt emitted (or restored) without a lease its start lease."""
        pending, self._unleased = self._unleased, []
        for a in pending:
            if self.inflight.get(a.occurrence_id) is a and a.token is None and a.retry_at is None \
                    and a.lease_until is None:
                self.lease(a, now + self.start_lease_s)
                self.dirty.add(a.schedule_id)

    def expired_leases(self, now: int) -> list[Attempt]:
        """Started attempts whose lease ran out without a heartbeat."""
        out: list[Attempt] = []
        while self._leases and self._leases[0][0] < now:
            _, oid, n = heapq.heappop(self._leases)
            a = self.inflight.get(oid)
            if a is not None and a.attempt == n and a.lease_until is not None and a.lease_until < now:
                out.append(a)
        return out

    # -- reports ----------------------------------------------------------------
    def current(self, oid: str, attempt: int, token: str) -> tuple[Attempt | None, str | None]:
        """(the tracked attempt, or None if untracked; why the report is stale, or None)."""
        a = self.inflight.get(oid)
        if a is None:
            last = self._finished.get(oid)
            if last is not None and attempt <= last:
                return None, f"occurrence already finished (attempt {last})"
            return None, None
        if attempt != a.attempt or a.retry_at is not None:
            return a, f"attempt {attempt} is not the current attempt {a.attempt}"
        if a.token is not None and a.token != token:
            return a, "token is not the current attempt's token"
        return a, None

    def started(self, a: Attempt, token: str, lease_until: int, persist: bool) -> None:
        a.token = token
        self.lease(a, lease_until)
        if persist:
            self.dirty.add(a.schedule_id)

    def lease(self, a: Attempt, lease_until: int) -> None:
        a.lease_until = lease_until
        heapq.heappush(self._leases, (lease_until, a.occurrence_id, a.attempt))

    def retry(self, a: Attempt, at: int, error_class: str | None, message: str | None) -> None:
        if a.retry_at is None and self.inflight.get(a.occurrence_id) is a:
            self._count(a.tenant, -1)
        a.retry_at = at
        a.token = None
        a.lease_until = None
        a.last_error_class, a.last_error_message = error_class, message
        heapq.heappush(self._retries, (at, a.occurrence_id, a.attempt))
        self.dirty.add(a.schedule_id)

    def finish(self, a: Attempt, now: int) -> tuple[str, int, int] | None:
        """``a``'s occurrence ended (succeeded, dead or canceled); returns the QUEUE_ONE occurrence
        now released, if any."""
        self._remove(a)
        if a.retry_at is not None or a.last_error_class is not None:  # was persisted
            self.dirty.add(a.schedule_id)
        return self.finish_untracked(a.schedule_id, a.occurrence_id, a.attempt, now)

    def finish_untracked(
        self, schedule_id: str, oid: str, attempt: int, now: int
    ) -> tuple[str, int, int] | None:
        """Attempt ``attempt`` of ``oid``, not in :attr:`inflight`, ended (an ``ALLOW`` first
        attempt's SUCCEEDED report: tracking it first would only churn the indexes); what
        :meth:`finish` does after untracking. Returns the QUEUE_ONE occurrence now released."""
        self._finished.remember(oid, attempt)
        if attempt > 1:  # older attempts of it exist: keep fencing them across a failover
            mine = self.fenced.setdefault(schedule_id, {})
            for old in [o for o, (_, until) in mine.items() if until <= now]:
                del mine[old]
            mine[oid] = (attempt, now + FENCE_KEEP_S)
            self.dirty.add(schedule_id)
        if self.occupying.get(schedule_id) == oid:
            del self.occupying[schedule_id]
            self.dirty.add(schedule_id)
            return self.queued.get(schedule_id)  # stays persisted until it is emitted
        return None

    def track(self, a: Attempt) -> None:
        """Adopt an attempt known only from a report or from restore."""
        self._add(a)
        if a.retry_at is not None:
            heapq.heappush(self._retries, (a.retry_at, a.occurrence_id, a.attempt))
        elif a.lease_until is not None:
            heapq.heappush(self._leases, (a.lease_until, a.occurrence_id, a.attempt))
        elif a.token is None:  # restored from a record written before start leases existed
            self._unleased.append(a)

    def drop_schedule(self, schedule_id: str) -> list[Attempt]:
        """Forget the schedule's waiting work (cancel, update, pause): its retries and queued
        occurrence. Running attempts stay tracked so their reports are still fenced."""
        dropped = [a for a in self.of_schedule(schedule_id) if a.retry_at is not None]
        for a in dropped:
            self._remove(a)
            self.remember_finished(a.occurrence_id, a.attempt)
        if self.queued.pop(schedule_id, None) is not None or dropped:
            self.dirty.add(schedule_id)
        return dropped

    def restore_fenced(self, schedule_id: str, markers: list[tuple[str, int, int]]) -> None:
        """Adopt persisted finished markers ``(oid, final attempt, keep until)``."""
        mine = self.fenced.setdefault(schedule_id, {})
        for oid, attempt, until in markers:
            mine[oid] = (attempt, until)
            self.remember_finished(oid, attempt)

    def fenced_of(self, schedule_id: str) -> list[tuple[str, int, int]]:
        """The schedule's persisted finished markers ``(oid, final attempt, keep until)``."""
        return [(oid, n, until) for oid, (n, until) in self.fenced.get(schedule_id, {}).items()]

    def of_schedule(self, schedule_id: str) -> list[Attempt]:
        return list(self._by_schedule.get(schedule_id, {}).values())

    def _add(self, a: Attempt) -> None:
        old = self.inflight.get(a.occurrence_id)
        if old is not None:
            self._remove(old)
        self.inflight[a.occurrence_id] = a
        self._by_schedule.setdefault(a.schedule_id, {})[a.occurrence_id] = a
        if a.retry_at is None:
            self.running[a.tenant] = self.running.get(a.tenant, 0) + 1

    def _count(self, tenant: str, delta: int) -> None:
        n = self.running.get(tenant, 0) + delta
        if n > 0:
            self.running[tenant] = n
        else:
            self.running.pop(tenant, None)

    def _remove(self, a: Attempt) -> None:
        gone = self.inflight.pop(a.occurrence_id, None)
        if gone is not None and gone.retry_at is None:
            self._count(gone.tenant, -1)
        mine = self._by_schedule.get(a.schedule_id)
        if mine is not None:
            mine.pop(a.occurrence_id, None)
            if not mine:
                del self._by_schedule[a.schedule_id]


def attempt_event(a: Attempt, state: str, reason: str | None) -> Event:
    """The occurrence event of attempt ``a`` reaching ``state``."""
    return Event(
        a.occurrence_id, a.schedule_id, a.tenant, a.version, a.scheduled_for, state, reason, a.attempt
    )
