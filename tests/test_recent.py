"""``LastN``, the shard's bounded memories (finished occurrences, applied requests), against a
plain list of what was remembered: it holds the ``limit`` most recently remembered keys, each
with its last value, and forgets the least recently remembered first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler.processor.recent import LastN


@given(
    limit=st.integers(1, 6),
    ops=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3)), max_size=60),
)
def test_it_keeps_the_limit_most_recently_remembered_keys(limit: int, ops: list[tuple[str, int]]) -> None:
    memory: LastN[int] = LastN(limit)
    order: list[str] = []  # least recently remembered first
    values: dict[str, int] = {}
    for key, value in ops:
        memory.remember(key, value)
        if key in order:
            order.remove(key)
        order.append(key)
        values[key] = value
        kept = order[-limit:]
        assert len(memory) == len(kept)
        for k in "abcdefgh":
            assert memory.get(k) == (values[k] if k in kept else None)
