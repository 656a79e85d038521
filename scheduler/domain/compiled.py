"""Compiled schedules: pure, immutable fire-time calculators (DESIGN §2).

A :class:`CompiledSpec` answers "when does this schedule fire next?" from the
spec alone. All instants are aware UTC ``datetime`` values or integer epoch
seconds; fire times are computed in the local wall-clock of the schedule's IANA
zone from the zone rules (never by adding 24 h in UTC).

The fire set of a cron schedule is the set of UTC instants ``I(L)`` over every
local wall-clock minute ``L`` that matches the expression, where

* ``L`` exists once           → its instant;
* ``L`` is repeated (fall-back) → ``once``: the first instant; ``all``: both;
* ``L`` does not exist (gap)   → ``skip``: nothing; ``shift``: the first valid
  instant after the gap (the transition instant). Several matching minutes in
  one gap give one firing, and a shifted firing that coincides with a regular
  one is one firing: the fire set is a set of instants.

then restricted to ``start <= f <= end`` (both inclusive) and to the first
``max_runs`` members from ``start``.

Bounds of the query helpers: ``next_after(t)`` is strictly after ``t``;
``between(t1, t2)`` is ``t1 < f <= t2`` -- consecutive windows ``(W0, W1]``,
``(W1, W2]`` partition time exactly like the processor's watermark
(``available_at <= W`` has its fate).

``max_runs`` has no hidden counter: the last permitted run is the
``max_runs``-th fire time at or after ``start`` (``start`` is then required),
computed from the spec once and used as an extra end bound.

Sharing: the expensive part (``CronRule``: expression + zone + DST options) is
interned -- identical triples share one object -- and each rule memoises
``next_epoch(s)`` per instant, so re-arming many schedules that share a rule at
the same instant is a dictionary lookup. Memoisation never changes a result.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.domain.bounds import MAX_EPOCH_S, MAX_INSTANT, MIN_INSTANT, NUMERIC, check_instant, check_int
from scheduler.domain.cron import CronExpr, LocalMinute, parse_cron
from scheduler.domain.errors import SpecError
from scheduler.domain.spec import ScheduleSpec

Nonexistent = Literal["skip", "shift"]
Repeated = Literal["once", "all"]

UTC = _dt.UTC
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_ONE_S = _dt.timedelta(seconds=1)
MAX_RUNS_LIMIT = int(NUMERIC["max_runs"].hi)
RULE_CACHE_SIZE = 1 << 18
NEXT_CACHE_SIZE = 4096


def to_epoch(t: _dt.datetime, what: str = "t") -> int:
    """Floor of an aware datetime in epoch seconds (exact, no float rounding)."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{what}: naive datetime {t.isoformat()}; pass an aware UTC datetime")
    return (t - _EPOCH) // _ONE_S


