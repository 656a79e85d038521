"""``linger_until``: when a processor's poll goes on taking records before its tick (the rule
against a transaction per poll under a stream of commands), checked against its statement; and
``take_records``, the poll itself, against a consumer whose records arrive on a timetable."""

from __future__ import annotations

import math
import time

from hypothesis import given
from hypothesis import strategies as st

from scheduler.processor.runtime import (
    FIRST_CHUNK,
    LINGER_MIN_RECORDS,
    POLL_BYTES,
    RecordSizes,
    linger_until,
    take_records,
)

_T = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(got=st.integers(min_value=1, max_value=5000), last=_T, linger=st.floats(0, 0.099), deadline=_T)
def test_a_stream_waits_until_linger_after_the_last_batch_never_past_the_deadline(
    got: int, last: float, linger: float, deadline: float
) -> None:
    until = linger_until(got, last, linger, deadline)
    assert until <= deadline  # due occurrences and the next tick are never delayed
    if got < LINGER_MIN_RECORDS:
        assert until == -math.inf  # a command that comes alone is not held
    else:
        assert until == min(deadline, last + linger)


def test_the_cases_by_name() -> None:
    n = LINGER_MIN_RECORDS
    # a stream, the previous batch 10 ms ago: wait 30 ms more for a 40 ms linger
    assert linger_until(n, 100.0, 0.04, 101.0) == 100.04
    # the poll's deadline (work due in 5 ms) comes first
    assert linger_until(n, 100.0, 0.04, 100.005) == 100.005
    # after a quiet spell the time is already past: the caller takes what it has
    assert linger_until(n, 50.0, 0.04, 101.0) == 50.04
    # one client's commands one after another: never held
    assert linger_until(1, 100.0, 0.04, 101.0) == -math.inf
    assert linger_until(n - 1, 100.0, 0.04, 101.0) == -math.inf
    # off
    assert linger_until(n, 100.0, 0.0, 101.0) == 100.0


class _Arrivals:
    """A consumer whose records arrive at given offsets (seconds) after it is made, with
    librdkafka's semantics: ``consume(n, t)`` waits for ``n`` records or ``t``; ``poll(t)`` for one."""

    def __init__(self, at: list[float]) -> None:
        self.t0 = time.monotonic()
        self.at = sorted(at)
        self.taken = 0
        self.sizes: dict[int, int] = {}  # a record's value size (default 100 bytes)

    def _ready(self) -> int:
        now = time.monotonic() - self.t0
        return sum(1 for a in self.at[self.taken:] if a <= now)

    def _take(self, n: int) -> list[_Rec]:
        k = min(n, self._ready())
        out = [_Rec(i, self.sizes.get(i, 100)) for i in range(self.taken, self.taken + k)]
        self.taken += k
        return out

    def consume(self, num_messages: int, timeout: float) -> list[_Rec]:
        end = time.monotonic() + timeout
        while self._ready() < num_messages and time.monotonic() < end:
            time.sleep(0.0005)
        return self._take(num_messages)

    def poll(self, timeout: float) -> _Rec | None:
        got = self.consume(1, timeout)
        return got[0] if got else None


class _Calls:
    """Counts a consumer's ``consume`` calls."""

    def __init__(self, c: _Arrivals) -> None:
        self.c, self.n = c, 0

    def consume(self, num_messages: int, timeout: float) -> list[_Rec]:
        self.n += 1
        return self.c.consume(num_messages, timeout)

    def poll(self, timeout: float) -> _Rec | None:
        return self.c.poll(timeout)


class _Rec:
    """A record: its index, and a value of ``size`` bytes."""

    def __init__(self, i: int, size: int) -> None:
        self.i, self._value = i, b"x" * size

    def value(self) -> bytes:
        return self._value


def _take(c: _Arrivals, timeout: float, last: float, linger: float, batch: int = 5000,
          max_bytes: int = POLL_BYTES, sizes: RecordSizes | None = None) -> tuple[list[int], float, float]:
    t = time.monotonic()
    got, new_last = take_records(c, timeout, last, linger, batch, max_bytes, sizes)  # type: ignore[arg-type]
    return [r.i for r in got], new_last, time.monotonic() - t  # type: ignore[attr-defined]


