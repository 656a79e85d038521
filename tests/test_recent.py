"""``LastN``, the shard's bounded memories (finished occurrences, applied requests), against a
plain list of what was remembered: it holds the ``limit`` most recently remembered keys, each
with its last value, and forgets the least recently remembered first."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import native
from scheduler.processor.recent import LastN

RECENT = "scheduler.processor.recent"
PURE, COMPILED = importlib.import_module(RECENT), native.load(RECENT)


def test_the_shard_remembers_in_the_compiled_copy() -> None:
    from scheduler.processor.attempts import Attempts

    assert COMPILED.__name__.endswith("_native"), "run `make install`"
    assert type(Attempts()._finished) is COMPILED.LastN


@pytest.mark.parametrize("module", [PURE, COMPILED], ids=["interpreted", "compiled"])
@given(
    limit=st.integers(1, 6),
    ops=st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 3)), max_size=60),
)
def test_it_keeps_the_limit_most_recently_remembered_keys(
    module: object, limit: int, ops: list[tuple[str, int]]
) -> None:
    memory: LastN[int] = module.LastN(limit)  # type: ignore[attr-defined]
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
