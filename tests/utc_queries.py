"""The ``CompiledSpec`` queries over aware ``datetime`` values, for tests that read better in UTC.

``CompiledSpec`` answers in epoch seconds only; these adapters convert at the
edge exactly as its former datetime twins did: an instant is floored to whole
seconds (fire instants are whole seconds, so ``f <= t`` iff ``f <= floor(t)``),
a naive datetime is a ValueError, and results are aware UTC datetimes.
"""

from __future__ import annotations

import datetime as dt

from scheduler.domain.compiled import CompiledSpec
from scheduler.domain.zones import from_epoch, to_epoch


def next_after(c: CompiledSpec, t: dt.datetime) -> dt.datetime | None:
    """First fire time strictly after ``t``, or None."""
    f = c.next_after_epoch(to_epoch(t))
    return None if f is None else from_epoch(f)


def fire_times(c: CompiledSpec, after: dt.datetime, count: int) -> list[dt.datetime]:
    """The next ``count`` fire times strictly after ``after``."""
    return [from_epoch(f) for f in c.fire_times_epoch(to_epoch(after, "after"), count)]


def between(
    c: CompiledSpec, t1: dt.datetime, t2: dt.datetime, limit: int | None = None
) -> list[dt.datetime]:
    """Fire times f with ``t1 < f <= t2``."""
    return [from_epoch(f) for f in c.between_epoch(to_epoch(t1, "t1"), to_epoch(t2, "t2"), limit)]


def count_between(c: CompiledSpec, t1: dt.datetime, t2: dt.datetime) -> int:
    return c.count_between_epoch(to_epoch(t1, "t1"), to_epoch(t2, "t2"))


def run_index(c: CompiledSpec, f: dt.datetime) -> int | None:
    return c.run_index_epoch(to_epoch(f, "f"))
