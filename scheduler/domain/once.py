"""One-time schedules: ``parse_at`` turns a local ISO datetime into one instant (DESIGN §2).

The contract for ``at`` (a wall-clock time in the schedule's zone): a local
time that does not exist there (spring-forward gap) is rejected; an ambiguous
one (fall-back) takes the first instant unless the string carries an offset
that selects the other; an offset the zone does not use at that time is
rejected. The instant must lie in the supported instant range
(:mod:`scheduler.domain.bounds`).
"""

from __future__ import annotations

import datetime as _dt

from scheduler.domain.bounds import MAX_INSTANT, MIN_INSTANT, check_instant
from scheduler.domain.errors import SpecError
from scheduler.domain.zones import ONE_S, from_epoch, load_zone, local_naive


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
    if first > second or local_naive(zone, first) != local:
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
    total = off // ONE_S
    sign = "+" if total >= 0 else "-"
    h, m = divmod(abs(total) // 60, 60)
    return f"{sign}{h:02d}:{m:02d}"
