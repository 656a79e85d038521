"""One frozen, keyword-only dataclass per Avro record of ``schemas/``.

Field names, order and defaults mirror the ``.avsc`` files exactly (a test pins
it). Enums are plain ``str`` (the Avro symbol), instants are ``int`` epoch
milliseconds UTC (``*_ms``), arrays are tuples. ``AVRO_NAME`` is the record's
full Avro name.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

if TYPE_CHECKING:
    from scheduler.domain.spec import ScheduleSpec

NS = "ksched.v1"

ScheduleKind = Literal["cron", "once"]
Nonexistent = Literal["skip", "shift"]
Repeated = Literal["once", "all"]
Misfire = Literal["SKIP", "FIRE_ONCE", "CATCH_UP"]
Overlap = Literal["ALLOW", "SKIP_IF_RUNNING", "QUEUE_ONE"]
ScheduleState = Literal["ACTIVE", "PAUSED", "CANCELED", "COMPLETED"]
CommandKind = Literal["CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL"]
AttemptReportKind = Literal["STARTED", "HEARTBEAT", "SUCCEEDED", "FAILED"]
CommandStatus = Literal["ACCEPTED", "REJECTED"]
Lane = Literal["STRICT", "FLEXIBLE", "CATCH_UP", "RETRY"]
OccurrenceState = Literal[
    "SCHEDULED", "ENQUEUED", "RUNNING", "SUCCEEDED", "RETRY_WAIT", "DEAD", "MISSED", "CANCELED",
    "SKIPPED_OVERLAP",
]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MS = _dt.timedelta(milliseconds=1)


def _to_ms(t: _dt.datetime | None) -> int | None:
    return None if t is None else (t - _EPOCH) // _ONE_MS


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleSpecRecord:
    """Avro ``ksched.v1.ScheduleSpec``: :class:`scheduler.domain.spec.ScheduleSpec` on the wire.

    ``start``/``end`` become ``start_ms``/``end_ms`` (epoch ms UTC; sub-millisecond
    precision is truncated). Convert with :meth:`from_domain` / :meth:`to_domain`.
    """

    AVRO_NAME: ClassVar[str] = f"{NS}.ScheduleSpec"

    kind: ScheduleKind
    cron: str | None = None
    at: str | None = None
    timezone: str
    start_ms: int | None = None
    end_ms: int | None = None
    max_runs: int | None = None
    nonexistent: Nonexistent = "skip"
    repeated: Repeated = "once"
    window_minutes: int = 0
    misfire: Misfire = "FIRE_ONCE"
    catch_up_limit: int = 0
    max_lateness_s: int = 60
    overlap: Overlap = "ALLOW"
    retry_max_attempts: int = 3
    retry_backoff_base_s: float = 1.0
    retry_backoff_cap_s: float = 300.0
    retry_deadline_s: int | None = None
    handler: str
    payload: bytes = b""

    @classmethod
    def from_domain(cls, spec: ScheduleSpec) -> ScheduleSpecRecord:
        return cls(
            kind=spec.kind, cron=spec.cron, at=spec.at, timezone=spec.timezone,
            start_ms=_to_ms(spec.start), end_ms=_to_ms(spec.end), max_runs=spec.max_runs,
            nonexistent=spec.nonexistent, repeated=spec.repeated, window_minutes=spec.window_minutes,
            misfire=spec.misfire, catch_up_limit=spec.catch_up_limit, max_lateness_s=spec.max_lateness_s,
            overlap=spec.overlap, retry_max_attempts=spec.retry_max_attempts,
            retry_backoff_base_s=spec.retry_backoff_base_s, retry_backoff_cap_s=spec.retry_backoff_cap_s,
            retry_deadline_s=spec.retry_deadline_s, handler=spec.handler, payload=spec.payload,
        )

    def to_domain(self) -> ScheduleSpec:
        """The domain spec (field checks run; raises ``SpecError`` for a spec that fails them)."""
        from scheduler.domain.bounds import instant_from_ms
        from scheduler.domain.spec import ScheduleSpec

        return ScheduleSpec(
            kind=self.kind, cron=self.cron, at=self.at, timezone=self.timezone,
            start=instant_from_ms("start", self.start_ms), end=instant_from_ms("end", self.end_ms),
            max_runs=self.max_runs,
            nonexistent=self.nonexistent, repeated=self.repeated, window_minutes=self.window_minutes,
            misfire=self.misfire, catch_up_limit=self.catch_up_limit, max_lateness_s=self.max_lateness_s,
            overlap=self.overlap, retry_max_attempts=self.retry_max_attempts,
            retry_backoff_base_s=self.retry_backoff_base_s, retry_backoff_cap_s=self.retry_backoff_cap_s,
            retry_deadline_s=self.retry_deadline_s, handler=self.handler, payload=self.payload,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleCommand:
    """Avro ``ksched.v1.ScheduleCommand`` on ``ksched.commands``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.ScheduleCommand"

    request_id: str
    tenant: str
    schedule_id: str | None = None
    idempotency_key: str | None = None
    kind: CommandKind
    expected_version: int | None = None
    spec: ScheduleSpecRecord | None = None
    issued_at_ms: int
    reply_to: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptReport:
    """Avro ``ksched.v1.AttemptReport`` on ``ksched.commands`` (from workers)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.AttemptReport"

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for_ms: int
    attempt: int
    token: str
    kind: AttemptReportKind
    retryable: bool | None = None
    error_class: str | None = None
    error_message: str | None = None
    worker_id: str
    reported_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """Avro ``ksched.v1.Schedule``: the compacted ``ksched.schedules`` value."""

    AVRO_NAME: ClassVar[str] = f"{NS}.Schedule"

    tenant: str
    schedule_id: str
    version: int
    state: ScheduleState
    spec: ScheduleSpecRecord
    created_at_ms: int
    updated_at_ms: int
    effective_from_ms: int
    idempotency_key: str | None = None
    paused_at_ms: int | None = None
    resumed_at_ms: int | None = None
    last_request_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleHistoryEntry:
    """Avro ``ksched.v1.ScheduleHistoryEntry`` on ``ksched.schedule-history``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.ScheduleHistoryEntry"

    schedule_id: str
    tenant: str
    version: int
    command: CommandKind
    request_id: str
    spec: ScheduleSpecRecord | None = None
    state: ScheduleState
    applied_at_ms: int
    effective_from_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardState:
    """Avro ``ksched.v1.ShardState`` on ``ksched.state``, key ``shard:<p>``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.ShardState"

    shard: int
    watermark_ms: int
    ticks: int
    occurrences_emitted: int
    updated_at_ms: int
    cursors: tuple[LaneCursor, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneCursor:
    """Avro ``ksched.v1.LaneCursor`` (inside :class:`ShardState`)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.LaneCursor"

    tenant: str
    lane: Lane
    at_s: int
    schedule_id: str
    throttled_from_s: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunningAttempt:
    """Avro ``ksched.v1.RunningAttempt`` (inside :class:`ScheduleRuntime`)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.RunningAttempt"

    occurrence_id: str
    version: int
    scheduled_for_ms: int
    attempt: int
    token: str | None = None
    lease_expires_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryTimer:
    """Avro ``ksched.v1.RetryTimer`` (inside :class:`ScheduleRuntime`)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.RetryTimer"

    occurrence_id: str
    version: int
    scheduled_for_ms: int
    attempt: int
    due_at_ms: int
    last_error_class: str | None = None
    last_error_message: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class FinishedAttempt:
    """Avro ``ksched.v1.FinishedAttempt`` (inside :class:`ScheduleRuntime`)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.FinishedAttempt"

    occurrence_id: str
    attempt: int
    until_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class QueuedOccurrence:
    """Avro ``ksched.v1.QueuedOccurrence`` (inside :class:`ScheduleRuntime`)."""

    AVRO_NAME: ClassVar[str] = f"{NS}.QueuedOccurrence"

    occurrence_id: str
    version: int
    scheduled_for_ms: int
    available_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleRuntime:
    """Avro ``ksched.v1.ScheduleRuntime`` on ``ksched.state``, key ``schedule_id``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.ScheduleRuntime"

    schedule_id: str
    tenant: str
    version: int
    runs_emitted: int = 0
    running: tuple[RunningAttempt, ...] = ()
    retries: tuple[RetryTimer, ...] = ()
    queued: QueuedOccurrence | None = None
    catch_up_cursor_ms: int | None = None
    catch_up_until_ms: int | None = None
    catch_up_emitted: int = 0
    finished: tuple[FinishedAttempt, ...] = ()
    updated_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandResult:
    """Avro ``ksched.v1.CommandResult`` on ``ksched.results``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.CommandResult"

    request_id: str
    tenant: str
    schedule_id: str | None = None
    status: CommandStatus
    version: int | None = None
    reason: str | None = None
    code: str | None = None
    processed_at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Occurrence:
    """Avro ``ksched.v1.Occurrence``: the dispatch record on ``ksched.dispatch.<tenant>``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.Occurrence"

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for_ms: int
    available_at_ms: int
    enqueued_at_ms: int
    attempt: int
    lane: Lane
    handler: str
    payload: bytes
    deadline_ms: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class OccurrenceEvent:
    """Avro ``ksched.v1.OccurrenceEvent`` on ``ksched.occurrence-events``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.OccurrenceEvent"

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for_ms: int
    state: OccurrenceState
    attempt: int | None = None
    reason: str | None = None
    at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class DlqEntry:
    """Avro ``ksched.v1.DlqEntry`` on ``ksched.dlq.<tenant>``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.DlqEntry"

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for_ms: int
    available_at_ms: int
    lane: Lane
    handler: str
    payload: bytes
    attempts: int
    last_error_class: str | None = None
    last_error_message: str | None = None
    dead_at_ms: int
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class VersionRecord:
    """Avro ``ksched.v1.VersionRecord`` on ``ksched.versions.<tenant>``."""

    AVRO_NAME: ClassVar[str] = f"{NS}.VersionRecord"

    schedule_id: str
    tenant: str
    version: int
    state: ScheduleState
    updated_at_ms: int
    paused_at_ms: int | None = None
    resumed_at_ms: int | None = None


Record = (
    ScheduleCommand | AttemptReport | Schedule | ScheduleHistoryEntry | ShardState | ScheduleRuntime
    | CommandResult | Occurrence | OccurrenceEvent | DlqEntry | VersionRecord
)
"""Any top-level record (one that travels on its own, single-object encoded)."""

TOP_LEVEL: tuple[type[Record], ...] = (
    ScheduleCommand, AttemptReport, Schedule, ScheduleHistoryEntry, ShardState, ScheduleRuntime,
    CommandResult, Occurrence, OccurrenceEvent, DlqEntry, VersionRecord,
)
NESTED: tuple[
    type[ScheduleSpecRecord | RunningAttempt | RetryTimer | QueuedOccurrence | LaneCursor | FinishedAttempt],
    ...,
] = (
    ScheduleSpecRecord, RunningAttempt, RetryTimer, QueuedOccurrence, LaneCursor, FinishedAttempt,
)
