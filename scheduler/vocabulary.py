"""The one vocabulary of ksched: every enumerated value of the contract, and the shared wire strings.

Each enum's members are, in order, the symbols of the Avro enum of the same
name in ``schemas/`` (``tests/test_vocabulary.py`` fails naming the enum and
the difference when they drift). The ``StrEnum`` members *are* their Avro
symbols (``ScheduleState.ACTIVE == "ACTIVE"``), so code naming a value with the
enum and data decoded from Kafka (plain ``str``) compare and hash alike.

Next to each ``StrEnum`` is a ``Literal`` of the same symbols (``...Symbol``):
record and spec fields are typed ``Enum | EnumSymbol`` because a static type
checker cannot otherwise accept both ``ScheduleState.ACTIVE`` and
``"ACTIVE"`` for one field, and decoded records hold the plain symbol. The same
test checks every ``...Symbol`` against the schema too.

:class:`Lane` is an ``IntEnum``: its value is the lane's priority (lower first,
the processor indexes by it); its *name* is the Avro symbol.

This module imports nothing from ``scheduler`` so that any layer may use it.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Final, Literal, cast

# --- the schedule spec (ScheduleSpec.avsc) ---------------------------------------------------------


class ScheduleKind(StrEnum):
    """Recurring by a cron expression, or a single local time."""

    CRON = "cron"
    ONCE = "once"


ScheduleKindSymbol = Literal["cron", "once"]


class Nonexistent(StrEnum):
    """DST spring-forward gap: skip the missing local time, or shift to the first valid instant."""

    SKIP = "skip"
    SHIFT = "shift"


NonexistentSymbol = Literal["skip", "shift"]


class Repeated(StrEnum):
    """DST fall-back repeated local time: fire once (first instant) or at every physical instant."""

    ONCE = "once"
    ALL = "all"


RepeatedSymbol = Literal["once", "all"]


class Misfire(StrEnum):
    """What happens to occurrences later than ``max_lateness_s``."""

    SKIP = "SKIP"
    FIRE_ONCE = "FIRE_ONCE"
    CATCH_UP = "CATCH_UP"


MisfireSymbol = Literal["SKIP", "FIRE_ONCE", "CATCH_UP"]


class Overlap(StrEnum):
    """Whether a new occurrence may start while a previous one of the schedule is running."""

    ALLOW = "ALLOW"
    SKIP_IF_RUNNING = "SKIP_IF_RUNNING"
    QUEUE_ONE = "QUEUE_ONE"


OverlapSymbol = Literal["ALLOW", "SKIP_IF_RUNNING", "QUEUE_ONE"]

# --- schedules and their commands ------------------------------------------------------------------


class ScheduleState(StrEnum):
    """Lifecycle state of a schedule; CANCELED and COMPLETED are terminal."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    CANCELED = "CANCELED"
    COMPLETED = "COMPLETED"


ScheduleStateSymbol = Literal["ACTIVE", "PAUSED", "CANCELED", "COMPLETED"]
TERMINAL_SCHEDULE_STATES: Final = frozenset({ScheduleState.CANCELED, ScheduleState.COMPLETED})


