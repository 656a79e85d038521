"""The attempt lifecycle of a shard (DESIGN.md §5): attempt reports and their outcomes, no Kafka.

Applied in step 1 of the tick: :func:`apply_report` checks a report against the
schedule it names, fences it by attempt number and token, and records what it
decided (RUNNING, SUCCEEDED, RETRY_WAIT, DEAD, CANCELED); :func:`fail` decides a
failed attempt's retry or death. Step 2's overlap gate and RETRY lane are in
:mod:`scheduler.processor.retry_lane`. Every decision is recorded as an
occurrence event; a dead occurrence also goes to the tenant's DLQ
(``TickOutput.dead``). The lifecycle sees its shard only through
:class:`LifecycleContext`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from scheduler import native
from scheduler.domain.backoff import retry_delay_s
from scheduler.domain.ids import occurrence_id_of
from scheduler.processor.attempts import (
    Attempt,
    Attempts,
    attempt_event,
    persisted_running,
)
from scheduler.processor.intake import SucceededIntake
from scheduler.processor.model import ACTIVE, COMPLETED, PAST_ONCE_LIMIT_S, Entry, Event
from scheduler.processor.quotas import TokenBucket
from scheduler.tenants import Tenant
from scheduler.vocabulary import AttemptReportKind, ErrorClass, OccurrenceState, ScheduleKind

# Report kinds as module globals: read per report (a burst brings one or more per occurrence),
# where a class attribute lookup costs ~100 ns.
_STARTED, _HEARTBEAT, _SUCCEEDED, _FAILED = (
    AttemptReportKind.STARTED, AttemptReportKind.HEARTBEAT, AttemptReportKind.SUCCEEDED,
    AttemptReportKind.FAILED,
)
_SUCCEEDED_STATE = OccurrenceState.SUCCEEDED
# An Event made from its fields in order without its named tuple's __new__ (a Python function:
# 0.47 against 0.15 µs), as namedtuple's own _make does: the SUCCEEDED event of a burst's reports.
_tuple_new = tuple.__new__
CLOCK_SKEW_S = 300  # a report may name an occurrence this far ahead of the shard's clock (owner skew)
INVALID_LOG_EVERY_S = 10.0  # at most one warning per shard per interval for reports that cannot apply

_intake = native.load("scheduler.processor.intake")  # compiled when built
log = logging.getLogger("ksched.processor.reports")
_invalid_logged: dict[int, tuple[float, int]] = {}  # shard id -> (last warning, reports since)


class LifecycleContext(Protocol):
    """What the attempt lifecycle may see of its shard: the attempts it decides, the schedules
    and tenants it reads, the retry budget and ``max_running``. It never arms, drops or counts schedules; the
    shard store (:class:`scheduler.processor.store.ShardStore`) is one."""

    @property
    def shard_id(self) -> int: ...
    @property
    def lease_s(self) -> int: ...
    @property
    def attempts(self) -> Attempts: ...
    @property
    def entries(self) -> Mapping[str, Entry]: ...
    @property
    def tenants(self) -> Mapping[str, Tenant]: ...

    def retry_bucket(self, tenant: str, rate: float, clock: float) -> TokenBucket: ...

    def running_room(self, tenant: str, cap: int) -> int: ...

    def took_running(self, tenant: str, n: int) -> None: ...

    def available(self, e: Entry, f: int) -> int: ...


@dataclass(slots=True)
class ReportResult:
    """What one attempt report decided: events to record, occurrences that died."""

    events: list[Event] = field(default_factory=list)
    dead: list[Attempt] = field(default_factory=list)
    ignored: str | None = None  # why the report was not the current attempt's (counted, not applied)


def apply_report(
    ctx: LifecycleContext,
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
    """:func:`apply` of one report, its events and dead occurrences in a :class:`ReportResult`."""
    res = ReportResult()
    res.ignored = apply(ctx, kind, oid, schedule_id, tenant, version, scheduled_for, attempt, token,
                        retryable, error_class, error_message, now, res.events, res.dead)
    return res


def apply(
    ctx: LifecycleContext,
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
    events: list[Event],
    dead: list[Attempt],
) -> str | None:
    """Apply one STARTED / HEARTBEAT / SUCCEEDED / FAILED report (``scheduled_for`` in epoch s);
    never raises for bad input. The events it decides are appended to ``events``, the
    occurrences it declares dead to ``dead`` (the inbox passes the same two lists for a whole
    batch of reports and writes them once); returns why the report was ignored (counted, not
    applied), or None. Positional: the inbox calls it per report, where keywords cost more.

    A report is first checked against the schedule the shard holds (:func:`invalid_report`):
    one that names another tenant, an unknown schedule or version, or an occurrence that
    schedule cannot have, is ignored before anything is written (it would otherwise point
    a DLQ write at a topic that does not exist, or invent a run when its lease expired).
    A report of an attempt that is not the current one, or with another token, is ignored
    (fencing). A FAILED report with error class ``ksched.Canceled`` means the worker did
    not run a stale occurrence.
    """
    at = ctx.attempts
    e = ctx.entries.get(schedule_id)
    invalid = invalid_report(ctx, e, oid, schedule_id, tenant, version, scheduled_for, attempt)
    if invalid is not None:
        _warn_invalid(ctx.shard_id, kind, oid, invalid)
        return invalid
    assert e is not None  # invalid_report checked it
    a, stale = at.current(oid, attempt, token)
    if stale is not None:
        return stale
    if a is None:
        unknown = unknown_occurrence(e, version, scheduled_for, now)
        if unknown is not None:
            _warn_invalid(ctx.shard_id, kind, oid, unknown)
            return unknown
        if kind == _SUCCEEDED:  # the common report of a burst (an ALLOW first attempt's only
            # one): finishing untracks it, so tracking it first would only churn the indexes
            fields = (oid, schedule_id, e.tenant, version, scheduled_for, _SUCCEEDED_STATE, None, attempt)
            events.append(_tuple_new(Event, fields))
            released = at.finish_untracked(schedule_id, oid, attempt, now)
            if released is not None:
                at.released.append((schedule_id, *released))
            return None
        a = Attempt(oid, schedule_id, e.tenant, version, scheduled_for, attempt)
        at.track(a)
    return _apply_current(ctx, e, a, kind, token, retryable, error_class, error_message, now, events, dead)


def succeeded_intake(ctx: LifecycleContext, now: int, events: list[Event]) -> SucceededIntake:
    """The common report of a burst, applied in a compiled loop of its own (:mod:`.intake`):
    ``intake.run(reports, start, tenant)`` applies the scanned reports (``avro_fast.ScannedReport``)
    of ``reports[start:]``, arrived on ``tenant``'s topic, in order while each is the SUCCEEDED
    report of an occurrence's first attempt that :func:`apply` would accept untracked, of the
    current version, at or after the version took effect; it returns the index of the first it
    does not take (``len(reports)`` when none). Each taken report's event goes to ``events``
    and its occurrence is remembered finished, exactly as :func:`apply` does it. The first
    report not taken changed nothing: the caller applies it with :func:`apply`, which decides it
    and says why it is ignored, then runs the intake again after it (the order of a batch's
    reports is kept).

    The inbox reaches the same decision through six Python frames (``_report``, :func:`apply`,
    the fences, the occurrence checks, finishing it), besides the fire-time memo, the id's hash
    and the finished memory that the intake calls too; the process's main thread spent 38 % of a
    held backlog's time in them (docs/performance.md, session 21). Its checks are :func:`apply`'s,
    tested equal on generated reports (tests/test_lifecycle_fast.py). It changes both or neither
    of ``events`` and the finished memory for the report it is taking, also when it raises. The
    shard's maps are taken once: build one per batch (``now`` and ``events`` are the batch's)."""
    at = ctx.attempts
    intake: SucceededIntake = _intake.SucceededIntake(
        entries=ctx.entries, tenants=ctx.tenants, inflight=at.inflight, occupying=at.occupying,  # type: ignore[arg-type]
        finished_get=at.last_finished, remember=at.remember_finished, occurrence_id_of=occurrence_id_of,
        event_type=Event, succeeded_kind=_SUCCEEDED, succeeded_state=_SUCCEEDED_STATE,
        horizon=now + CLOCK_SKEW_S, events=events,
    )
    return intake


def _apply_current(
    ctx: LifecycleContext,
    e: Entry,
    a: Attempt,
    kind: str,
    token: str,
    retryable: bool | None,
    error_class: str | None,
    error_message: str | None,
    now: int,
    events: list[Event],
    dead: list[Attempt],
) -> str | None:
    """:func:`apply` of a report of ``a``, the tracked current attempt, once it passed the fences."""
    at = ctx.attempts
    lease_until = now + ctx.lease_s
    if kind == _STARTED:
        at.started(a, token, lease_until, persisted_running(a, e.policy.overlap))
    elif kind == _HEARTBEAT:
        if a.token is None:
            a.token = token
        at.lease(a, lease_until)
    elif kind == _SUCCEEDED:
        finish(ctx, a, _SUCCEEDED_STATE, None, events, now)
    elif kind == _FAILED and error_class == ErrorClass.CANCELED:
        finish(ctx, a, OccurrenceState.CANCELED, error_message or "not run: stale", events, now)
    elif kind == _FAILED:
        fail(ctx, a, bool(retryable), error_class, error_message, now, events, dead)
    else:
        return f"unknown report kind {kind!r}"
    return None


def invalid_report(
    ctx: LifecycleContext,
    e: Entry | None,
    oid: str,
    schedule_id: str,
    tenant: str,
    version: int,
    scheduled_for: int,
    attempt: int = 1,
) -> str | None:
    """Why a report cannot belong to a schedule of this shard, or None.

    The tenant must be registered and own the schedule, the version must exist
    (1..current), the attempt must be one (attempts count from 1), and
    ``occurrence_id`` must be ``H(schedule_id, version, scheduled_for)``: that binds
    the id to the schedule, so a report cannot reach another schedule's attempt
    through its id.
    """
    if tenant not in ctx.tenants:
        return f"tenant {tenant!r} is not registered (report of schedule {schedule_id})"
    if e is None:
        return f"schedule {schedule_id} does not exist on shard {ctx.shard_id}"
    if e.tenant != tenant:
        return f"schedule {schedule_id} belongs to another tenant than {tenant!r}"
    if not 1 <= version <= e.version:
        return f"version {version} of schedule {schedule_id} does not exist (current version {e.version})"
    if attempt < 1:
        return f"attempt {attempt} does not exist (attempts count from 1)"
    if oid != occurrence_id_of(schedule_id, version, scheduled_for):
        return (f"occurrence_id {oid} is not H(schedule_id, version={version}, "
                f"scheduled_for={scheduled_for}) of schedule {schedule_id}")
    return None


def unknown_occurrence(e: Entry, version: int, scheduled_for: int, now: int) -> str | None:
    """Why the processor must not start tracking an attempt of ``e`` at ``scheduled_for``.

    An untracked attempt is adopted from its report, and a tracked one is retried
    when its lease runs out: adopting an occurrence the schedule never had would
    invent a run. Its ``scheduled_for`` must not be in the future, and for the
    current version it must be a fire time of the compiled spec. The shard holds
    no spec of an older version; such an attempt is adopted unchecked because it
    is never retried (:func:`fail` records it CANCELED): it cannot cause a run.
    """
    if scheduled_for > now + CLOCK_SKEW_S:
        return f"scheduled_for {scheduled_for} is in the future (now {now}): no such occurrence was emitted"
    if version == e.version:
        if not e.compiled.is_fire_time(scheduled_for):
            return f"scheduled_for {scheduled_for} is not a fire time of version {version} of {e.schedule_id}"
        # version_start(e) <= effective_from: most reports are of later times, decided here
        if scheduled_for < e.effective_from and scheduled_for < version_start(e):
            return (f"scheduled_for {scheduled_for} is before version {version} of {e.schedule_id} "
                    f"took effect ({version_start(e)})")
    return None


def version_start(e: Entry) -> int:
    """The earliest ``scheduled_for`` an occurrence of ``e``'s current version can have.

    ``effective_from`` (the create or update; a RESUME moves it on, so a pause's start and,
    for version 1, the creation bound it too), less the slack a one-time schedule created
    after its time still fires within (docs/schedules.md).
    """
    start = e.effective_from
    if e.paused_at_ms is not None:
        start = min(start, e.paused_at_ms // 1000)
    if e.version == 1 and e.created_at_ms:
        start = min(start, e.created_at_ms // 1000)
    if e.compiled.kind == ScheduleKind.ONCE:
        start -= PAST_ONCE_LIMIT_S + e.policy.max_lateness_s
    return start


def _warn_invalid(shard_id: int, kind: str, oid: str, why: str) -> None:
    """Log a report that cannot apply (a misbehaving or foreign worker): the first at once, then
    one line per interval with the count, so a flood of them cannot flood the log."""
    clock = time.monotonic()
    last, since = _invalid_logged.get(shard_id, (-INVALID_LOG_EVERY_S, 0))
    if clock - last < INVALID_LOG_EVERY_S:
        _invalid_logged[shard_id] = (last, since + 1)
        return
    _invalid_logged[shard_id] = (clock, 0)
    more = f" ({since} more ignored since the last warning)" if since else ""
    log.warning("shard %d: %s report of %s ignored: %s%s", shard_id, kind, oid, why, more)


def finish(
    ctx: LifecycleContext, a: Attempt, state: str, reason: str | None, events: list[Event], now: int
) -> None:
    """Attempt ``a``'s occurrence ended in ``state``: its event appended to ``events``, the
    QUEUE_ONE occurrence it held back released."""
    events.append(attempt_event(a, state, reason))
    released = ctx.attempts.finish(a, now)
    if released is not None:
        ctx.attempts.released.append((a.schedule_id, *released))


def fail(
    ctx: LifecycleContext,
    a: Attempt,
    retryable: bool,
    error_class: str | None,
    message: str | None,
    now: int,
    events: list[Event],
    dead: list[Attempt],
) -> None:
    """Attempt ``a`` failed: schedule its retry (RETRY_WAIT), or declare it DEAD (appended to
    ``dead``); a retryable failure of an occurrence its schedule no longer wants (updated,
    paused, canceled) is recorded CANCELED: the job did not fail for good, it was superseded.
    The events go to ``events``."""
    e = ctx.entries.get(a.schedule_id)
    a.last_error_class, a.last_error_message = error_class, message
    why: str | None = None
    if not retryable:
        why = f"permanent error {error_class}"
    elif e is None or e.version != a.version or e.state not in (ACTIVE, COMPLETED):
        if e is None:
            superseded = "schedule unknown"
        elif e.version != a.version:
            superseded = f"superseded by version {e.version}"
        else:
            superseded = f"schedule {e.state.lower()}"
        why = f"{superseded}: not retried after {error_class}: {message}"[:1000]
        finish(ctx, a, OccurrenceState.CANCELED, why, events, now)
        return
    elif a.attempt >= e.policy.retry_max_attempts:
        why = f"{a.attempt} attempts made (retry_max_attempts={e.policy.retry_max_attempts})"
    else:
        pol = e.policy
        delay = retry_delay_s(a.occurrence_id, a.attempt, pol.retry_backoff_base_s, pol.retry_backoff_cap_s)
        at = now + math.ceil(delay)
        if pol.retry_deadline_s is not None and at > a.scheduled_for + pol.retry_deadline_s:
            why = f"retry at {at} would pass the deadline (retry_deadline_s={pol.retry_deadline_s})"
        else:
            ctx.attempts.retry(a, at, error_class, message)
            events.append(attempt_event(a, OccurrenceState.RETRY_WAIT, f"{error_class}: {message}"[:500]))
            return
    dead.append(a)
    finish(ctx, a, OccurrenceState.DEAD, f"{why}; last error {error_class}: {message}"[:1000], events, now)
