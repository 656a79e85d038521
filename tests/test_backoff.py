"""Exponential backoff with deterministic full jitter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain import retry_delay_s
from scheduler.domain.backoff import backoff_ceiling_s


def test_backoff_ceiling() -> None:
    assert [backoff_ceiling_s(a, 1.0, 300.0) for a in (1, 2, 3, 9, 10)] == [1, 2, 4, 256, 300]
    assert backoff_ceiling_s(10_000, 1.0, 300.0) == 300.0
    with pytest.raises(ValueError):
        backoff_ceiling_s(0, 1.0, 300.0)
    with pytest.raises(ValueError):
        backoff_ceiling_s(1, 0.0, 300.0)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(oid=st.text(min_size=1, max_size=32), attempt=st.integers(1, 5000),
       base=st.floats(0.01, 100), cap=st.floats(0.01, 10_000))
def test_backoff_in_range_and_deterministic(oid: str, attempt: int, base: float, cap: float) -> None:
    d = retry_delay_s(oid, attempt, base, cap)
    assert 0 <= d <= min(cap, base * 2.0 ** min(attempt - 1, 1023))
    assert d == retry_delay_s(oid, attempt, base, cap)


def test_backoff_spreads_over_occurrences_and_attempts() -> None:
    ds = [retry_delay_s(f"occ{i}", 5, 1.0, 300.0) for i in range(2000)]
    assert 7.0 < sum(ds) / len(ds) < 9.0  # mean of U[0, 16)
    assert len({retry_delay_s("occ", a, 1.0, 1e9) / 2 ** (a - 1) for a in range(1, 20)}) == 19
