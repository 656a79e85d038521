"""IANA zones and epoch seconds: the conversions the fire-time code is built on.

Instants are integer epoch seconds (UTC) inside the domain; ``datetime`` values
appear only at the edges, always aware. Conversions are exact integer
arithmetic (no float rounding), and local wall-clock times are computed from
the zone rules, never by adding fixed offsets in UTC.
"""

from __future__ import annotations

import datetime as _dt
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.domain.errors import SpecError

UTC = _dt.UTC
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
ONE_S = _dt.timedelta(seconds=1)


def to_epoch(t: _dt.datetime, what: str = "t") -> int:
    """Floor of an aware datetime in epoch seconds; ValueError (naming ``what``) if naive."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{what}: naive datetime {t.isoformat()}; pass an aware UTC datetime")
    return (t - EPOCH) // ONE_S


def ceil_epoch(t: _dt.datetime) -> int:
    """Ceiling of an aware datetime in epoch seconds (a ``start`` bound keeps its fraction out)."""
    s = to_epoch(t)
    return s if from_epoch(s) == t else s + 1


def from_epoch(s: int) -> _dt.datetime:
    """The aware UTC datetime of epoch second ``s``."""
    return EPOCH + _dt.timedelta(seconds=s)


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; :class:`SpecError` if it is not a known zone.

    Paths and padded names are refused before ``ZoneInfo`` sees them: a zone
    name must never reach the file system as anything but a zone key.
    """
    if not isinstance(name, str) or not name or name != name.strip() or name.startswith("/"):
        raise SpecError("timezone", name, f"{name!r} is not a known IANA zone")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise SpecError("timezone", name, f"{name!r} is not a known IANA zone") from None
    return zone


def local_naive(zone: ZoneInfo, s: int) -> _dt.datetime:
    """The local wall-clock time (naive) of epoch second ``s`` in ``zone``."""
    return (EPOCH + _dt.timedelta(seconds=s)).astimezone(zone).replace(tzinfo=None)


def utc_offset_s(zone: ZoneInfo, s: int) -> int:
    """The UTC offset of ``zone`` at epoch second ``s``, in seconds."""
    try:
        off = _dt.datetime.fromtimestamp(s, zone).utcoffset()
    except (OverflowError, OSError, ValueError):  # pragma: no cover - outside datetime range
        off = (EPOCH + _dt.timedelta(seconds=s)).astimezone(zone).utcoffset()
    assert off is not None
    return off // ONE_S


def gap_end(zone: ZoneInfo, local: _dt.datetime, lo: int, hi: int) -> int:
    """First instant in (lo, hi] whose local wall-clock time is >= ``local`` (bisection).

    Used for a nonexistent local time: ``lo``/``hi`` bracket the gap, and the
    answer is the transition instant, the first valid one after it.
    """
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if local_naive(zone, mid) >= local:
            hi = mid
        else:
            lo = mid
    return hi
