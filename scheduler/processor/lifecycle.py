"""The attempt lifecycle decisions of a shard (DESIGN.md §5), no Kafka.

Applied in the tick: reports in step 1 (:func:`apply_report`), then in step 2
the overlap gate for every on-time emission (:func:`admit`) and the RETRY lane
(:func:`emit_retries`: released ``QUEUE_ONE`` occurrences, due retries,
expired leases). Every decision is recorded as an occurrence event; a dead
occurrence also goes to the tenant's DLQ (``TickOutput.dead``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.domain import occurrence_id
from scheduler.domain.backoff import retry_delay_s
from scheduler.processor.attempts import CANCELED_ERROR, LEASE_EXPIRED, Attempt
from scheduler.processor.model import ACTIVE, COMPLETED, Entry, Event, Lane, Occurrence

if TYPE_CHECKING:
    from scheduler.processor.shard import Shard, TickOutput

_RETRY = int(Lane.RETRY)


@dataclass(slots=True)
class ReportResult:
    """What one attempt report decided: events to record, occurrences that died."""

    events: list[Event] = field(default_factory=list)
    dead: list[Attempt] = field(default_factory=list)
    ignored: str | None = None  # why the report was not the current attempt's (counted, not applied)


def attempt_event(a: Attempt, state: str, reason: str | None) -> Event:
    """The occurrence event of attempt ``a`` reaching ``state``."""
    return Event(
        a.occurrence_id, a.schedule_id, a.tenant, a.version, a.scheduled_for, state, reason, a.attempt
    )


def apply_report(
    shard: Shard,
    *,
    kind: str,
    oid: str,
    schedule_id: str,
    tenant: str,
    version: int,
    scheduled_for: int,
    attempt: int,
    token: str,
    retryable: bool | None,
    error_class: str | None,
    error_message: str | None,
    now: int,
) -> ReportResult:
    """Apply one STARTED / HEARTBEAT / SUCCEEDED / FAILED report; never raises for bad input.

    A report of an attempt that is not the current one, or with another
    token, is ignored (fencing). A FAILED report with error class
    ``ksched.Canceled`` means the worker did not run a stale occurrence.
    """
    at = shard.attempts
    a, stale = at.current(oid, attempt, token)
    if stale is not None:
        return ReportResult(ignored=stale)
    e = shard.entries.get(schedule_id)
    persist = e is not None and e.policy.overlap != "ALLOW"
    if a is None:
        a = Attempt(oid, schedule_id, tenant, version, scheduled_for, attempt)
        at.track(a)
    res = ReportResult()
    lease_until = now + shard.lease_s
    if kind == "STARTED":
        at.started(a, token, lease_until, persist)
    elif kind == "HEARTBEAT":
        if a.token is None:
            a.token = token
        at.lease(a, lease_until)
    elif kind == "SUCCEEDED":
        _finish(shard, a, "SUCCEEDED", None, res)
    elif kind == "FAILED" and error_class == CANCELED_ERROR:
        _finish(shard, a, "CANCELED", error_message or "not run: stale", res)
    elif kind == "FAILED":
        fail(shard, a, bool(retryable), error_class, error_message, now, res)
    else:
        return ReportResult(ignored=f"unknown report kind {kind!r}")
    return res


def _finish(shard: Shard, a: Attempt, state: str, reason: str | None, res: ReportResult) -> None:
    res.events.append(attempt_event(a, state, reason))
    released = shard.attempts.finish(a)
    if released is not None:
        shard.released.append((a.schedule_id, *released))


def fail(
    shard: Shard,
    a: Attempt,
    retryable: bool,
    error_class: str | None,
    message: str | None,
    now: int,
    res: ReportResult,
) -> None:
    """Attempt ``a`` failed: schedule its retry (RETRY_WAIT) or declare it DEAD."""
    e = shard.entries.get(a.schedule_id)
    pol = e.policy if e is not None else None
    a.last_error_class, a.last_error_message = error_class, message
    why: str | None = None
    if not retryable:
        why = f"permanent error {error_class}"
    elif pol is None or e is None or e.version != a.version or e.state not in (ACTIVE, COMPLETED):
        why = "schedule changed or canceled: no retry"
    elif a.attempt >= pol.retry_max_attempts:
        why = f"{a.attempt} attempts made (retry_max_attempts={pol.retry_max_attempts})"
    if why is None and pol is not None:
        delay = retry_delay_s(a.occurrence_id, a.attempt, pol.retry_backoff_base_s, pol.retry_backoff_cap_s)
        at = now + math.ceil(delay)
        if pol.retry_deadline_s is not None and at > a.scheduled_for + pol.retry_deadline_s:
            why = f"retry at {at} would pass the deadline (retry_deadline_s={pol.retry_deadline_s})"
        else:
            shard.attempts.retry(a, at, error_class, message)
            res.events.append(attempt_event(a, "RETRY_WAIT", f"{error_class}: {message}"[:500]))
            return
    res.dead.append(a)
    _finish(shard, a, "DEAD", f"{why}; last error {error_class}: {message}"[:1000], res)


def admit(shard: Shard, e: Entry, f: int, avail: int, out: TickOutput) -> bool:
    """The overlap gate of an on-time occurrence of ``e`` at ``f``: True to emit it.

    ``ALLOW``: always. ``SKIP_IF_RUNNING``: not while an earlier occurrence is
    in flight (SKIPPED_OVERLAP). ``QUEUE_ONE``: the first such occurrence waits
    and is released when the running one ends; further ones are skipped.
    """
    overlap = e.policy.overlap
    if overlap == "ALLOW":
        return True
    at = shard.attempts
    oid = occurrence_id(e.schedule_id, e.version, f)
    if not at.occupied(e.schedule_id) and e.schedule_id not in at.queued:  # (a released one is on its way)
        at.occupy(Attempt(oid, e.schedule_id, e.tenant, e.version, f, 1))
        return True
    if overlap == "QUEUE_ONE" and at.queue_one(e.schedule_id, oid, e.version, f):
        return False
    running = at.occupying[e.schedule_id]
    out.events.append(
        Event(
            oid,
            e.schedule_id,
            e.tenant,
            e.version,
            f,
            "SKIPPED_OVERLAP",
            f"{running} still running ({overlap})",
        )
    )
    return False


def emit_retries(shard: Shard, now: int, budget: int, clock: float, out: TickOutput) -> int:
    """The RETRY lane: released QUEUE_ONE occurrences, expired leases, due retries (within the
    tenant's retry budget; a throttled retry waits a second, it is never dropped). Returns the
    budget left."""
    at = shard.attempts
    while shard.released and budget > 0:
        sid, oid, version, f = shard.released.pop(0)
        at.queued.pop(sid, None)  # persisted until now: a crash before this re-derives the release
        at.dirty.add(sid)
        e = shard.entries.get(sid)
        if e is None or e.version != version or e.state not in (ACTIVE, COMPLETED):
            continue
        at.occupy(Attempt(oid, sid, e.tenant, version, f, 1))
        out.dispatch.append(
            Occurrence(
                sid, e.tenant, version, f, shard.available(e, f), int(e.lane), e.base.handler, e.payload
            )
        )
        budget -= 1
    for a in at.expired_leases(now):
        res = ReportResult()
        fail(
            shard, a, True, LEASE_EXPIRED, f"no heartbeat from attempt {a.attempt} (lease ran out)", now, res
        )
        out.events.extend(res.events)
        out.dead.extend(res.dead)
    for a in at.due_retries(now):
        e = shard.entries.get(a.schedule_id)
        if e is None or e.version != a.version or e.state not in (ACTIVE, COMPLETED):
            res = ReportResult()
            _finish(shard, a, "CANCELED", "schedule changed or canceled before the retry", res)
            shard.retry_throttled.pop(a.occurrence_id, None)
            out.events.extend(res.events)
            continue
        quota = shard.tenants.get(a.tenant)
        rate = quota.retry_budget_per_min / 60 if quota else 0
        bucket = shard.retry_bucket(a.tenant, rate)
        if budget <= 0 or bucket.available(clock) < 1:
            at.retry(a, now + 1, a.last_error_class, a.last_error_message)
            if budget > 0:  # held back by the retry budget (not by the tick's): counted once, at emission
                shard.retry_throttled.setdefault(a.occurrence_id, now)
            continue
        bucket.spend(1, clock)
        a.attempt += 1
        at.reemitted(a, now)
        occ = Occurrence(
            a.schedule_id,
            a.tenant,
            a.version,
            a.scheduled_for,
            shard.available(e, a.scheduled_for),
            _RETRY,
            e.base.handler,
            e.payload,
            a.attempt,
        )
        out.dispatch.append(occ)
        since = shard.retry_throttled.pop(a.occurrence_id, None)
        if since is not None and now > since:
            shard.record_throttled(out, occ, now - since, "retry_budget_per_min")
        budget -= 1
    return budget
