"""``CompiledSpec``: the timing of one schedule as a pure function of time (DESIGN §2).

:func:`compile_spec` turns a spec's timing fields into a :class:`CompiledSpec`
that answers "when does this schedule fire?" from the spec alone, in integer
epoch seconds (UTC). Each query exists once, in epoch seconds -- the
processor's hot path; callers holding ``datetime`` values convert at their
edge with :func:`scheduler.domain.zones.to_epoch` / ``from_epoch``.

The fire set is the rule's (:mod:`scheduler.domain.cron_rule`: zone and DST
handling) or the one ``at`` instant (:mod:`scheduler.domain.once`), restricted
to ``start <= f <= end`` (both inclusive) and to the first ``max_runs`` members
from ``start``.

Bounds of the queries: ``next_after_epoch(s)`` is strictly after ``s``;
``between_epoch(t1, t2)`` is ``t1 < f <= t2`` -- consecutive windows ``(W0, W1]``,
``(W1, W2]`` partition time exactly like the processor's watermark
(``available_at <= W`` has its fate).

``max_runs`` has no hidden counter: the last permitted run is the
``max_runs``-th fire time at or after ``start`` (``start`` is then required),
computed from the spec once and used as an extra end bound.

Interning: specs with identical timing fields share one ``CompiledSpec``, and
specs sharing (expression, zone, DST options) share one ``CronRule``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from functools import lru_cache
from typing import Protocol

from scheduler.domain.bounds import MAX_EPOCH_S, check_instant, check_int
from scheduler.domain.cron_rule import RULE_CACHE_SIZE, CronRule, cron_rule
from scheduler.domain.errors import SpecError
from scheduler.domain.once import parse_at
from scheduler.domain.zones import ceil_epoch, load_zone, to_epoch
from scheduler.vocabulary import (
    Nonexistent,
    NonexistentSymbol,
    Repeated,
    RepeatedSymbol,
    ScheduleKind,
    ScheduleKindSymbol,
)


class Timing(Protocol):
    """The timing fields of a spec (:class:`scheduler.domain.spec.ScheduleSpec` is one): what
    compiling reads. A protocol, so that the spec, which validates by compiling, and the
    compiler do not import each other."""

    @property
    def kind(self) -> str: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def at(self) -> str | None: ...
    @property
    def timezone(self) -> str: ...
    @property
    def start(self) -> _dt.datetime | None: ...
    @property
    def end(self) -> _dt.datetime | None: ...
    @property
    def max_runs(self) -> int | None: ...
    @property
    def nonexistent(self) -> Nonexistent | NonexistentSymbol: ...
    @property
    def repeated(self) -> Repeated | RepeatedSymbol: ...


class CompiledSpec:
    """The timing of one schedule spec: pure, and immutable but for two memos of its own
    answers (``_last``, ``_fire``), which any thread may fill: each only ever holds a true answer.

    Instances are interned by :func:`compile_spec`: specs with identical timing
    fields share one object, and specs sharing (expression, zone, DST options)
    share one :class:`CronRule` (``.rule``).
    """

    __slots__ = ("_fire", "_last", "at_epoch", "end_epoch", "kind", "max_runs", "rule", "start_epoch",
                 "zone_name")

    kind: ScheduleKind | ScheduleKindSymbol
    rule: CronRule | None
    at_epoch: int | None
    start_epoch: int | None
    end_epoch: int | None
    max_runs: int | None
    zone_name: str
    _last: int | None  # effective inclusive upper bound (end and max_runs); computed lazily
    _fire: int | None  # the last instant is_fire_time confirmed (a memo: a burst's reports name a few)

    def __init__(
        self,
        *,
        kind: ScheduleKind | ScheduleKindSymbol,
        rule: CronRule | None,
        at_epoch: int | None,
        zone_name: str,
        start_epoch: int | None,
        end_epoch: int | None,
        max_runs: int | None,
    ) -> None:
        self.kind = kind
        self.rule = rule
        self.at_epoch = at_epoch
        self.zone_name = zone_name
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.max_runs = max_runs
        self._last = None
        self._fire: int | None = None

    def __repr__(self) -> str:
        what = repr(self.rule) if self.rule is not None else f"at={self.at_epoch}"
        return (
            f"CompiledSpec({what}, start={self.start_epoch}, end={self.end_epoch}, "
            f"max_runs={self.max_runs})"
        )

    # -- bounds -----------------------------------------------------------
    def _upper(self) -> int | None:
        """Inclusive last permitted fire instant (end bound and max_runs), or None."""
        if self.max_runs is None or self.rule is None:
            return self.end_epoch
        if self._last is None:
            self._last = self._compute_last()
        return None if self._last == _NO_LIMIT else self._last

    def _compute_last(self) -> int:
        assert self.rule is not None and self.start_epoch is not None and self.max_runs
        s = self.start_epoch - 1
        end = self.end_epoch
        f: int | None = s
        for _ in range(self.max_runs):
            assert f is not None
            f = self.rule.next_epoch(f)
            if f is None or f >= MAX_EPOCH_S or (end is not None and f > end):
                return _NO_LIMIT if end is None else end
        assert f is not None
        return f if end is None else min(f, end)

    # -- queries (epoch seconds; next_after_epoch is the processor's hot path) --
    def next_after_epoch(self, s: int) -> int | None:
        """First fire instant (epoch s) strictly after epoch second ``s``, or None.

        Never one at or after the end of the instant range (``bounds.MAX_INSTANT``,
        year 9000), so no computation near ``datetime``'s year 9999 can overflow.
        """
        if s >= MAX_EPOCH_S - 1:
            return None
        start = self.start_epoch
        if self.rule is None:
            at = self.at_epoch
            assert at is not None
            if at <= s or (start is not None and at < start):
                return None
            end = self.end_epoch
            return None if end is not None and at > end else at
        if start is not None and s < start - 1:
            s = start - 1
        f = self.rule.next_epoch(s)
        if f is None or f >= MAX_EPOCH_S:
            return None
        upper = self._upper() if (self.max_runs is not None or self.end_epoch is not None) else None
        if upper is not None and f > upper:
            return None
        return f

    def is_fire_time(self, s: int) -> bool:
        """Whether epoch second ``s`` is a fire instant: ``next_after_epoch(s - 1) == s``.

        The processor asks it of every attempt report it adopts, and a burst's hundreds of
        thousands of reports name the few instants their schedules share (specs are interned),
        so the last instant confirmed is remembered: a pure function's memo, not state.
        """
        if s == self._fire:
            return True
        if self.next_after_epoch(s - 1) != s:
            return False
        self._fire = s
        return True

    def iter_epoch(self, after: int) -> Iterator[int]:
        """Every fire instant strictly after ``after``, ascending (lazily; may be endless)."""
        f = self.next_after_epoch(after)
        while f is not None:
            yield f
            f = self.next_after_epoch(f)

    def fire_times_epoch(self, after: int, count: int) -> list[int]:
        """The next ``count`` fire instants strictly after ``after`` (fewer if the spec ends)."""
        out: list[int] = []
        if count <= 0:
            return out
        for f in self.iter_epoch(after):
            out.append(f)
            if len(out) >= count:
                break
        return out

    def between_epoch(self, t1: int, t2: int, limit: int | None = None) -> list[int]:
        """Fire instants f with ``t1 < f <= t2`` (at most ``limit`` of them)."""
        out: list[int] = []
        for f in self.iter_epoch(t1):
            if f > t2 or (limit is not None and len(out) >= limit):
                break
            out.append(f)
        return out

    def count_between_epoch(self, t1: int, t2: int) -> int:
        """How many fire instants f have ``t1 < f <= t2``."""
        n = 0
        for f in self.iter_epoch(t1):
            if f > t2:
                break
            n += 1
        return n

    def run_index_epoch(self, f: int) -> int | None:
        """1-based run number of fire instant ``f`` counted from ``start``; None if not a fire.

        Needs ``start`` for cron schedules (the count has to begin somewhere).
        """
        if self.rule is None:
            return 1 if self.is_fire_time(f) else None
        if self.start_epoch is None:
            raise ValueError("run_index needs a spec with start")
        if not self.is_fire_time(f):
            return None
        return self.count_between_epoch(self.start_epoch - 1, f)


_NO_LIMIT = -(1 << 62)


@lru_cache(maxsize=RULE_CACHE_SIZE)
def _compile(
    kind: str,
    cron: str | None,
    at: str | None,
    timezone: str,
    start: _dt.datetime | None,
    end: _dt.datetime | None,
    max_runs: int | None,
    nonexistent: Nonexistent | NonexistentSymbol,
    repeated: Repeated | RepeatedSymbol,
) -> CompiledSpec:
    load_zone(timezone)
    if start is not None:
        check_instant("start", start)
    if end is not None:
        check_instant("end", end)
    start_epoch = None if start is None else ceil_epoch(start)
    end_epoch = None if end is None else to_epoch(end, "end")
    if start_epoch is not None and end_epoch is not None and end_epoch < start_epoch:
        raise SpecError("end", end, f"end {end.isoformat()} is before start")  # type: ignore[union-attr]
    if kind == "once":
        if at is None:
            raise SpecError("at", at, "is required for a one-time schedule")
        at_epoch = parse_at(at, timezone)
        if (start_epoch is not None and at_epoch < start_epoch) or (
            end_epoch is not None and at_epoch > end_epoch
        ):
            raise SpecError("at", at, f"{at} is outside the start/end bounds")
        return CompiledSpec(
            kind="once", rule=None, at_epoch=at_epoch, zone_name=timezone,
            start_epoch=start_epoch, end_epoch=end_epoch, max_runs=max_runs,
        )
    if kind != "cron":
        raise SpecError("kind", kind, f"{kind!r} is not one of 'cron', 'once'")
    if cron is None:
        raise SpecError("cron", cron, "is required for a cron schedule")
    if max_runs is not None:
        if start_epoch is None:
            raise SpecError("max_runs", max_runs, "requires start (runs are counted from start)")
        check_int("max_runs", max_runs)
    rule = cron_rule(cron, timezone, nonexistent, repeated)
    return CompiledSpec(
        kind="cron", rule=rule, at_epoch=None, zone_name=timezone,
        start_epoch=start_epoch, end_epoch=end_epoch, max_runs=max_runs,
    )


def compile_timing(
    *,
    kind: str,
    timezone: str,
    cron: str | None = None,
    at: str | None = None,
    start: _dt.datetime | None = None,
    end: _dt.datetime | None = None,
    max_runs: int | None = None,
    nonexistent: Nonexistent | NonexistentSymbol = "skip",
    repeated: Repeated | RepeatedSymbol = "once",
) -> CompiledSpec:
    """Compile just the timing fields (what ``preview`` needs before a spec exists)."""
    if nonexistent not in ("skip", "shift"):
        raise SpecError("nonexistent", nonexistent, f"{nonexistent!r} is not one of 'skip', 'shift'")
    if repeated not in ("once", "all"):
        raise SpecError("repeated", repeated, f"{repeated!r} is not one of 'once', 'all'")
    return _compile(kind, cron, at, timezone, start, end, max_runs, nonexistent, repeated)


def compile_spec(spec: Timing) -> CompiledSpec:
    """Compile (and intern) the timing of ``spec``; raises :class:`SpecError`."""
    return _compile(
        spec.kind, spec.cron, spec.at, spec.timezone, spec.start, spec.end, spec.max_runs,
        spec.nonexistent, spec.repeated,
    )


compile = compile_spec  # the name the issue asks for (shadows the builtin here only)


__all__ = ["CompiledSpec", "compile", "compile_spec", "compile_timing"]
