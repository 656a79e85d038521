"""What the shard's roles hand back to the runtime: a command's outcome and a tick's output.

Both are plain data: the runtime turns them into records inside the tick's
transaction (:mod:`scheduler.processor.checkpoint`, :mod:`scheduler.processor.wire`), so nothing
here touches Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.processor.attempts import Attempt
from scheduler.processor.model import DueOccurrence, Entry, Event
from scheduler.vocabulary import OccurrenceState, RejectCode


@dataclass(slots=True)
class CommandOutcome:
    """What applying one command produced."""

    request_id: str
    tenant: str
    schedule_id: str
    accepted: bool
    version: int | None = None
    code: RejectCode | None = None  # a rejection's code: only the vocabulary's
    reason: str | None = None
    kind: str = ""
    entry: Entry | None = None  # the schedule as it now is (accepted changes only)
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class TickOutput:
    """The decisions of one tick, written in its transaction."""

    dispatch: list[DueOccurrence] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    completed: list[Entry] = field(default_factory=list)  # schedules that reached COMPLETED
    throttled: dict[str, int] = field(default_factory=dict)  # occurrences emitted late by a quota
    throttle_delays: list[tuple[str, int]] = field(default_factory=list)  # (tenant, seconds) of each
    dead: list[Attempt] = field(default_factory=list)  # occurrences declared DEAD (to the DLQ)
    purged: list[Entry] = field(default_factory=list)  # finished schedules past retention: tombstones

    def throttled_by(self, occ: DueOccurrence, delay_s: int, quota: str) -> None:
        """Record that ``occ`` was emitted ``delay_s`` late because of its tenant's ``quota``:
        counted, observed, and an ``ENQUEUED`` event says why (throttled work is delayed, never
        dropped, and never silently)."""
        self.throttled[occ.tenant] = self.throttled.get(occ.tenant, 0) + 1
        self.throttle_delays.append((occ.tenant, delay_s))
        self.events.append(
            Event(
                occ.occurrence_id, occ.schedule_id, occ.tenant, occ.version, occ.scheduled_for,
                OccurrenceState.ENQUEUED, f"throttled: delayed {delay_s}s by the tenant's {quota} quota",
                occ.attempt,
            )
        )
