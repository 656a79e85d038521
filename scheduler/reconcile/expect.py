"""Which occurrences a schedule's history says must exist: the reconciler's pure half (no Kafka).

Input: one schedule's accepted changes in the order they were applied (its
``ksched.schedule-history`` records, :class:`Change`). Output: every occurrence of every
version with ``t1 <= scheduled_for < t2`` that the processor had to give a fate
(:class:`Expected`). Only the domain's time rules (:mod:`scheduler.domain`: a compiled
spec is a pure function of time, ``available_at``, the occurrence id) are used — never the
processor's arming code, so a bug there shows as a gap instead of being repeated here.

The rules (DESIGN.md §4 "Commands", docs/reconcile.md):

- a version is *live* over intervals: a CREATE or UPDATE whose resulting state is ACTIVE
  opens one, a RESUME of a PAUSED schedule opens one; a PAUSE of an ACTIVE schedule, the
  next UPDATE, or a CANCEL closes it;
- an interval opened at effective time ``E`` with its lane's cursor ``K`` (the cursor when
  the change was applied: everything at or before it had already been given its fate)
  holds the fire times ``f > E`` with ``(available_at(f), schedule_id) > K``; a one-time
  version's instant opened by a CREATE or UPDATE is due even when it is already past
  (it is then a late occurrence: emitted late or MISSED, never silently dropped);
- an interval closed by a change with cursor ``K'`` holds only the fire times with
  ``(available_at(f), schedule_id) <= K'``: the later ones were never due.

History records written before the cursors were recorded (v1) carry none: the interval
then starts at ``E`` alone and ends at the change's ``applied_at`` (approximate at the
second of a change).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from scheduler.domain import ScheduleSpec, available_at, compile_spec, occurrence_id
from scheduler.domain.compiled import CompiledSpec
from scheduler.vocabulary import CommandKind, Lane, ScheduleKind, ScheduleState

Cursor = tuple[int, str]  # (available_at epoch s, schedule id): a lane's position, as the processor keeps it
DONE = "\U0010ffff"  # a cursor's schedule id meaning "the whole second is done"
NO_CURSOR: Cursor = (-(2**62), "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One accepted change of a schedule, as ``ksched.schedule-history`` records it.

    ``cursors`` maps a lane name (``STRICT``, ``FLEXIBLE``) to its cursor on the schedule's
    shard when the change was applied; None for a record written before they were recorded.
    ``spec`` is set on CREATE and UPDATE.
    """

    schedule_id: str
    tenant: str
    version: int
    command: str
    state: str
    applied_at_s: int
    effective_from_s: int
    spec: ScheduleSpec | None = None
    cursors: Mapping[str, Cursor] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Expected:
    """One occurrence the history says must have a recorded fate."""

    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for: int  # epoch s
    available_at: int  # epoch s


@dataclass(frozen=True, slots=True)
class _Live:
    """A version's live interval (see the module docstring)."""

    version: int
    compiled: CompiledSpec
    window_s: int
    lane: str
    after: int | None  # fire times strictly after this; None: a one-time instant, due whatever its time
    start: Cursor
    end: Cursor | None  # None: still open


def lane_of(spec: ScheduleSpec) -> str:
    """The on-time lane of a spec's occurrences: FLEXIBLE when it has a window."""
    return Lane.FLEXIBLE.name if spec.window_minutes > 0 else Lane.STRICT.name


def _cursor(ch: Change, lane: str, *, end: bool) -> Cursor:
    if ch.cursors is None:  # a v1 record: the change's own time stands in for the cursor
        return (ch.applied_at_s - 1, DONE) if end else NO_CURSOR
    return ch.cursors.get(lane, (0, ""))


def live_intervals(changes: Iterable[Change]) -> list[_Live]:
    """The live intervals of one schedule's changes (in the order they were applied)."""
    out: list[_Live] = []
    spec: ScheduleSpec | None = None
    compiled: CompiledSpec | None = None
    state = ""
    cur: _Live | None = None
    for ch in changes:
        closes = ch.command in (CommandKind.UPDATE, CommandKind.CANCEL) or (
            ch.command == CommandKind.PAUSE and ch.state == ScheduleState.PAUSED
        )
        if cur is not None and closes:
            out.append(_Live(cur.version, cur.compiled, cur.window_s, cur.lane, cur.after, cur.start,
                             _cursor(ch, cur.lane, end=True)))
            cur = None
        opens = False
        if ch.command in (CommandKind.CREATE, CommandKind.UPDATE) and ch.spec is not None:
            spec, compiled = ch.spec, compile_spec(ch.spec)
            opens = ch.state == ScheduleState.ACTIVE
        elif ch.command == CommandKind.RESUME:
            opens = state == ScheduleState.PAUSED and ch.state == ScheduleState.ACTIVE
        if opens and spec is not None and compiled is not None:
            lane = lane_of(spec)
            once = compiled.kind == ScheduleKind.ONCE and ch.command != CommandKind.RESUME
            cur = _Live(ch.version, compiled, int(spec.window_minutes) * 60, lane,
                        None if once else ch.effective_from_s, _cursor(ch, lane, end=False), None)
        state = ch.state
    if cur is not None:
        out.append(cur)
    return out


def expected(schedule_id: str, changes: Iterable[Change], t1: int, t2: int) -> Iterator[Expected]:
    """Every occurrence of ``schedule_id`` due by its ``changes`` with ``t1 <= scheduled_for < t2``,
    in (version, scheduled_for) order of each live interval."""
    for live in live_intervals(changes):
        yield from _occurrences(schedule_id, live, t1, t2)


def _occurrences(sid: str, live: _Live, t1: int, t2: int) -> Iterator[Expected]:
    c = live.compiled
    f = c.next_after_epoch(t1 - 1 if live.after is None else max(t1 - 1, live.after))
    while f is not None and f < t2:
        avail = available_at(c, sid, live.version, f, live.window_s) if live.window_s else f
        if live.end is not None and f > live.end[0]:
            return  # available_at >= f > the end cursor: every later one is past it too
        after_start = live.after is None or (avail, sid) > live.start
        before_end = live.end is None or (avail, sid) <= live.end
        if after_start and before_end:
            yield Expected(occurrence_id=occurrence_id(sid, live.version, f), schedule_id=sid,
                           version=live.version, scheduled_for=f, available_at=avail)
        f = c.next_after_epoch(f)


def max_window_s(specs: Iterable[ScheduleSpec]) -> int:
    """The widest flexible window of ``specs`` (0 when all are strict): how far past a window's
    end an occurrence in it may still be available."""
    return max((int(s.window_minutes) * 60 for s in specs), default=0)
