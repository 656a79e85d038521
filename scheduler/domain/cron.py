"""Our own 5-field cron parser and wall-clock matcher (DESIGN §2).

Grammar, per field (``minute hour day-of-month month day-of-week``)::

    field := item ("," item)*
    item  := "*" | "*/" step | value | value "-" value ["/" step] | value "/" step
    value := number | name            (names only for month JAN-DEC, day-of-week SUN-SAT)

* ``value/step`` means ``value-<field max>/step`` (as in cronie and Kubernetes).
* day-of-week ``0`` and ``7`` are both Sunday.
* Macros: ``@yearly @monthly @weekly @daily @hourly`` -- exactly those.
* The Vixie rule: when *both* day fields are restricted (neither starts with
  ``*``), a day matches if *either* matches; otherwise both must match. As in
  Vixie cron, a field starting with ``*`` (including ``*/2``) counts as
  unrestricted for this rule.
* Rejected with a message naming the field: ``L W # ?``, ``@reboot`` and any
  other macro, 6- or 7-field expressions, out-of-range values, reversed
  ranges, zero or oversized steps, and expressions that can never fire
  (``0 0 30 2 *``).

This module knows nothing about time zones: :meth:`CronExpr.next_local` walks
*local wall-clock* minutes as plain integers. Zone and DST handling live in
:mod:`scheduler.domain.cron_rule`.
"""

from __future__ import annotations

import calendar
import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache

from scheduler.domain.errors import SpecError

FIELD_NAMES: tuple[str, ...] = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS: tuple[tuple[int, int], ...] = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTH_NAMES = {
    name: i
    for i, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1
    )
}
_DOW_NAMES = {
    name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}
MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ALLOWED = frozenset("0123456789*,-/ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # '?' '#' are rejected
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb counted as 29
MAX_YEAR = 9999

LocalMinute = tuple[int, int, int, int, int]
"""(year, month, day, hour, minute) of a local wall-clock minute."""


@lru_cache(maxsize=4096)
def _next_table(values: frozenset[int], size: int) -> tuple[int, ...]:
    """table[i] = smallest v in values with v >= i, or -1 (table has size+1 entries)."""
    out = [-1] * (size + 1)
    nxt = -1
    for i in range(size, -1, -1):
        if i in values:
            nxt = i
        out[i] = nxt
    return tuple(out)


def _parse_value(text: str, index: int) -> int:
    name = FIELD_NAMES[index]
    if text.isdigit():
        return int(text)
    key = text.upper()
    names = _MONTH_NAMES if index == 3 else _DOW_NAMES if index == 4 else None
    if names is not None and key in names:
        return names[key]
    if names is not None and text.isalpha() and len(text) == 3:
        raise SpecError(name, text, f"'{text}' is not a known {name} name")
    if "L" in key or "W" in key:
        raise SpecError(name, text, f"'{text}' is not supported (L and W are not part of cron here)")
    raise SpecError(name, text, f"'{text}' is not a number")


def _check_range(value: int, index: int) -> None:
    lo, hi = _BOUNDS[index]
    if not lo <= value <= hi:
        raise SpecError(FIELD_NAMES[index], value, f"{value} is out of range {lo}-{hi}")


def _parse_step(item: str, text: str, index: int) -> tuple[str, int | None]:
    """Split ``item`` into its body and its ``/step`` (None when it has none)."""
    if "/" not in item:
        return item, None
    body, _, step_text = item.partition("/")
    if not step_text.isdigit():
        raise SpecError(FIELD_NAMES[index], text, f"step '{step_text}' is not a number")
    step = int(step_text)
    lo, hi = _BOUNDS[index]
    width = hi - lo + (0 if index == 4 else 1)  # day-of-week: 0 and 7 are one day
    if not 1 <= step <= width:
        raise SpecError(FIELD_NAMES[index], text, f"step {step} is out of range 1-{width}")
    return body, step


def _parse_item(item: str, text: str, index: int) -> range:
    """The values of one list item of field ``text`` (messages name the whole field)."""
    name = FIELD_NAMES[index]
    lo, hi = _BOUNDS[index]
    if not item:
        raise SpecError(name, text, f"empty list item in '{text}'")
    body, step = _parse_step(item, text, index)
    if body == "*":
        start, stop = lo, hi
    elif "-" in body:
        a_text, _, b_text = body.partition("-")
        if not a_text or not b_text:
            raise SpecError(name, text, f"'{item}' is not a valid range")
        start, stop = _parse_value(a_text, index), _parse_value(b_text, index)
        _check_range(start, index)
        _check_range(stop, index)
        if start > stop:
            raise SpecError(name, text, f"range {a_text}-{b_text} is reversed")
    else:
        start = _parse_value(body, index)
        _check_range(start, index)
        stop = start if step is None else hi  # "value/step" runs to the field's max
    return range(start, stop + 1, step or 1)


@lru_cache(maxsize=4096)
def _parse_field(text: str, index: int) -> frozenset[int]:
    for ch in text.upper():
        if ch not in _ALLOWED:
            raise SpecError(FIELD_NAMES[index], text,
                            f"'{ch}' is not supported (use numbers, names, * , - /)")
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(item, text, index))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True, slots=True, eq=False)
class CronExpr:
    """A parsed 5-field cron expression (immutable; compare by ``source``)."""

    source: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    dom_star: bool
    dow_star: bool
    _nmin: tuple[int, ...]
    _nhour: tuple[int, ...]
    _nday: tuple[int, ...]
    _nmonth: tuple[int, ...]
    _dom_bits: int
    _dow_bits: int
    _days_only: bool  # the day test depends on day-of-month alone

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CronExpr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def day_matches(self, year: int, month: int, day: int) -> bool:
        dom_ok = bool(self._dom_bits >> day & 1)
        dow = (_dt.date(year, month, day).weekday() + 1) % 7
        dow_ok = bool(self._dow_bits >> dow & 1)
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def matches(self, year: int, month: int, day: int, hour: int, minute: int) -> bool:
        """Whether the local wall-clock minute matches every field."""
        return (
            minute in self.minutes
            and hour in self.hours
            and month in self.months
            and self.day_matches(year, month, day)
        )

    def next_local(self, after: LocalMinute) -> LocalMinute | None:
        """The first matching wall-clock minute strictly after ``after``; None past year 9999.

        Hot (every fire-time computation walks here). Overflow needs no branches of
        its own: the next-value tables have one extra entry (minute 60, hour 24,
        month 13) that reads "none left", which carries into the next unit.
        """
        y, mo, d, h, mi = after
        mi += 1
        nmin, nhour, nday, nmonth = self._nmin, self._nhour, self._nday, self._nmonth
        days_only = self._days_only
        while True:
            if y > MAX_YEAR:
                return None
            m2 = nmonth[mo]
            if m2 != mo:
                if m2 == -1:
                    y += 1
                    mo = nmonth[1]
                else:
                    mo = m2
                d, h, mi = 1, 0, 0
                continue
            if d > (calendar.monthrange(y, mo)[1] if mo == 2 else _MAX_DAYS[mo]):
                mo += 1  # 13 carries into the next year above
                d, h, mi = 1, 0, 0
                continue
            if days_only:
                d2 = nday[d]
                if d2 != d:
                    d = 32 if d2 == -1 else d2
                    h, mi = 0, 0
                    continue
            elif not self.day_matches(y, mo, d):
                d += 1
                h, mi = 0, 0
                continue
            h2 = nhour[h]
            if h2 != h:
                if h2 == -1:
                    d += 1
                    h = 0
                else:
                    h = h2
                mi = 0
                continue
            m3 = nmin[mi]
            if m3 == -1:
                h += 1
                mi = 0
                continue
            return (y, mo, d, h, m3)


