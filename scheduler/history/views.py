"""What the history store's queries answer (``scheduler/history/queries.py``): frozen values.

These are what the SDK (``SchedulerClient.describe`` / ``occurrence`` / ``occurrences`` /
``list``), the CLI and the HTTP API hand out: no raw rows, no dicts. Instants are epoch
milliseconds UTC like the records; ``None`` where the store does not know (yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from scheduler.records import Schedule, ScheduleSpecRecord

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class VersionView:
    """One version of a schedule (made by a CREATE or an UPDATE) and the interval it was in effect.

    ``state`` is the state it was left in (for the latest: the schedule's current state);
    ``effective_until_ms`` is the next version's ``effective_from_ms``, None for the latest.
    ``spec`` is None only while the indexer has not read the record that carries it.
    """

    schedule_id: str
    version: int
    state: str
    command: str | None
    request_id: str | None
    applied_at_ms: int | None
    effective_from_ms: int
    effective_until_ms: int | None
    spec: ScheduleSpecRecord | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChangeView:
    """One accepted command of a schedule (CREATE, UPDATE, PAUSE, RESUME, CANCEL), in order; a
    PAUSE, RESUME or CANCEL keeps the version, so this is where they show."""

    version: int
    command: str
    state: str
    request_id: str
    applied_at_ms: int
    effective_from_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class OccurrenceView:
    """One occurrence (DESIGN.md §1) as the store knows it.

    ``lag_ms`` = ``enqueued_at_ms - scheduled_for_ms`` (None until a dispatch record is indexed:
    a MISSED occurrence never has one).
    """

    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for_ms: int
    available_at_ms: int | None
    enqueued_at_ms: int | None
    state: str
    state_at_ms: int
    attempt_count: int
    reason: str | None

    @property
    def lag_ms(self) -> int | None:
        return None if self.enqueued_at_ms is None else self.enqueued_at_ms - self.scheduled_for_ms


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptView:
    """One try of an occurrence by one worker, from the worker's reports (one per token)."""

    attempt_no: int
    token: str
    worker_id: str
    started_at_ms: int | None
    last_heartbeat_ms: int | None
    finished_at_ms: int | None
    result: str | None
    retryable: bool | None
    error_class: str | None
    error_message: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class OccurrenceDetail:
    """An occurrence and its whole attempt history (ordered by attempt number, then start)."""

    occurrence: OccurrenceView
    attempts: tuple[AttemptView, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class NextFire:
    """A future occurrence computed from the current spec: nominal time and dispatch time (s)."""

    scheduled_for_ms: int
    available_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleDescription:
    """``describe``: the current schedule, its versions, every accepted command (oldest first), its
    next fires and its last occurrences (newest first). ``next_fires`` is empty unless ACTIVE."""

    schedule: Schedule
    versions: tuple[VersionView, ...]
    changes: tuple[ChangeView, ...]
    next_fires: tuple[NextFire, ...]
    last_occurrences: tuple[OccurrenceView, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterView:
    """An occurrence in its tenant's DLQ, as its latest death left it (``dlq_entries``)."""

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
    dlq_partition: int  # where the latest death's record is in the tenant's DLQ topic
    dlq_offset: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` as ``cursor`` for the next (None: last page)."""

    items: tuple[T, ...]
    next_cursor: str | None
