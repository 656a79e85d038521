"""Deterministic identifiers: occurrence ids, schedule ids and jittered availability."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain import available_at, occurrence_id, schedule_id_for
from scheduler.domain.compiled import compile_timing
from scheduler.domain.ids import jitter_within_s, new_schedule_id

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def test_ids_occurrence_id_pinned_vectors() -> None:
    # pinned: the encoding is a contract (docs in scheduler/domain/ids.py)
    t = dt.datetime(2026, 1, 1, 9, tzinfo=dt.UTC)
    oid = occurrence_id("s1", 1, t)
    assert oid == occurrence_id("s1", 1, int(t.timestamp()))
    assert HEX32.match(oid)
    from hashlib import blake2b

    data = b"\x00\x00\x00\x02s1" + (1).to_bytes(8, "big") + int(t.timestamp()).to_bytes(8, "big")
    assert oid == blake2b(data, digest_size=16, person=b"ksched.occ.v1").hexdigest()


@settings(max_examples=300)
@given(sid=st.text(min_size=1, max_size=300), v=st.integers(1, 2**31 - 1),
       t=st.integers(-(2**62), 2**62))
def test_ids_occurrence_id_of_matches_the_documented_encoding(sid: str, v: int, t: int) -> None:
    """Oracle: the docstring's formula, written out here (any id length: multibyte, long)."""
    from hashlib import blake2b

    from scheduler.domain.ids import occurrence_id_of

    raw = sid.encode("utf-8")
    data = (len(raw).to_bytes(4, "big") + raw + v.to_bytes(8, "big", signed=True)
            + t.to_bytes(8, "big", signed=True))
    expected = blake2b(data, digest_size=16, person=b"ksched.occ.v1").hexdigest()
    assert occurrence_id_of(sid, v, t) == occurrence_id(sid, v, t) == expected


def test_ids_occurrence_id_distinguishes_inputs() -> None:
    ids = {occurrence_id(s, v, t) for s in ("a", "b", "ab") for v in (1, 2) for t in (0, 60)}
    assert len(ids) == 12
    # length prefix: no ambiguity between ("a", ...) and ("a\x00...", ...)
    assert occurrence_id("a", 1, 0) != occurrence_id("a\x00", 1, 0)


def test_ids_occurrence_id_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="aware"):
        occurrence_id("s", 1, dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="whole second"):
        occurrence_id("s", 1, dt.datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=dt.UTC))
    with pytest.raises(ValueError, match="non-empty"):
        occurrence_id("", 1, 0)
    with pytest.raises(TypeError):
        occurrence_id("s", True, 0)
    with pytest.raises(TypeError):
        occurrence_id("s", 1, True)


def test_ids_schedule_id_for_is_deterministic_per_tenant_and_key() -> None:
    a = schedule_id_for("acme", "nightly")
    assert a == schedule_id_for("acme", "nightly") and HEX32.match(a)
    assert a != schedule_id_for("other", "nightly")
    assert schedule_id_for("ab", "c") != schedule_id_for("a", "bc")
    r1, r2 = schedule_id_for("acme", None), new_schedule_id()
    assert r1 != r2 and HEX32.match(r1) and HEX32.match(r2)
    with pytest.raises(ValueError):
        schedule_id_for("", "k")
    with pytest.raises(ValueError):
        schedule_id_for("acme", "")


def test_ids_strict_window_is_nominal() -> None:
    hourly = compile_timing(kind="cron", cron="0 * * * *", timezone="UTC")
    assert available_at(hourly, "x" * 32, 1, 1_800_000_000, 0) == 1_800_000_000
    with pytest.raises(ValueError):
        available_at(hourly, "x", 1, 1_800_000_000, -60)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sid=st.text(min_size=1, max_size=20), v=st.integers(1, 10**6),
       t=st.integers(0, 4_102_444_800), w=st.integers(1, 1440))
def test_ids_jitter_is_in_window(sid: str, v: int, t: int, w: int) -> None:
    oid = occurrence_id(sid, v, t)
    a = t + jitter_within_s(oid, w * 60)  # the hash; the window's cap: tests/test_fire.py
    assert t <= a < t + w * 60
    assert a == t + jitter_within_s(oid, w * 60)


def test_ids_jitter_is_roughly_uniform() -> None:
    w = 10
    buckets = [0] * w
    n = 20_000
    for i in range(n):
        buckets[jitter_within_s(occurrence_id("s", 1, i * 60), w * 60) // 60] += 1
    expected = n / w
    assert all(abs(b - expected) < 0.1 * expected for b in buckets), buckets