def test_nothing_arrives_the_poll_waits_its_timeout_and_last_batch_stays() -> None:
    got, last, took = _take(_Arrivals([]), 0.03, 5.0, 0.04)
    assert got == [] and last == 5.0 and 0.025 <= took < 0.1
    got, last, took = _take(_Arrivals([0.0, 0.001]), 0.0, 5.0, 0.04)  # timeout 0: what is there only
    assert got == [0] and last > 5.0 and took < 0.01


def test_a_lone_command_is_not_held_though_the_last_batch_was_just_now() -> None:
    c = _Arrivals([0.0, 0.02])
    got, last, took = _take(c, 0.1, time.monotonic(), 0.04)
    assert got == [0] and took < 0.015 and last >= c.t0


def test_a_stream_is_taken_until_linger_after_the_last_batch() -> None:
    # 20 records now, 10 more at 15 ms, 10 more at 200 ms; the previous batch ended just now
    c = _Arrivals([0.0] * 20 + [0.015] * 10 + [0.2] * 10)
    got, _, took = _take(c, 0.3, time.monotonic(), 0.04)
    assert len(got) == 30 and 0.035 <= took < 0.15  # the 200 ms ones wait for the next poll


def test_the_linger_never_passes_the_polls_deadline() -> None:
    c = _Arrivals([0.0] * 20 + [0.08] * 5)
    got, _, took = _take(c, 0.01, time.monotonic(), 0.1)  # work due in 10 ms, a 100 ms linger
    assert len(got) == 20 and took < 0.06


def test_a_poll_takes_at_most_its_batch() -> None:
    c = _Arrivals([0.0] * 50 + [0.01] * 50)
    got, _, _ = _take(c, 0.1, time.monotonic(), 0.04, batch=60)
    assert len(got) == 60


def test_a_poll_takes_about_its_bytes_of_large_records_and_all_its_count_of_small_ones() -> None:
    """Batched reports (large records) bound a poll by bytes; one report to a record, by count as
    before. Large records after small ones overshoot by one chunk, in that poll only."""
    big = _Arrivals([0.0] * 400)
    big.sizes = {i: 256_000 for i in range(400)}
    sizes = RecordSizes()
    got = _take(big, 0.1, time.monotonic(), 0.0, max_bytes=640_000, sizes=sizes)[0]
    assert got == list(range(8))  # the first chunk: nothing known yet
    for _ in range(3):  # then what fits, a record over at most
        more = _take(big, 0.1, time.monotonic(), 0.0, max_bytes=640_000, sizes=sizes)[0]
        assert more == list(range(got[-1] + 1, got[-1] + 1 + len(more))) and 2 <= len(more) <= 3
        got = more
    small = _Arrivals([0.0] * 6000)
    calls = _Calls(small)
    got = _take(calls, 0.1, time.monotonic(), 0.0, sizes=sizes)[0]  # type: ignore[arg-type]
    assert len(got) == 5000 and calls.n <= 14  # a small first chunk, then doubling: by count again
    mixed = _Arrivals([0.0] * 3000)
    mixed.sizes = {i: 256_000 for i in range(248, 3000)}
    fresh = RecordSizes()
    got = _take(mixed, 0.1, time.monotonic(), 0.0, max_bytes=640_000, sizes=fresh)[0]
    assert len(got) <= 248 + 256  # one chunk over (twice the last) when large follow small
    got = _take(mixed, 0.1, time.monotonic(), 0.0, max_bytes=640_000, sizes=fresh)[0]
    assert len(got) <= 3  # known now


def test_a_poll_ends_when_a_shard_is_assigned_during_it() -> None:
    """``stop`` (the processor's: a shard assigned in a rebalance callback) ends the poll after
    the chunk it came with: the new shard is usually due at once, its records come next poll."""
    calls = _Calls(_Arrivals([0.0] * 100))
    time.sleep(0.002)
    got, _ = take_records(calls, 0.1, -1e9, 0.04, stop=lambda: calls.n >= 1)  # type: ignore[arg-type]
    assert len(got) == FIRST_CHUNK and calls.n == 1
    rest, _ = take_records(calls.c, 0.1, -1e9, 0.04)  # type: ignore[arg-type]
    assert len(rest) == 100 - FIRST_CHUNK  # nothing lost: the next poll takes the rest
