"""Avro records of ksched (``schemas/*.avsc``) and their single-object codecs.

>>> from scheduler.records import Occurrence, encode, decode
>>> data = encode(occurrence)                 # b"\\xc3\\x01" + fingerprint + Avro body
>>> decode(data, Occurrence) == occurrence    # RecordDecodeError for anything else

``decode_command_topic`` decodes a ``ksched.commands`` value into a
:class:`ScheduleCommand` or an :class:`AttemptReport`, told apart by the
schema fingerprint. Schema evolution: ``python -m scheduler.records.compat``.
"""

from __future__ import annotations

from scheduler.records.codec import (
    current_schema,
    decode,
    decode_command_topic,
    decode_fields,
    encode,
    record_type,
    schema_header,
)
from scheduler.records.errors import RecordDecodeError, RecordEncodeError
from scheduler.records.types import (
    TOP_LEVEL,
    AttemptReport,
    CommandResult,
    DlqEntry,
    FinishedAttempt,
    LaneCursor,
    Occurrence,
    OccurrenceEvent,
    QueuedOccurrence,
    Record,
    RetryTimer,
    RunningAttempt,
    Schedule,
    ScheduleCommand,
    ScheduleHistoryEntry,
    ScheduleRuntime,
    ScheduleSpecRecord,
    ShardState,
    VersionRecord,
)

__all__ = [
    "TOP_LEVEL",
    "AttemptReport",
    "CommandResult",
    "DlqEntry",
    "FinishedAttempt",
    "LaneCursor",
    "Occurrence",
    "OccurrenceEvent",
    "QueuedOccurrence",
    "Record",
    "RecordDecodeError",
    "RecordEncodeError",
    "RetryTimer",
    "RunningAttempt",
    "Schedule",
    "ScheduleCommand",
    "ScheduleHistoryEntry",
    "ScheduleRuntime",
    "ScheduleSpecRecord",
    "ShardState",
    "VersionRecord",
    "current_schema",
    "decode",
    "decode_command_topic",
    "decode_fields",
    "encode",
    "record_type",
    "schema_header",
]
