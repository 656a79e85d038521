"""The RETRY lane and the overlap gate of a shard's tick (DESIGN.md §5), no Kafka.

In step 2 of the tick, :func:`admit` gates every on-time emission of a schedule
whose overlap policy is not ALLOW, and :func:`emit_retries` runs the RETRY
lane: released ``QUEUE_ONE`` occurrences, expired leases (failed attempts), due
retries within the tenant's retry budget; a disabled tenant's retries and releases wait
(delayed, never dropped) until it is enabled. Both work through the narrow
:class:`~scheduler.processor.lifecycle.LifecycleContext`.
"""

from __future__ import annotations

from scheduler.domain import occurrence_id
from scheduler.processor.attempts import Attempt
from scheduler.processor.lifecycle import LifecycleContext, fail, finish
from scheduler.processor.model import ACTIVE, COMPLETED, DueOccurrence, Entry, Event
from scheduler.processor.outputs import TickOutput
from scheduler.vocabulary import ErrorClass, Lane, OccurrenceState, Overlap

_RETRY = int(Lane.RETRY)
DISABLED_RECHECK_S = 5  # a retry of a disabled tenant waits this long before it is looked at again


def admit(ctx: LifecycleContext, e: Entry, f: int, avail: int, out: TickOutput) -> bool:
    """The overlap gate of an on-time occurrence of ``e`` at ``f``: True to emit it.

    ``ALLOW``: always. ``SKIP_IF_RUNNING``: not while an earlier occurrence is
    in flight (SKIPPED_OVERLAP). ``QUEUE_ONE``: the first such occurrence waits
    and is released when the running one ends; further ones are skipped.
    """
    overlap = e.policy.overlap
    if overlap == Overlap.ALLOW:
        return True
    at = ctx.attempts
    oid = occurrence_id(e.schedule_id, e.version, f)
    if not at.occupied(e.schedule_id) and e.schedule_id not in at.queued:  # (a released one is on its way)
        at.occupy(Attempt(oid, e.schedule_id, e.tenant, e.version, f, 1))
        return True
    if overlap == Overlap.QUEUE_ONE and at.queue_one(e.schedule_id, oid, e.version, f):
        return False
    # In flight: the occupying occurrence, or (it ended in this tick's reports) the QUEUE_ONE one
    # it released, which this tick's RETRY lane emits.
    running = at.occupying.get(e.schedule_id) or at.queued[e.schedule_id][0]
    out.events.append(
        Event(
            oid,
            e.schedule_id,
            e.tenant,
            e.version,
            f,
            OccurrenceState.SKIPPED_OVERLAP,
            f"{running} still running ({overlap})",
        )
    )
    return False


def emit_retries(ctx: LifecycleContext, now: int, budget: int, clock: float, out: TickOutput) -> int:
    """The RETRY lane: released QUEUE_ONE occurrences, expired leases, due retries (within the
    tenant's retry budget; a throttled retry waits a second, it is never dropped). Returns the
    budget left."""
    at = ctx.attempts
    budget = _emit_released(ctx, budget, out)
    at.arm_start_leases(now)  # occurrences the overlap gate emitted in this tick
    for a in at.expired_leases(now):
        if a.token is None:
            fail(ctx, a, True, ErrorClass.START_LEASE_EXPIRED,
                 f"attempt {a.attempt} was not STARTED within start_lease_s={at.start_lease_s}s of its "
                 "dispatch (no worker took it)", now, out.events, out.dead)
        else:
            fail(ctx, a, True, ErrorClass.LEASE_EXPIRED,
                 f"no heartbeat from attempt {a.attempt} (lease ran out)", now, out.events, out.dead)
    for a in at.due_retries(now):
        e = ctx.entries.get(a.schedule_id)
        quota = ctx.tenants.get(a.tenant)
        why = _unwanted(e, a, quota is None)
        if why is not None or e is None:
            finish(ctx, a, OccurrenceState.CANCELED, why, out.events, now)
            ctx.attempts.retry_throttled.pop(a.occurrence_id, None)
            continue
        if quota is not None and not quota.active:  # held, not dropped, while its tenant is disabled
            at.retry(a, now + DISABLED_RECHECK_S, a.last_error_class, a.last_error_message)
            continue
        rate = quota.retry_budget_per_min / 60 if quota else 0
        bucket = ctx.retry_bucket(a.tenant, rate, clock)
        cap = quota.max_running if quota else 0
        if budget <= 0 or bucket.available(clock) < 1 or (cap and ctx.running_room(a.tenant, cap) < 1):
            at.retry(a, now + 1, a.last_error_class, a.last_error_message)
            if budget > 0:  # held back by a quota (not by the tick's budget): counted once, at emission
                ctx.attempts.retry_throttled.setdefault(a.occurrence_id, now)
            continue
        bucket.spend(1, clock)
        a.attempt += 1
        at.reemitted(a, now)
        if cap:
            ctx.took_running(a.tenant, 1)
        occ = DueOccurrence(
            a.schedule_id,
            a.tenant,
            a.version,
            a.scheduled_for,
            ctx.available(e, a.scheduled_for),
            _RETRY,
            e.base.handler,
            e.payload,
            a.attempt,
        )
        out.dispatch.append(occ)
        since = ctx.attempts.retry_throttled.pop(a.occurrence_id, None)
        if since is not None and now > since:
            out.throttled_by(occ, now - since, "retry_budget_per_min")
        budget -= 1
    return budget


def _unwanted(e: Entry | None, a: Attempt, removed: bool) -> str | None:
    """Why a due retry of ``a`` is not emitted but recorded CANCELED, or None."""
    if e is None or e.version != a.version or e.state not in (ACTIVE, COMPLETED):
        return "schedule changed or canceled before the retry"
    if removed:
        return f"tenant {a.tenant} is not registered (removed) before the retry"
    return None


def _emit_released(ctx: LifecycleContext, budget: int, out: TickOutput) -> int:
    """The released QUEUE_ONE occurrences (their running predecessor ended); one of a disabled
    tenant stays released until it is enabled, one of a removed tenant is CANCELED. Returns
    the budget left."""
    at = ctx.attempts
    held: list[tuple[str, str, int, int]] = []
    while at.released and budget > 0:
        sid, oid, version, f = item = at.released.pop(0)
        e = ctx.entries.get(sid)
        quota = ctx.tenants.get(e.tenant) if e is not None else None
        cap = quota.max_running if quota is not None else 0
        if quota is not None and (not quota.active or (cap and ctx.running_room(quota.name, cap) < 1)):
            held.append(item)  # disabled, or at its max_running: it waits, never dropped
            continue
        at.queued.pop(sid, None)  # persisted until now: a crash before this re-derives the release
        at.dirty.add(sid)
        if e is None or e.version != version or e.state not in (ACTIVE, COMPLETED):
            continue
        if quota is None:
            why = f"tenant {e.tenant} is not registered (removed)"
            out.events.append(Event(oid, sid, e.tenant, version, f, OccurrenceState.CANCELED, why, 1))
            continue
        at.occupy(Attempt(oid, sid, e.tenant, version, f, 1))
        if cap:
            ctx.took_running(e.tenant, 1)
        out.dispatch.append(
            DueOccurrence(
                sid, e.tenant, version, f, ctx.available(e, f), int(e.lane), e.base.handler, e.payload
            )
        )
        budget -= 1
    at.released[:0] = held
    return budget