def _can_fire(days: frozenset[int], months: frozenset[int], or_rule: bool) -> bool:
    if or_rule:  # some weekday is allowed, and every weekday occurs in every month
        return True
    return any(d <= _MAX_DAYS[m] for m in months for d in days)


@lru_cache(maxsize=65536)
def parse_cron(expression: str) -> CronExpr:
    """Parse (and cache) a cron expression; raise :class:`SpecError` naming the field."""
    if not isinstance(expression, str):
        raise SpecError("cron", expression, "must be a string")
    text = " ".join(expression.split())
    if not text:
        raise SpecError("cron", expression, "is empty")
    if text.startswith("@"):
        macro = text.lower()
        if macro not in MACROS:
            known = " ".join(MACROS)
            raise SpecError("cron", expression, f"'{text}' is not supported (use one of {known})")
        text = MACROS[macro]
    parts = text.split(" ")
    if len(parts) != 5:
        raise SpecError(
            "cron",
            expression,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}",
        )
    sets = [_parse_field(part, i) for i, part in enumerate(parts)]
    minutes, hours, days, months, weekdays = sets
    dom_star = parts[2].startswith("*")
    dow_star = parts[4].startswith("*")
    or_rule = not dom_star and not dow_star
    if not _can_fire(days, months, or_rule):
        raise SpecError(
            "cron",
            expression,
            f"'{expression}' can never fire: no day-of-month in {parts[2]} exists in month "
            f"{parts[3]}",
        )
    dom_bits = sum(1 << d for d in days)
    dow_bits = sum(1 << d for d in weekdays)
    return CronExpr(
        source=text,
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        dom_star=dom_star,
        dow_star=dow_star,
        _nmin=_next_table(minutes, 60),  # one past the field's max: the carry entry
        _nhour=_next_table(hours, 24),
        _nday=_next_table(days, 31),
        _nmonth=_next_table(months, 13),
        _dom_bits=dom_bits,
        _dow_bits=dow_bits,
        _days_only=len(weekdays) == 7 and (dom_star or dow_star),
    )
