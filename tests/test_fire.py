"""``available_at``, the one definition of jittered time, against an independent oracle.

The oracle never calls the implementation: it finds fire times by walking UTC
minutes and reading the local wall clock with ``zoneinfo`` (``repeated="all"``,
so every physical instant of a matching local minute fires and a spring-forward
gap has none), and computes the occurrence id and the jitter from the hash
definitions written in ``scheduler/domain/ids.py``:

    available_at = f + H(oid) mod min(window, next_fire - f)   (no next fire: window)
"""

from __future__ import annotations

import datetime as dt
from hashlib import blake2b
from typing import cast
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.domain import available_at, occurrence_id
from scheduler.domain.compiled import CompiledSpec, compile_timing
from scheduler.domain.fire import Fire, fire_at

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe")
T0 = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp())


def oracle_oid(sid: str, version: int, f: int) -> str:
    raw = sid.encode()
    data = len(raw).to_bytes(4, "big") + raw + version.to_bytes(8, "big", signed=True) \
        + f.to_bytes(8, "big", signed=True)
    return blake2b(data, digest_size=16, person=b"ksched.occ.v1").hexdigest()


def oracle_jitter(oid: str, w: int) -> int:
    h = blake2b(oid.encode("ascii"), digest_size=8, person=b"ksched.jit.v1").digest()
    return int.from_bytes(h, "big") % w


def oracle_next(minutes: frozenset[int], hours: frozenset[int], zone: str, after: int) -> int:
    """First UTC minute strictly after ``after`` whose local wall clock matches (every day)."""
    z = ZoneInfo(zone)
    u = (after // 60 + 1) * 60
    while True:
        local = dt.datetime.fromtimestamp(u, z)
        if local.minute in minutes and local.hour in hours:
            return u
        u += 60


def render(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


@SETTINGS
@given(
    minutes=st.frozensets(st.integers(0, 59), min_size=1, max_size=4),
    hours=st.frozensets(st.integers(0, 23), min_size=1, max_size=4),
    zone=st.sampled_from(ZONES),
    offset=st.integers(0, 400 * 86400),
    window_min=st.sampled_from([0, 1, 2, 7, 10, 59, 60, 61, 600, 1440]),
    sid=st.text(min_size=1, max_size=12),
    version=st.integers(1, 10**6),
)
def test_fire_available_at_matches_the_oracle(
    minutes: frozenset[int], hours: frozenset[int], zone: str, offset: int, window_min: int,
    sid: str, version: int,
) -> None:
    c = compile_timing(kind="cron", cron=f"{render(minutes)} {render(hours)} * * *", timezone=zone,
                       repeated="all")
    f = oracle_next(minutes, hours, zone, T0 + offset)
    nxt = oracle_next(minutes, hours, zone, f)
    assert c.next_after_epoch(T0 + offset) == f  # the fire set itself agrees
    window_s = window_min * 60
    oid = oracle_oid(sid, version, f)
    want = f if window_s == 0 else f + oracle_jitter(oid, min(window_s, nxt - f))
    got = available_at(c, sid, version, f, window_s)
    assert got == want
    assert fire_at(c, sid, version, f, window_s) == Fire(f, want, oid)
    # what the cap is for: one schedule's occurrences stay in order of available_at
    assert f <= got < nxt <= available_at(c, sid, version, nxt, window_s)


def test_fire_last_and_one_time_fires_are_uncapped() -> None:
    once = compile_timing(kind="once", at="2026-06-01T09:00", timezone="Europe/Berlin")
    at = once.at_epoch
    assert at is not None
    ended = compile_timing(kind="cron", cron="*/5 * * * *", timezone="UTC",
                           end=dt.datetime(2026, 1, 1, 0, 5, tzinfo=dt.UTC))
    last = T0 + 300
    assert ended.next_after_epoch(last) is None
    for c, f in ((once, at), (ended, last)):
        oid = oracle_oid("s", 3, f)
        assert available_at(c, "s", 3, f, 3600) == f + oracle_jitter(oid, 3600)


def test_fire_strict_needs_no_hash_and_no_next_lookup() -> None:
    class NoQueries:
        def next_after_epoch(self, s: int) -> int | None:
            raise AssertionError("a strict occurrence looked up its next fire")

    spec = cast(CompiledSpec, NoQueries())
    # an empty schedule id would fail occurrence_id: strict never hashes
    assert available_at(spec, "", 1, T0, 0) == T0


def test_fire_rejects_a_negative_window() -> None:
    c = compile_timing(kind="cron", cron="0 * * * *", timezone="UTC")
    with pytest.raises(ValueError, match="window_s"):
        available_at(c, "s", 1, T0, -1)
    with pytest.raises(ValueError, match="window_s"):
        fire_at(c, "s", 1, T0, -1)


def test_fire_strict_fire_at_still_names_the_occurrence() -> None:
    c = compile_timing(kind="cron", cron="0 * * * *", timezone="UTC")
    assert fire_at(c, "s", 2, T0, 0) == Fire(T0, T0, occurrence_id("s", 2, T0))
