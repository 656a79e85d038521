"""The tick: decide the occurrences due now (DESIGN.md §4 step 2), no Kafka.

:func:`due` is the punctuator: strict lane, then flexible, then catch-up, then
the RETRY lane (:func:`scheduler.processor.lifecycle.emit_retries`), each
round-robin across tenants within their rate quotas and the tick's budget.
:func:`fire` gives each taken schedule its fate (emitted, skipped by the
overlap gate, or the misfire policy's :func:`misfire`) and re-arms it.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.domain import occurrence_id
from scheduler.domain.fire import fire_at
from scheduler.processor.lanes import Armable, LaneQueue
from scheduler.processor.model import ACTIVE, DueOccurrence, Entry, Event
from scheduler.processor.outputs import TickOutput
from scheduler.processor.retry_lane import admit, emit_retries
from scheduler.processor.shares import CATCH_UP
from scheduler.processor.store import ShardStore
from scheduler.tenants import Tenant
from scheduler.vocabulary import Lane, Misfire, OccurrenceState, Overlap

# Enum members read from module globals: a class attribute lookup costs ~100 ns per occurrence.
_ALLOW = Overlap.ALLOW
MISFIRE_SCAN_LIMIT = 10_000  # occurrences examined per schedule per misfire pass
PURGE_PER_TICK = 1_000  # finished schedules dropped per tick: keeps a mass expiry's transactions short
# COMPLETED records written per tick that has emission budget left (~37 µs each: ~75 ms a tick);
# none while a burst fills the budget (ShardStore.complete_later).
COMPLETIONS_PER_TICK = 2_000


def due(store: ShardStore, now: int, budget: int, clock: float) -> TickOutput:
    """Decide the occurrences to emit now: strict, then flexible, then catch-up, then retries.

    Round-robin across tenants within a lane, each within its trigger-rate
    quota (catch-up: catch-up rate). At most ``budget`` dispatches; what is
    left stays due for the next tick. Throttled work is delayed, never
    dropped: from the tick a tenant's quota first holds a lane back, that
    lane's lateness is measured at that tick, not now (``LaneQueue.throttled_from``),
    so waiting for one's own quota never turns an occurrence MISSED.
    """
    store.ticked_at = now
    store.begin_quotas(now, clock)  # the shard's demand out, its shares of the quotas in: once a tick
    out = TickOutput()
    tenants = sorted({t for t, _ in store.queues} | set(store.catch_up))
    stopped = {t: why for t in tenants if (why := stopped_reason(t, store.tenants.get(t))) is not None}
    serving = [t for t in tenants if t not in stopped] if stopped else tenants
    for lane in (Lane.STRICT, Lane.FLEXIBLE):
        budget = _emit_lane(store, lane, serving, now, budget, clock, out)
    for tenant in serving:
        budget = _emit_catch_up(store, tenant, now, budget, clock, out)
    budget = emit_retries(store, now, budget, clock, out)
    for tenant, why in stopped.items():  # last: recording what is not emitted is never urgent
        budget = _miss_stopped(store, tenant, why, now, budget, out)
    if budget > 0 and store.completing:  # after the emission: a burst's completions wait for its end
        out.completed.extend(store.take_completions(COMPLETIONS_PER_TICK))
    out.purged = store.purge(now, PURGE_PER_TICK)  # after the completions: a purge's tombstone last
    if store.completing:  # one still queued is written now, before its tombstone
        out.completed.extend(c for e in out.purged if (c := store.take_completion(e.schedule_id, e)))
    # Idle lanes' cursors follow time so the watermark advances.
    for q in store.queues.values():
        if q.next_due() is None or (q.next_due() or 0) > now:
            q.take(now, 0)
    return out


def stopped_reason(tenant: str, quota: Tenant | None) -> str | None:
    """Why ``tenant``'s due occurrences are not emitted (the reason of their MISSED events), or
    None when it is served: it is disabled, or no longer registered (removed)."""
    if quota is None:
        return f"tenant {tenant} is not registered (removed): its schedules do not fire"
    if not quota.active:
        return f"tenant {tenant} is disabled: its schedules fire again after `ksched tenants enable {tenant}`"
    return None


def _miss_stopped(store: ShardStore, tenant: str, why: str, now: int, budget: int, out: TickOutput) -> int:
    """A stopped tenant's due occurrences, on-time and catch-up, each recorded MISSED with ``why``
    (one event per occurrence: nothing is left out silently) and the schedule re-armed at its
    next fire time, so emission resumes with the first one due after the tenant is enabled.
    Events count against the tick's budget (they are records of its transaction); returns
    what is left."""
    for lane in (Lane.STRICT, Lane.FLEXIBLE):
        q = store.queues.get((tenant, lane))
        if q is None or budget <= 0:
            continue
        q.throttled_from = None  # a quota no longer holds it back
        taken = q.take(now, budget)
        budget -= len(taken)
        for obj in taken:
            e: Entry = obj  # type: ignore[assignment]
            f = e.next_for
            if f is None or e.state != ACTIVE:
                continue
            oid = occurrence_id(e.schedule_id, e.version, f)
            out.events.append(Event(oid, e.schedule_id, tenant, e.version, f, OccurrenceState.MISSED, why))
            _rearm(store, e, e.compiled.next_after_epoch(f), now, out)
    store.catch_up_throttled.pop(tenant, None)
    cq = store.catch_up.get(tenant)
    while cq and budget > 0:
        occ = cq.popleft()
        store.caught_up(occ)
        out.events.append(Event(occ.occurrence_id, occ.schedule_id, tenant, occ.version, occ.scheduled_for,
                                OccurrenceState.MISSED, why))
        budget -= 1
    return budget


def _emit_lane(
    store: ShardStore, lane: Lane, tenants: list[str], now: int, budget: int, clock: float, out: TickOutput
) -> int:
    """One on-time lane, round-robin over its tenants within their trigger rate and
    ``max_running``; returns the budget left."""
    active = [t for t in tenants if (t, lane) in store.queues]
    while budget > 0 and active:
        share = max(1, budget // len(active))
        still: list[str] = []
        for tenant in active:
            quota = store.tenants.get(tenant)
            rate = quota.trigger_rate_per_s if quota else 0
            bucket = store.bucket(store.trigger_buckets, tenant, rate, clock)
            cap = quota.max_running if quota else 0
            q = store.queues[(tenant, lane)]
            tokens = bucket.available(clock)
            slots = store.running_room(tenant, cap) if cap else tokens
            allowed = min(share, budget, tokens, slots)
            taken = q.take(now, allowed) if allowed > 0 else []
            if taken:
                start = len(out.dispatch)
                emitted = fire(store, taken, now, out, q.throttled_from, q.throttled_by, q)
                bucket.spend(emitted, clock)
                tokens = bucket.available(clock)
                if cap:
                    store.track_dispatched(out.dispatch, start)
                    slots = store.running_room(tenant, cap)
                else:
                    slots = tokens
                budget -= len(taken)
            if _still_due(q, now, min(tokens, slots), "max_running" if slots < tokens else None) and taken:
                still.append(tenant)
        active = still
    return budget


def _still_due(q: LaneQueue, now: int, room: int, by: str | None) -> bool:
    """Update the lane's ``throttled_from``; True when it has work due that the quotas allow
    (``room``: what they still allow this tick; ``by``: the quota that binds, None: the rate)."""
    nd = q.next_due()
    if nd is None or nd > now:
        q.throttled_from = None
        return False
    if room <= 0:
        if q.throttled_from is None:
            q.throttled_from = now
            q.throttled_by = by or "trigger_rate_per_s"
        return False
    return True


def _emit_catch_up(
    store: ShardStore, tenant: str, now: int, budget: int, clock: float, out: TickOutput
) -> int:
    """The tenant's catch-up backlog within its catch-up rate and ``max_running``; returns the
    budget left."""
    cq = store.catch_up.get(tenant)
    if not cq:
        store.catch_up_throttled.pop(tenant, None)
        return budget
    if budget <= 0:
        return budget
    quota = store.tenants.get(tenant)
    rate = quota.catch_up_rate_per_s if quota else 0
    bucket = store.bucket(store.catch_up_buckets, tenant, rate, clock, CATCH_UP)
    tokens = bucket.available(clock)
    cap = quota.max_running if quota else 0
    if cap:
        tokens = min(tokens, store.running_room(tenant, cap))
    n = min(budget, tokens, len(cq))
    since = store.catch_up_throttled.get(tenant)
    start = len(out.dispatch)
    for _ in range(n):
        occ = cq.popleft()
        out.dispatch.append(occ)
        store.caught_up(occ)
        if since is not None and now > since:
            out.throttled_by(occ, now - since, "catch_up_rate_per_s")
    bucket.spend(n, clock)
    if cap:
        store.track_dispatched(out.dispatch, start)
    if cq and n == tokens and since is None:
        store.catch_up_throttled[tenant] = now  # held back by the quota, not the tick budget
    return budget - n


def fire(
    store: ShardStore, taken: Iterable[object], now: int, out: TickOutput, throttled_from: int | None,
    quota: str = "trigger_rate_per_s", q: LaneQueue | None = None,
) -> int:
    """Give each taken entry its fate and re-arm it; returns the number emitted on time.

    Lateness is measured at ``throttled_from`` when the lane has been held back by its
    tenant's ``quota`` since then (time spent throttled is not a misfire), else at ``now``.
    ``q``: the lane queue every taken entry came from (its tenant's, its lane's), where an
    emitted entry is re-armed directly; None: each through :func:`_rearm`.
    """
    emitted = 0
    ref = now if throttled_from is None else min(now, throttled_from)
    dispatch = out.dispatch
    append, new, available = dispatch.append, tuple.__new__, store.available
    arm_all = q.arm_all if q is not None else None
    run: list[Armable] = []  # emitted entries re-armed at run_at: a bucket's share one next time
    run_at = -1
    for obj in taken:  # the hot path of a burst (hundreds of thousands): locals only
        e: Entry = obj  # type: ignore[assignment]
        f = e.next_for
        if f is None or e.state != ACTIVE:
            continue
        parts = e.parts
        pol = parts.policy
        window = pol.window_s
        avail = available(e, f) if window else f
        if ref - avail > pol.max_lateness_s:
            nxt = misfire(store, e, f, ref, out)
        elif pol.overlap != _ALLOW and not admit(store, e, f, avail, out):
            nxt = parts.compiled.next_after_epoch(f)
        else:
            # tuple.__new__ directly: the NamedTuple's own __new__ is a Python frame per occurrence
            occ: DueOccurrence = new(DueOccurrence, (  # type: ignore[call-overload]
                e.schedule_id, e.tenant, e.version, f, avail, parts.lane_value, parts.handler, e.payload, 1,
                e.prepared,
            ))
            append(occ)
            emitted += 1
            if throttled_from is not None and now > max(avail, throttled_from):
                out.throttled_by(occ, now - max(avail, throttled_from), quota)
            nxt = parts.compiled.next_after_epoch(f)
            if arm_all is not None and nxt is not None:  # _rearm, batched
                e.prepared = None
                e.next_for = nxt
                at = available(e, nxt) if window else nxt
                if at != run_at:
                    if run:
                        arm_all(run, run_at)
                    run, run_at = [], at
                run.append(e)
                continue
        _rearm(store, e, nxt, now, out)
    if run and arm_all is not None:
        arm_all(run, run_at)
    return emitted


def _rearm(store: ShardStore, e: Entry, nxt: int | None, now: int, out: TickOutput) -> None:
    """Arm ``e`` (just taken from its lane) at its next fire time ``nxt``; None: it is COMPLETED."""
    e.prepared = None
    if nxt is None:
        store.complete_later(e, now)
    else:
        e.next_for = nxt
        store.queue(e.tenant, e.lane).arm(e, store.available(e, nxt))


def misfire(store: ShardStore, e: Entry, f: int, now: int, out: TickOutput) -> int | None:
    """Apply the misfire policy to ``e``'s occurrences from ``f`` that are later than max_lateness.

    SKIP records them MISSED; FIRE_ONCE queues the latest on the catch-up lane and
    records the rest MISSED; CATCH_UP(K) queues the latest K. Returns the first fire
    time still within lateness (or future), to re-arm at.
    """
    pol = e.policy
    late: list[tuple[str, int, int]] = []
    cur: int | None = f
    while cur is not None and len(late) < MISFIRE_SCAN_LIMIT:
        fire = fire_at(e.compiled, e.schedule_id, e.version, cur, pol.window_s)
        if now - fire.available_at <= pol.max_lateness_s:
            break
        late.append((fire.occurrence_id, cur, fire.available_at))
        cur = e.compiled.next_after_epoch(cur)
    keep = 1 if pol.misfire == Misfire.FIRE_ONCE else 0
    if pol.misfire == Misfire.CATCH_UP:
        keep = max(0, pol.catch_up_limit)
    cut = len(late) - min(keep, len(late))
    reason = f"later than max_lateness={pol.max_lateness_s}s ({pol.misfire})"
    for oid, sf, _ in late[:cut]:
        out.events.append(Event(oid, e.schedule_id, e.tenant, e.version, sf, OccurrenceState.MISSED, reason))
    if cut < len(late):
        if e.schedule_id in store.catch_up_span:
            # One backlog per schedule, always its latest late occurrences: the older pending
            # ones are recorded MISSED (the span persisted on ksched.state stays one range).
            out.events += store.drop_pending(e, "superseded by a later misfire", OccurrenceState.MISSED)
        store.queue_catch_up(e, [(sf, avail) for _oid, sf, avail in late[cut:]])
    return cur
