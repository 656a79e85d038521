"""A synthetic schedule population for the capacity simulation (``ksched bench capacity``).

The mix is an assumption, written down so that a reader can change it: what a
multi-tenant scheduler's 20 M schedules plausibly look like. Every share below
is a fraction of *schedules* (not of occurrences); the expected occurrences per
schedule and day is printed by the simulation, and the default mix gives about
10 (the seed's 200 M occurrences for 20 M schedules).

Zones carry weights that roughly follow where internet users live (the largest
zones by population, plus UTC for the many servers that run in UTC). They are
an assumption too, not a measurement; what matters for the curve is that local
midnights and local top-of-hours land at different UTC instants (including the
half-hour and 45-minute offsets of India, Iran and Nepal).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (zone, weight): weights are percentages of schedules.
ZONES: tuple[tuple[str, float], ...] = (
    ("UTC", 14.0),
    ("Asia/Shanghai", 13.0),
    ("Asia/Kolkata", 10.0),
    ("America/New_York", 8.0),
    ("America/Chicago", 3.0),
    ("America/Denver", 1.0),
    ("America/Los_Angeles", 5.0),
    ("America/Sao_Paulo", 4.0),
    ("America/Mexico_City", 2.0),
    ("Europe/London", 4.0),
    ("Europe/Berlin", 5.0),
    ("Europe/Paris", 3.0),
    ("Europe/Moscow", 2.0),
    ("Africa/Lagos", 3.0),
    ("Africa/Cairo", 2.0),
    ("Asia/Tehran", 1.0),
    ("Asia/Karachi", 2.0),
    ("Asia/Dhaka", 2.0),
    ("Asia/Kathmandu", 0.5),
    ("Asia/Jakarta", 4.0),
    ("Asia/Manila", 2.0),
    ("Asia/Tokyo", 4.0),
    ("Asia/Seoul", 2.0),
    ("Australia/Sydney", 1.5),
    ("Pacific/Auckland", 0.5),
)

# (kind name, share of schedules, expression template or "once", share of flexible ones).
# Templates: {m} a random minute, {h} a random hour, {d} a random day of the week, {dom} a random
# day of the month (1-28). Busy hours favour the working day and midnight, as operators do.
MIX: tuple[tuple[str, float, str, float], ...] = (
    ("daily at local midnight", 0.20, "0 0 * * *", 0.3),
    ("daily at a local top of hour", 0.14, "0 {h} * * *", 0.2),
    ("daily at a random minute", 0.16, "{m} {h} * * *", 0.2),
    ("hourly at :00", 0.02, "0 * * * *", 0.0),
    ("hourly at a random minute", 0.03, "{m} * * * *", 0.3),
    ("every 15 minutes", 0.045, "*/15 * * * *", 0.3),
    ("every 5 minutes", 0.012, "*/5 * * * *", 0.5),
    ("weekly at a local top of hour", 0.10, "0 {h} * * {d}", 0.2),
    ("monthly at local midnight", 0.05, "0 0 {dom} * *", 0.2),
    ("one-time within 30 days", 0.233, "once", 0.0),
)
FLEX_WINDOWS_S = (60, 300, 900, 3600)
ONCE_HORIZON_DAYS = 30


@dataclass(frozen=True, slots=True)
class Member:
    """One sampled schedule: its timing fields (as a user would send them) and flexible window."""

    schedule_id: str
    kind: str  # "cron" or "once"
    expr: str | None
    at: str | None  # local wall-clock ISO time (no offset) for a one-time schedule
    zone: str
    window_s: int
    group: str  # the MIX entry it came from


def _hour(rng: random.Random) -> int:
    """Business hours and the small hours (batch jobs) weigh more than the evening."""
    return rng.choices(range(24), weights=[4, 3, 3, 3, 2, 2, 3, 4, 6, 8, 6, 5, 5, 5, 4, 4, 4, 4,
                                           3, 2, 2, 2, 2, 2])[0]


def _expr(template: str, rng: random.Random) -> str:
    return template.format(m=rng.randrange(60), h=_hour(rng), d=rng.randrange(7),
                           dom=1 + rng.randrange(28))


def _once_at(rng: random.Random, day_start: int) -> str:
    """A local wall-clock minute within the horizon; half on a local top of an hour."""
    import datetime as dt

    base = dt.datetime.fromtimestamp(day_start, dt.UTC).replace(tzinfo=None)
    minute = rng.randrange(ONCE_HORIZON_DAYS * 1440)
    if rng.random() < 0.5:
        minute -= minute % 60
    when = base + dt.timedelta(minutes=minute)
    return when.isoformat(timespec="seconds")


def sample(n: int, seed: int, day_start: int) -> list[Member]:
    """``n`` schedules drawn from :data:`MIX` and :data:`ZONES` (deterministic for a seed)."""
    rng = random.Random(seed)
    zones = [z for z, _ in ZONES]
    zone_w = [w for _, w in ZONES]
    groups = [g for g in MIX]
    group_w = [g[1] for g in MIX]
    out: list[Member] = []
    for i in range(n):
        name, _, template, flex_share = rng.choices(groups, weights=group_w)[0]
        zone = rng.choices(zones, weights=zone_w)[0]
        window = rng.choice(FLEX_WINDOWS_S) if rng.random() < flex_share else 0
        sid = f"{rng.getrandbits(128):032x}"
        if template == "once":
            out.append(Member(sid, "once", None, _once_at(rng, day_start), zone, window, name))
        else:
            out.append(Member(sid, "cron", _expr(template, rng), None, zone, window, name))
        del i
    return out