def from_epoch(s: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(seconds=s)


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; :class:`SpecError` if it is not a known zone."""
    if not isinstance(name, str) or not name or name != name.strip() or name.startswith("/"):
        raise SpecError("timezone", name, f"{name!r} is not a known IANA zone")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise SpecError("timezone", name, f"{name!r} is not a known IANA zone") from None
    return zone


_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)


def _ts(zone: ZoneInfo, lm: LocalMinute, fold: int) -> int:
    y, mo, d, h, mi = lm
    return int(_dt.datetime(y, mo, d, h, mi, tzinfo=zone, fold=fold).timestamp())


def _local_naive(zone: ZoneInfo, s: int) -> _dt.datetime:
    return (_EPOCH + _dt.timedelta(seconds=s)).astimezone(zone).replace(tzinfo=None)


def _offset(zone: ZoneInfo, s: int) -> int:
    try:
        off = _dt.datetime.fromtimestamp(s, zone).utcoffset()
    except (OverflowError, OSError, ValueError):  # pragma: no cover - outside datetime range
        off = (_EPOCH + _dt.timedelta(seconds=s)).astimezone(zone).utcoffset()
    assert off is not None
    return off // _ONE_S


def gap_end(zone: ZoneInfo, local: _dt.datetime, lo: int, hi: int) -> int:
    """First instant in (lo, hi] whose local wall-clock time is >= ``local``."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _local_naive(zone, mid) >= local:
            hi = mid
        else:
            lo = mid
    return hi


class CronRule:
    """Expression + zone + DST options: the shared, immutable fire-time engine."""

    __slots__ = ("_memo", "expr", "nonexistent", "repeated", "zone", "zone_name")

    expr: CronExpr
    zone_name: str
    zone: ZoneInfo
    nonexistent: Nonexistent
    repeated: Repeated
    _memo: dict[int, int | None]

    def __init__(
        self, expr: CronExpr, zone_name: str, nonexistent: Nonexistent, repeated: Repeated
    ) -> None:
        self.expr = expr
        self.zone_name = zone_name
        self.zone = load_zone(zone_name)
        self.nonexistent = nonexistent
        self.repeated = repeated
        self._memo = {}

    def __repr__(self) -> str:
        return (
            f"CronRule({self.expr.source!r}, {self.zone_name!r}, "
            f"nonexistent={self.nonexistent!r}, repeated={self.repeated!r})"
        )

    def instants(self, lm: LocalMinute) -> tuple[int, ...]:
        """UTC instants (epoch s, ascending) at which local minute ``lm`` fires."""
        zone = self.zone
        y, mo, d, h, mi = lm
        naive = _dt.datetime(y, mo, d, h, mi)
        # ZoneInfo.utcoffset on a naive datetime reads it as local wall-clock time
        off0 = zone.utcoffset(naive)
        off1 = zone.utcoffset(naive.replace(fold=1))
        assert off0 is not None and off1 is not None
        base = (naive - _EPOCH_NAIVE) // _ONE_S
        u0 = base - off0 // _ONE_S
        if off0 == off1:
            return (u0,)
        u1 = base - off1 // _ONE_S
        if u0 < u1:  # repeated wall-clock time
            return (u0, u1) if self.repeated == "all" else (u0,)
        # nonexistent: fold=0 maps with the pre-gap offset (later), fold=1 earlier
        if self.nonexistent == "skip":
            return ()
        return (gap_end(zone, naive, u1, u0),)

    def next_epoch(self, s: int) -> int | None:
        """First fire instant strictly after epoch second ``s`` (memoised).

        The memo is a bounded dict (cleared when full): it only saves work, it
        never changes an answer.
        """
        memo = self._memo
        try:
            return memo[s]
        except KeyError:
            pass
        f = self._next_uncached(s)
        if len(memo) >= NEXT_CACHE_SIZE:
            memo.clear()
        memo[s] = f
        return f

    def _next_uncached(self, s: int) -> int | None:
        zone = self.zone
        expr = self.expr
        if self.repeated == "all":
            # A fire f > s has local minute L = f + off(f) > s + off(f); near s the
            # smallest offset bounds where L can start (a fall-back right after s
            # re-runs earlier wall-clock minutes, whose second instants count).
            try:
                min_off = min(_offset(zone, s), _offset(zone, s + 86400))
                g = _EPOCH_NAIVE + _dt.timedelta(seconds=s + min_off)
            except OverflowError:  # outside datetime range (CompiledSpec never asks this far)
                return None
        else:
            # Only first instants count, and the first instant is monotone in the
            # wall-clock minute: start at local(s) and walk until one is > s.
            try:
                g = _dt.datetime.fromtimestamp(s, zone)
            except (OverflowError, OSError, ValueError):  # pragma: no cover
                return None
        lm = expr.next_local((g.year, g.month, g.day, g.hour, g.minute))
        best: int | None = None
        while lm is not None:
            try:
                inst = self.instants(lm)
            except (OverflowError, ValueError):  # pragma: no cover - beyond year 9999
                return best
            for u in inst:
                if u > s and (best is None or u < best):
                    best = u
            if inst and inst[0] > s:
                return best
            lm = expr.next_local(lm)
        return best


@lru_cache(maxsize=RULE_CACHE_SIZE)
def cron_rule(expression: str, zone: str, nonexistent: Nonexistent, repeated: Repeated) -> CronRule:
    """The interned rule for (expression, zone, DST options)."""
    return CronRule(parse_cron(expression), zone, nonexistent, repeated)


def parse_at(at: str, zone_name: str) -> int:
    """Epoch second of a one-time local ISO datetime in ``zone_name``.

    Nonexistent local times are rejected; an ambiguous one takes the first
    instant unless the string carries an offset that selects the other one.
    """
    zone = load_zone(zone_name)
    if not isinstance(at, str):
        raise SpecError("at", at, "must be an ISO-8601 local datetime string")
    try:
        parsed = _dt.datetime.fromisoformat(at)
    except ValueError:
        raise SpecError("at", at, f"{at!r} is not an ISO-8601 datetime") from None
    if parsed.microsecond:
        raise SpecError("at", at, f"{at}: sub-second precision is not supported")
    local = parsed.replace(tzinfo=None)
    # A local year inside the instant range keeps the zone arithmetic below from overflowing.
    if not MIN_INSTANT.year <= local.year < MAX_INSTANT.year:
        raise SpecError(
            "at", at,
            f"{at}: year {local.year} is outside the supported range "
            f"{MIN_INSTANT.year}-{MAX_INSTANT.year - 1}",
        )
    first = int(local.replace(tzinfo=zone, fold=0).timestamp())
    second = int(local.replace(tzinfo=zone, fold=1).timestamp())
    if first > second or _local_naive(zone, first) != local:
        raise SpecError("at", at, f"{at} does not exist in {zone_name}")
    if parsed.tzinfo is None:
        return _at_in_range(at, first)
    off = parsed.utcoffset()
    assert off is not None
    wanted = int(parsed.timestamp())
    if wanted in (first, second):
        return _at_in_range(at, wanted)
    raise SpecError(
        "at",
        at,
        f"{at}: offset {_fmt_offset(off)} is not used by {zone_name} at {local.isoformat()}",
    )


def _at_in_range(at: str, epoch_s: int) -> int:
    check_instant("at", from_epoch(epoch_s), at)
    return epoch_s


def _fmt_offset(off: _dt.timedelta) -> str:
    total = off // _ONE_S
    sign = "+" if total >= 0 else "-"
    h, m = divmod(abs(total) // 60, 60)
    return f"{sign}{h:02d}:{m:02d}"


class CompiledSpec:
    """The timing of one schedule spec: pure and immutable.

    Instances are interned by :func:`compile_spec`: specs with identical timing
    fields share one object, and specs sharing (expression, zone, DST options)
    share one :class:`CronRule` (``.rule``).
    """

    __slots__ = ("_last", "at_epoch", "end_epoch", "kind", "max_runs", "rule", "start_epoch",
                 "zone_name")

    kind: Literal["cron", "once"]
    rule: CronRule | None
    at_epoch: int | None
    start_epoch: int | None
    end_epoch: int | None
    max_runs: int | None
    zone_name: str
    _last: int | None  # effective inclusive upper bound (end and max_runs); computed lazily

    def __init__(
        self,
        *,
        kind: Literal["cron", "once"],
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

    def __repr__(self) -> str:
        what = repr(self.rule) if self.rule is not None else f"at={self.at_epoch}"
        return (
            f"CompiledSpec({what}, start={self.start_epoch}, end={self.end_epoch}, "
            f"max_runs={self.max_runs})"
        )

    @property
    def zone(self) -> ZoneInfo:
        return load_zone(self.zone_name)

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

    # -- epoch API (hot path) ----------------------------------------------
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

    def iter_epoch(self, after: int) -> Iterator[int]:
        f = self.next_after_epoch(after)
        while f is not None:
            yield f
            f = self.next_after_epoch(f)

    def fire_times_epoch(self, after: int, count: int) -> list[int]:
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
            return 1 if self.next_after_epoch(f - 1) == f else None
        if self.start_epoch is None:
            raise ValueError("run_index needs a spec with start")
        if self.next_after_epoch(f - 1) != f:
            return None
        return self.count_between_epoch(self.start_epoch - 1, f)

    # -- datetime API -------------------------------------------------------
    def next_after(self, t: _dt.datetime) -> _dt.datetime | None:
        """First fire time strictly after aware ``t`` (aware UTC), or None."""
        f = self.next_after_epoch(to_epoch(t))
        return None if f is None else from_epoch(f)

    def fire_times(self, after: _dt.datetime, count: int) -> list[_dt.datetime]:
        """The next ``count`` fire times strictly after ``after``."""
        return [from_epoch(f) for f in self.fire_times_epoch(to_epoch(after, "after"), count)]

    def between(
        self, t1: _dt.datetime, t2: _dt.datetime, limit: int | None = None
    ) -> list[_dt.datetime]:
        """Fire times f with ``t1 < f <= t2`` (t1 exclusive, t2 inclusive)."""
        # t2 inclusive: f <= t2 <=> f <= floor(t2) for integer f
        return [
            from_epoch(f)
            for f in self.between_epoch(to_epoch(t1, "t1"), to_epoch(t2, "t2"), limit)
        ]

    def count_between(self, t1: _dt.datetime, t2: _dt.datetime) -> int:
        return self.count_between_epoch(to_epoch(t1, "t1"), to_epoch(t2, "t2"))

    def run_index(self, f: _dt.datetime) -> int | None:
        return self.run_index_epoch(to_epoch(f, "f"))


_NO_LIMIT = -(1 << 62)


def _ceil_epoch(t: _dt.datetime) -> int:
    s = to_epoch(t)
    return s if from_epoch(s) == t else s + 1


@lru_cache(maxsize=RULE_CACHE_SIZE)
def _compile(
    kind: str,
    cron: str | None,
    at: str | None,
    timezone: str,
    start: _dt.datetime | None,
    end: _dt.datetime | None,
    max_runs: int | None,
    nonexistent: Nonexistent,
    repeated: Repeated,
) -> CompiledSpec:
    load_zone(timezone)
    if start is not None:
        check_instant("start", start)
    if end is not None:
        check_instant("end", end)
    start_epoch = None if start is None else _ceil_epoch(start)
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
    nonexistent: Nonexistent = "skip",
    repeated: Repeated = "once",
) -> CompiledSpec:
    """Compile just the timing fields (what ``preview`` needs before a spec exists)."""
    if nonexistent not in ("skip", "shift"):
        raise SpecError("nonexistent", nonexistent, f"{nonexistent!r} is not one of 'skip', 'shift'")
    if repeated not in ("once", "all"):
        raise SpecError("repeated", repeated, f"{repeated!r} is not one of 'once', 'all'")
    return _compile(kind, cron, at, timezone, start, end, max_runs, nonexistent, repeated)


def compile_spec(spec: ScheduleSpec) -> CompiledSpec:
    """Compile (and intern) the timing of ``spec``; raises :class:`SpecError`."""
    return _compile(
        spec.kind, spec.cron, spec.at, spec.timezone, spec.start, spec.end, spec.max_runs,
        spec.nonexistent, spec.repeated,
    )


compile = compile_spec  # the name the issue asks for (shadows the builtin here only)


def cache_info() -> dict[str, object]:
    return {"rules": cron_rule.cache_info(), "specs": _compile.cache_info()}


__all__ = [
    "CompiledSpec",
    "CronRule",
    "compile",
    "compile_spec",
    "compile_timing",
    "cron_rule",
    "from_epoch",
    "load_zone",
    "parse_at",
    "to_epoch",
]
