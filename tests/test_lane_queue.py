"""``LaneQueue`` against an independent model: whatever is armed, re-armed (stale copies left in
older buckets), armed into the bucket being drained or taken, ``take`` hands out the live arms
due by ``now`` in ``(available_at, schedule_id)`` order, each once; ``arm_all`` of a list is
``arm`` of each of its entries."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from scheduler.processor.lanes import LaneQueue


@dataclass(eq=False)
class _E:
    schedule_id: str
    armed_at: int | None = None


# Rounds of (groups of (ids, offset from now) armed together, then a take of `limit` at now + step).
# Offsets from -2: a group may land in the bucket being drained (when it sorts after the cursor).
rounds = st.lists(
    st.tuples(
        st.lists(st.tuples(st.lists(st.integers(0, 15), min_size=1, max_size=6), st.integers(-2, 4)),
                 max_size=4),
        st.integers(0, 8),
        st.integers(0, 3),
    ),
    max_size=14,
)


@given(rounds, st.booleans())
def test_take_hands_out_the_live_arms_in_order(
    plan: list[tuple[list[tuple[list[int], int]], int, int]], batched: bool
) -> None:
    q = LaneQueue()
    entries = {i: _E(f"s{i:02d}") for i in range(16)}
    model: dict[str, int] = {}  # schedule id -> the bucket of its live arm
    now = 0
    for groups, limit, step in plan:
        for ids, ahead in groups:
            at = now + ahead
            # The precondition of arm: (at, schedule_id) after the cursor; a batch holds each once.
            ok = [i for i in dict.fromkeys(ids) if (at, entries[i].schedule_id) > q.cursor]
            if batched:
                q.arm_all([entries[i] for i in ok], at)
            else:
                for i in ok:
                    q.arm(entries[i], at)
            model.update({entries[i].schedule_id: at for i in ok})
        now += step
        due = sorted((at, sid) for sid, at in model.items() if at <= now)[:limit]
        for _, sid in due:
            del model[sid]
        assert [e.schedule_id for e in q.take(now, limit)] == [sid for _, sid in due]
        assert {e.schedule_id: e.armed_at for e in entries.values() if e.armed_at is not None} == model
