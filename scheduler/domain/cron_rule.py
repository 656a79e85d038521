"""The cron rule over a zone: expression + IANA zone + DST options (DESIGN §2).

A :class:`CronRule` maps the local wall-clock minutes matched by a
:class:`~scheduler.domain.cron.CronExpr` to UTC instants. Its fire set is the
set of instants ``I(L)`` over every matching local minute ``L``, where

* ``L`` exists once           -> its instant;
* ``L`` is repeated (fall-back) -> ``once``: the first instant; ``all``: both;
* ``L`` does not exist (gap)   -> ``skip``: nothing; ``shift``: the first valid
  instant after the gap (the transition instant). Several matching minutes in
  one gap give one firing, and a shifted firing that coincides with a regular
  one is one firing: the fire set is a set of instants.

Bounds (start, end, max_runs) are not the rule's business: they belong to
:class:`~scheduler.domain.compiled.CompiledSpec`, so schedules with different
bounds share one rule.

Sharing: rules are interned by :func:`cron_rule` -- identical (expression,
zone, nonexistent, repeated) share one object -- and each rule memoises
``next_epoch(s)`` per instant, so re-arming many schedules that share a rule at
the same instant is a dictionary lookup. Memoisation never changes a result.
"""

from __future__ import annotations

import datetime as _dt
from functools import lru_cache
from typing import TYPE_CHECKING

from scheduler.domain.cron import CronExpr, LocalMinute, parse_cron
from scheduler.domain.zones import EPOCH_NAIVE, ONE_S, gap_end, load_zone, utc_offset_s
from scheduler.vocabulary import Nonexistent, NonexistentSymbol, Repeated, RepeatedSymbol

NonexistentOption = Nonexistent | NonexistentSymbol
RepeatedOption = Repeated | RepeatedSymbol

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo


RULE_CACHE_SIZE = 1 << 18
NEXT_CACHE_SIZE = 4096


class CronRule:
    """Expression + zone + DST options: the shared, immutable fire-time engine."""

    __slots__ = ("_memo", "expr", "nonexistent", "repeated", "zone", "zone_name")

    expr: CronExpr
    zone_name: str
    zone: ZoneInfo
    nonexistent: NonexistentOption
    repeated: RepeatedOption
    _memo: dict[int, int | None]

    def __init__(
        self, expr: CronExpr, zone_name: str, nonexistent: NonexistentOption, repeated: RepeatedOption
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
        base = (naive - EPOCH_NAIVE) // ONE_S
        u0 = base - off0 // ONE_S
        if off0 == off1:
            return (u0,)
        u1 = base - off1 // ONE_S
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
                min_off = min(utc_offset_s(zone, s), utc_offset_s(zone, s + 86400))
                g = EPOCH_NAIVE + _dt.timedelta(seconds=s + min_off)
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
def cron_rule(
    expression: str, zone: str, nonexistent: NonexistentOption, repeated: RepeatedOption
) -> CronRule:
    """The interned rule for (expression, zone, DST options)."""
    return CronRule(parse_cron(expression), zone, nonexistent, repeated)
