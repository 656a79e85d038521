"""Test readers' decoding of a topic's values into the records they carry."""

from __future__ import annotations

from typing import Any

from scheduler.records import OccurrenceEvent, decode, occurrence_events


def decoded(value: bytes, cls: type) -> list[Any]:
    """``value`` as ``cls`` records: each event of an ``OccurrenceEvents`` record (the processor
    writes a run of events as one) when ``cls`` is :class:`OccurrenceEvent`, else the one record."""
    return list(occurrence_events(value)) if cls is OccurrenceEvent else [decode(value, cls)]
