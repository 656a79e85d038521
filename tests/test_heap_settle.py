"""The heap's settle waits while a burst goes on, at most ``MAX_DEFER_S`` (unit tests, no Kafka)."""

from __future__ import annotations

import pytest

from scheduler.processor import heap as heap_module
from scheduler.processor.heap import MAX_DEFER_S, Heap


class Clock:
    """The monotonic clock the heap reads, and the instants of its freezes."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.freezes: list[float] = []


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """No real collection, freeze or trim: each freeze is recorded at the clock's instant."""
    c = Clock()
    monkeypatch.setattr(heap_module.time, "monotonic", lambda: c.now)
    monkeypatch.setattr(heap_module.gc, "collect", lambda generation=2: 0)
    monkeypatch.setattr(heap_module.gc, "freeze", lambda: c.freezes.append(c.now))
    monkeypatch.setattr(Heap, "release_free_memory", staticmethod(lambda: None))
    return c


def test_a_settle_waits_while_shards_are_behind_then_runs(clock: Clock) -> None:
    heap = Heap()
    heap.settle(force=True)  # the restore's
    heap.changed = True
    clock.now = 1002.0
    heap.settle(behind=True)  # a burst goes on: no collection before its last dispatches
    assert clock.freezes == [1000.0] and heap.changed
    clock.now = 1003.0
    heap.settle()  # the burst is over
    assert clock.freezes == [1000.0, 1003.0] and not heap.changed


def test_a_settle_waits_at_most_max_defer_s_from_the_first_it_put_off(clock: Clock) -> None:
    heap = Heap()
    heap.settle(force=True)
    clock.now = 1099.0
    heap.settle(behind=True)  # nothing to settle: the wait has not begun
    heap.changed = True
    clock.now = 1100.0  # a burst long after the last settle still puts it off
    heap.settle(behind=True)
    clock.now = 1100.0 + MAX_DEFER_S - 0.5
    heap.settle(behind=True)
    assert clock.freezes == [1000.0]
    clock.now = 1100.0 + MAX_DEFER_S
    heap.settle(behind=True)  # a catch-up that fills every tick still freezes its new entries
    assert clock.freezes == [1000.0, 1100.0 + MAX_DEFER_S]
    heap.changed = True
    clock.now += 2
    heap.settle(behind=True)  # the wait starts again
    assert clock.freezes == [1000.0, 1100.0 + MAX_DEFER_S]


def test_a_forced_settle_never_waits_and_ends_a_wait(clock: Clock) -> None:
    heap = Heap()
    heap.settle(force=True)
    clock.now = 1000.5
    heap.settle(force=True, behind=True)  # a restore's entries are frozen at once
    assert clock.freezes == [1000.0, 1000.5]
    heap.changed = True
    clock.now = 1005.0
    heap.settle(behind=True)  # put off
    clock.now = 1006.0
    heap.settle(force=True, behind=True)  # a restore in the burst ends the wait
    heap.changed = True
    clock.now = 1016.0  # 11 s after the first wait began: a new wait, not the old one
    heap.settle(behind=True)
    assert clock.freezes == [1000.0, 1000.5, 1006.0]
