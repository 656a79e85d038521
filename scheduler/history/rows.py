"""The history store's rows and their merge rules (pure: no Kafka, no database).

Every source record becomes a *partial* row of one of three tables; rows with the same key
merge by :func:`merge_occurrence`, :func:`merge_attempt` and :func:`merge_version`. Each merge is
commutative, associative and idempotent (a max or a first-non-null over a total order), so the
result depends on the *set* of records read, never on their order across topics nor on how
often one was read: a replay after a crash, an event before its dispatch record, and two
indexers briefly reading the same partition during a rebalance all end in the same rows.
The SQL backends implement the same rules in their ``ON CONFLICT DO UPDATE`` clauses
(``tests/test_history_mapping.py`` checks the Python side, ``tests/test_history_store.py`` the SQL).

Occurrence state precedence (the one rule behind ``state``): the winner is the greatest
``(state_rank, state_at_ms, state)``, where ``state_rank`` is :func:`rank`:

* a terminal state (SUCCEEDED, DEAD, CANCELED, MISSED, SKIPPED_OVERLAP) beats any other;
* otherwise the higher attempt wins (attempt 2's ENQUEUED beats attempt 1's RETRY_WAIT);
* within one attempt: ENQUEUED < RUNNING < RETRY_WAIT;
* ties (two terminal events of one occurrence, which the processor does not write) go to the
  later ``at_ms``, then the greater state name -- arbitrary but deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.vocabulary import OccurrenceState

TERMINAL_STATES = frozenset(
    {
        OccurrenceState.SUCCEEDED,
        OccurrenceState.DEAD,
        OccurrenceState.CANCELED,
        OccurrenceState.MISSED,
        OccurrenceState.SKIPPED_OVERLAP,
    }
)
_STEP: dict[str, int] = {
    OccurrenceState.SCHEDULED: 0,
    OccurrenceState.ENQUEUED: 1,
    OccurrenceState.RUNNING: 2,
    OccurrenceState.RETRY_WAIT: 3,
}
_TERMINAL_BIT = 1 << 40


def rank(state: str, attempt: int) -> int:
    """The precedence of ``state`` reached in ``attempt`` (0 when none): see the module docstring.

    Fits a signed 64-bit column: attempts are Avro ints (< 2**31).
    """
    if state in TERMINAL_STATES:
        return _TERMINAL_BIT + max(attempt, 0) * 8 + 4
    return max(attempt, 0) * 8 + _STEP.get(state, 0)


def _min_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a <= b else b


def _max_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


@dataclass(slots=True)
class OccurrenceRow:
    """``occurrences``: one scheduled time of one schedule version (DESIGN.md §1).

    ``available_at_ms`` and ``enqueued_at_ms`` are known once a dispatch record is read (NULL for
    an occurrence only events or reports told of: MISSED ones are never dispatched);
    ``enqueued_at_ms`` is the first dispatch's LogAppendTime. ``attempt_count`` is the highest
    attempt number any record named. ``state``/``state_rank``/``state_at_ms``/``reason`` are the
    winning transition's.
    """

    occurrence_id: str
    tenant: str
    schedule_id: str
    version: int
    scheduled_for_ms: int
    available_at_ms: int | None
    enqueued_at_ms: int | None
    state: str
    state_rank: int
    state_at_ms: int
    attempt_count: int
    reason: str | None

    def as_tuple(self) -> tuple[object, ...]:
        return (
            self.occurrence_id, self.tenant, self.schedule_id, self.version, self.scheduled_for_ms,
            self.available_at_ms, self.enqueued_at_ms, self.state, self.state_rank, self.state_at_ms,
            self.attempt_count, self.reason,
        )


OCCURRENCE_COLUMNS = (
    "occurrence_id", "tenant", "schedule_id", "version", "scheduled_for_ms", "available_at_ms",
    "enqueued_at_ms", "state", "state_rank", "state_at_ms", "attempt_count", "reason",
)


def merge_occurrence(old: OccurrenceRow, new: OccurrenceRow) -> OccurrenceRow:
    """``old`` updated in place with ``new`` (same ``occurrence_id``); returns ``old``."""
    if old.available_at_ms is None:
        old.available_at_ms = new.available_at_ms
    old.enqueued_at_ms = _min_known(old.enqueued_at_ms, new.enqueued_at_ms)
    if new.attempt_count > old.attempt_count:
        old.attempt_count = new.attempt_count
    if (new.state_rank, new.state_at_ms, new.state) > (old.state_rank, old.state_at_ms, old.state):
        old.state, old.state_rank, old.state_at_ms, old.reason = (
            new.state, new.state_rank, new.state_at_ms, new.reason
        )
    return old


@dataclass(slots=True)
class AttemptRow:
    """``attempts``: one try of an occurrence by one worker, keyed (occurrence, attempt_no, token).

    A redelivered dispatch record is run again under the same attempt number with a new token,
    so the token is part of the key. From the worker's reports: ``started_at_ms`` (earliest
    STARTED), ``last_heartbeat_ms`` (latest HEARTBEAT), and from the final report
    ``finished_at_ms``, ``result`` (SUCCEEDED or FAILED), ``retryable``, ``error_class``,
    ``error_message``. Reports are the worker's word: a fenced attempt is stored too.
    """

    occurrence_id: str
    attempt_no: int
    token: str
    tenant: str
    schedule_id: str
    worker_id: str
    started_at_ms: int | None
    last_heartbeat_ms: int | None
    finished_at_ms: int | None
    result: str | None
    retryable: bool | None
    error_class: str | None
    error_message: str | None

    def as_tuple(self) -> tuple[object, ...]:
        return (
            self.occurrence_id, self.attempt_no, self.token, self.tenant, self.schedule_id,
            self.worker_id, self.started_at_ms, self.last_heartbeat_ms, self.finished_at_ms,
            self.result, self.retryable, self.error_class, self.error_message,
        )


ATTEMPT_COLUMNS = (
    "occurrence_id", "attempt_no", "token", "tenant", "schedule_id", "worker_id", "started_at_ms",
    "last_heartbeat_ms", "finished_at_ms", "result", "retryable", "error_class", "error_message",
)


def merge_attempt(old: AttemptRow, new: AttemptRow) -> AttemptRow:
    """``old`` updated in place with ``new`` (same key); returns ``old``.

    The final outcome is the greatest ``(finished_at_ms, result)`` (one final report per token in
    practice; a duplicate is identical). ``worker_id`` is the greatest seen (one per token).
    """
    old.worker_id = max(old.worker_id, new.worker_id)
    old.started_at_ms = _min_known(old.started_at_ms, new.started_at_ms)
    old.last_heartbeat_ms = _max_known(old.last_heartbeat_ms, new.last_heartbeat_ms)
    if new.finished_at_ms is not None and (
        old.finished_at_ms is None
        or (new.finished_at_ms, new.result or "") > (old.finished_at_ms, old.result or "")
    ):
        old.finished_at_ms, old.result, old.retryable = new.finished_at_ms, new.result, new.retryable
        old.error_class, old.error_message = new.error_class, new.error_message
    return old


@dataclass(slots=True)
class VersionRow:
    """``schedules``: one version of a schedule, from ``schedule-history`` and ``schedules``.

    The history entry gives ``command``, ``request_id``, ``applied_at_ms`` and the spec when the
    change set one; the ``Schedule`` record gives the full spec, ``created_at_ms``,
    ``idempotency_key``, ``paused_at_ms`` and ``resumed_at_ms`` (only for versions still current
    when the compacted topic is read). Both give ``state`` and ``effective_from_ms`` and agree on
    on ``effective_from_ms``; ``state`` merges by :data:`SCHEDULE_STATE_RANK` (a one-time schedule
    turns COMPLETED without a new version, so the compacted record may be ahead of the history
    entry), every other column first-non-null. ``effective_until_ms`` (the next version's
    ``effective_from_ms``) is computed by the store, since it spans rows.
    """

    schedule_id: str
    version: int
    tenant: str
    state: str
    effective_from_ms: int
    command: str | None
    request_id: str | None
    applied_at_ms: int | None
    spec_json: str | None
    created_at_ms: int | None
    idempotency_key: str | None
    paused_at_ms: int | None
    resumed_at_ms: int | None

    def as_tuple(self) -> tuple[object, ...]:
        return (
            self.schedule_id, self.version, self.tenant, self.state, self.effective_from_ms,
            self.command, self.request_id, self.applied_at_ms, self.spec_json, self.created_at_ms,
            self.idempotency_key, self.paused_at_ms, self.resumed_at_ms,
        )


VERSION_COLUMNS = (
    "schedule_id", "version", "tenant", "state", "effective_from_ms", "command", "request_id",
    "applied_at_ms", "spec_json", "created_at_ms", "idempotency_key", "paused_at_ms", "resumed_at_ms",
)
#: The columns of ``schedules`` merged first-non-null (all but the key and ``state``).
VERSION_COALESCED = tuple(c for c in VERSION_COLUMNS[2:] if c != "state")
#: Within one version a schedule only moves forward: ACTIVE < PAUSED < COMPLETED < CANCELED.
SCHEDULE_STATE_RANK = {"ACTIVE": 0, "PAUSED": 1, "COMPLETED": 2, "CANCELED": 3}


def merge_version(old: VersionRow, new: VersionRow) -> VersionRow:
    """``old`` with the higher-ranked state and every NULL column filled from ``new`` (same key)."""
    if SCHEDULE_STATE_RANK.get(new.state, 4) > SCHEDULE_STATE_RANK.get(old.state, 4):
        old.state = new.state
    for name in VERSION_COALESCED:
        if getattr(old, name) is None:
            setattr(old, name, getattr(new, name))
    return old


@dataclass(slots=True)
class ChangeRow:
    """``schedule_changes``: one accepted command of a schedule (a ``schedule-history`` entry),
    keyed (schedule_id, request_id). PAUSE, RESUME and CANCEL keep the schedule's version, so
    their state changes live here, not in ``schedules`` (whose ``state`` merges by rank within
    a version); the queries take a version's state from its latest change by
    ``(applied_at_ms, recorded_at_ms)`` (the processor's clock has whole seconds). Immutable: a
    record read twice is the same row (``ON CONFLICT DO NOTHING``)."""

    schedule_id: str
    request_id: str
    tenant: str
    version: int
    command: str
    state: str
    applied_at_ms: int
    effective_from_ms: int
    recorded_at_ms: int  # the history record's Kafka timestamp: orders two changes in one second

    def as_tuple(self) -> tuple[object, ...]:
        return (self.schedule_id, self.request_id, self.tenant, self.version, self.command, self.state,
                self.applied_at_ms, self.effective_from_ms, self.recorded_at_ms)


CHANGE_COLUMNS = ("schedule_id", "request_id", "tenant", "version", "command", "state", "applied_at_ms",
                  "effective_from_ms", "recorded_at_ms")


@dataclass(slots=True)
class DlqRow:
    """``dlq_entries``: where the latest death of an occurrence lies in ``ksched.dlq.<tenant>``
    (``dlq_partition``, ``dlq_offset``) with the columns ``GET /v1/dlq`` lists, keyed (tenant,
    occurrence_id). A replay reads the one record there instead of the whole topic. An occurrence
    replayed and dead again has a later record: the greatest ``(dead_at_ms, dlq_partition,
    dlq_offset)`` wins (commutative, like every merge here)."""

    tenant: str
    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for_ms: int
    handler: str
    attempts: int
    last_error_class: str | None
    last_error_message: str | None
    dead_at_ms: int
    reason: str | None
    dlq_partition: int
    dlq_offset: int

    def as_tuple(self) -> tuple[object, ...]:
        return (
            self.tenant, self.occurrence_id, self.schedule_id, self.version, self.scheduled_for_ms,
            self.handler, self.attempts, self.last_error_class, self.last_error_message,
            self.dead_at_ms, self.reason, self.dlq_partition, self.dlq_offset,
        )

    def order(self) -> tuple[int, int, int]:
        return (self.dead_at_ms, self.dlq_partition, self.dlq_offset)


DLQ_COLUMNS = (
    "tenant", "occurrence_id", "schedule_id", "version", "scheduled_for_ms", "handler", "attempts",
    "last_error_class", "last_error_message", "dead_at_ms", "reason", "dlq_partition", "dlq_offset",
)


def merge_dlq(old: DlqRow, new: DlqRow) -> DlqRow:
    """The later death of the two (same key)."""
    return new if new.order() > old.order() else old
