"""The record dataclasses: generated from ``schemas/`` into ``_generated.py``, exported here.

One frozen, keyword-only, slotted dataclass per Avro record; field names,
order and defaults are the ``.avsc`` files' (regenerate with ``python -m
scheduler.records.generate``; a test fails when the committed module is
stale). Enums are the plain Avro symbol when decoded and accept the
:mod:`scheduler.vocabulary` enum when built (``ScheduleState.ACTIVE ==
"ACTIVE"``), instants are ``int`` epoch milliseconds UTC (``*_ms``), arrays are
tuples. ``AVRO_NAME`` is the record's full Avro name.
``ScheduleSpecRecord.from_domain`` / ``to_domain`` come from
:mod:`scheduler.records.spec_record`.
"""

from __future__ import annotations

from scheduler.records._generated import (
    NESTED,
    TOP_LEVEL,
    ApiKeyRecord,
    AttemptReport,
    AttemptReports,
    CommandResult,
    DlqEntry,
    FinishedAttempt,
    LaneCursor,
    Occurrence,
    OccurrenceEvent,
    OccurrenceEvents,
    QueuedOccurrence,
    QuotaDemand,
    Record,
    RetryTimer,
    RunningAttempt,
    Schedule,
    ScheduleCommand,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ScheduleSpecRecord,
    ShardState,
    TenantDemand,
    TenantRecord,
    VersionRecord,
)

NS = "ksched.v1"

__all__ = [
    "NESTED",
    "NS",
    "TOP_LEVEL",
    "ApiKeyRecord",
    "AttemptReport",
    "AttemptReports",
    "CommandResult",
    "DlqEntry",
    "FinishedAttempt",
    "LaneCursor",
    "Occurrence",
    "OccurrenceEvent",
    "OccurrenceEvents",
    "QueuedOccurrence",
    "QuotaDemand",
    "Record",
    "RetryTimer",
    "RunningAttempt",
    "Schedule",
    "ScheduleCommand",
    "ScheduleHistoryEntry",
    "ScheduleRuntime",
    "ScheduleSpecRecord",
    "ShardState",
    "TenantDemand",
    "TenantRecord",
    "VersionRecord",
]
