"""``LaneQueue.arm_all`` of a list is ``arm`` of each entry: the same entries come out of ``take``, in the
same order, whatever was armed, re-armed (stale copies) or taken before."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from scheduler.processor.lanes import LaneQueue


@dataclass(eq=False)
class _E:
    schedule_id: str
    armed_at: int | None = None


# Rounds of (groups of (ids, offset after now) armed together, then a take of `limit` at now + step).
rounds = st.lists(
    st.tuples(
        st.lists(st.tuples(st.lists(st.integers(0, 15), min_size=1, max_size=6), st.integers(1, 4)),
                 max_size=4),
        st.integers(0, 8),
        st.integers(0, 3),
    ),
    max_size=12,
)


@given(rounds)
def test_arm_all_takes_out_what_arm_does(plan: list[tuple[list[tuple[list[int], int]], int, int]]) -> None:
    one, many = LaneQueue(), LaneQueue()
    e1 = {i: _E(f"s{i:02d}") for i in range(16)}
    e2 = {i: _E(f"s{i:02d}") for i in range(16)}
    now = 0
    for groups, limit, step in plan:
        for ids, ahead in groups:
            at = now + ahead
            ids = list(dict.fromkeys(ids))  # a batch holds each schedule once, as a tick's does
            for i in ids:
                one.arm(e1[i], at)
            many.arm_all([e2[i] for i in ids], at)
        now += step
        taken1 = [e.schedule_id for e in one.take(now, limit)]
        taken2 = [e.schedule_id for e in many.take(now, limit)]
        assert taken1 == taken2
        assert one.cursor == many.cursor
        assert {i: e.armed_at for i, e in e1.items()} == {i: e.armed_at for i, e in e2.items()}