class CommandKind(StrEnum):
    """What a schedule command asks for."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    CANCEL = "CANCEL"


CommandKindSymbol = Literal["CREATE", "UPDATE", "PAUSE", "RESUME", "CANCEL"]


class CommandStatus(StrEnum):
    """Whether a command was applied (``CommandResult.status``)."""

    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"


CommandStatusSymbol = Literal["ACCEPTED", "REJECTED"]


class RejectCode(StrEnum):
    """``CommandResult.code`` of a rejection.

    A plain string on the wire (not an Avro enum), so a new code never breaks an
    old reader; the schema's doc lists the codes a caller should expect.
    """

    INVALID_SPEC = "INVALID_SPEC"
    INVALID_COMMAND = "INVALID_COMMAND"
    UNKNOWN_TENANT = "UNKNOWN_TENANT"
    WRONG_PARTITION = "WRONG_PARTITION"
    STALE_VERSION = "STALE_VERSION"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    UNDECODABLE = "UNDECODABLE"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    TERMINAL = "TERMINAL"
    INTERNAL = "INTERNAL"
    TENANT_DISABLED = "TENANT_DISABLED"
    TENANT_MISMATCH = "TENANT_MISMATCH"  # the tenant field names another tenant than the topic's


# --- tenants (TenantRecord.avsc) -------------------------------------------------------------------


class TenantState(StrEnum):
    """Whether a tenant is served: DISABLED refuses its commands and records its due occurrences
    MISSED until it is enabled again (``ksched tenants disable | enable``)."""

    ACTIVE = "ACTIVE"
    DISABLED = "DISABLED"


TenantStateSymbol = Literal["ACTIVE", "DISABLED"]


# --- occurrences and attempts ----------------------------------------------------------------------


class OccurrenceState(StrEnum):
    """Occurrence state (DESIGN.md §1): the main path, then the side states."""

    SCHEDULED = "SCHEDULED"
    ENQUEUED = "ENQUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    RETRY_WAIT = "RETRY_WAIT"
    DEAD = "DEAD"
    MISSED = "MISSED"
    CANCELED = "CANCELED"
    SKIPPED_OVERLAP = "SKIPPED_OVERLAP"


OccurrenceStateSymbol = Literal[
    "SCHEDULED", "ENQUEUED", "RUNNING", "SUCCEEDED", "RETRY_WAIT", "DEAD", "MISSED", "CANCELED",
    "SKIPPED_OVERLAP",
]
FINAL_OCCURRENCE_STATES: Final = frozenset({
    OccurrenceState.SUCCEEDED, OccurrenceState.DEAD, OccurrenceState.MISSED, OccurrenceState.CANCELED,
    OccurrenceState.SKIPPED_OVERLAP,
})
"""The states an occurrence ends in: every expected occurrence records exactly one of them."""


class AttemptReportKind(StrEnum):
    """Lifecycle point a worker's attempt report describes."""

    STARTED = "STARTED"
    HEARTBEAT = "HEARTBEAT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


AttemptReportKindSymbol = Literal["STARTED", "HEARTBEAT", "SUCCEEDED", "FAILED"]


class Lane(IntEnum):
    """Emission lane of an occurrence; the value is its priority (lower is served first)."""

    STRICT = 0
    FLEXIBLE = 1
    CATCH_UP = 2
    RETRY = 3


LaneSymbol = Literal["STRICT", "FLEXIBLE", "CATCH_UP", "RETRY"]


def lane_symbol(lane: Lane) -> LaneSymbol:
    """The Avro symbol of ``lane`` (its name), typed for the records' ``lane`` fields."""
    return cast(LaneSymbol, lane.name)


# --- reserved error classes of attempt reports and DLQ entries -------------------------------------


class ErrorClass(StrEnum):
    """``error_class`` values ksched itself writes; handlers' own errors carry their class name."""

    CANCELED = "ksched.Canceled"
    """A worker did not run a stale occurrence (schedule paused, canceled or updated): not retried."""
    UNKNOWN_HANDLER = "ksched.UnknownHandler"
    """No handler of that name is registered on the worker: retryable (another worker may have it)."""
    LEASE_EXPIRED = "ksched.LeaseExpired"
    """A started attempt sent no heartbeat within its lease."""
    START_LEASE_EXPIRED = "ksched.StartLeaseExpired"
    """An emitted attempt was not reported STARTED by any worker in time."""


VOCABULARY: Final[tuple[type[StrEnum] | type[IntEnum], ...]] = (
    ScheduleKind, Nonexistent, Repeated, Misfire, Overlap, ScheduleState, CommandKind, CommandStatus,
    OccurrenceState, AttemptReportKind, Lane, TenantState,
)
"""The enums that mirror an Avro enum of the same name in ``schemas/``."""
