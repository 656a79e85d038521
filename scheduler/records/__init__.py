"""Avro records of ksched (``schemas/*.avsc``) and their single-object codecs.

>>> from scheduler.records import Occurrence, encode, decode
>>> data = encode(occurrence)                 # b"\\xc3\\x01" + fingerprint + Avro body
>>> decode(data, Occurrence) == occurrence    # RecordDecodeError for anything else

``decode_command_topic`` decodes a ``ksched.commands`` value into a
:class:`ScheduleCommand`, an :class:`AttemptReport` or an :class:`AttemptReports`,
told apart by the schema fingerprint; ``report_fields`` gives the reports of
either report record as field dicts, and ``occurrence_events`` the events of an
``OccurrenceEvent`` or ``OccurrenceEvents`` record. The record classes are generated from the schemas
(``python -m scheduler.records.generate``); schema evolution:
``python -m scheduler.records.compat``.

The names below load on first use (PEP 562), not when the package is imported:
the generator and the compatibility check must run while the generated classes
are stale, and the codecs refuse to build from stale classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.records.codec import (
        current_schema,
        decode,
        decode_command_topic,
        decode_fields,
        encode,
        occurrence_events,
        record_type,
        report_fields,
        schema_header,
    )
    from scheduler.records.errors import RecordDecodeError, RecordEncodeError
    from scheduler.records.types import (
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

_CODEC = ("current_schema", "decode", "decode_command_topic", "decode_fields", "encode", "occurrence_events",
          "record_type", "report_fields", "schema_header")
_ERRORS = ("RecordDecodeError", "RecordEncodeError")

__all__ = [
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
    "TenantDemand",
    "TenantRecord",
    "VersionRecord",
    "current_schema",
    "decode",
    "decode_command_topic",
    "decode_fields",
    "encode",
    "occurrence_events",
    "record_type",
    "report_fields",
    "schema_header",
]


def __getattr__(name: str) -> Any:
    """Load an exported name (or a submodule) on first use, then keep it as a module global."""
    if name not in __all__:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = "codec" if name in _CODEC else "errors" if name in _ERRORS else "types"
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
