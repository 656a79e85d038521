"""Dropping a shard: a fenced producer's flush may fail in every way confluent-kafka has, and the
processor goes on (to rejoin the group); any other drop still raises a flush that is a bug."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduler.processor.ownership import Loss, Ownership


class _NullFlush:
    """flush() as confluent-kafka's of a fenced producer can end: NULL with no exception set."""

    def flush(self, _timeout: float) -> int:
        raise SystemError(
            "<method 'flush' of 'cimpl.Producer' objects> returned NULL without setting an exception"
        )


def _owner(p: int, still_assigned: bool) -> SimpleNamespace:
    owned = SimpleNamespace(shard=SimpleNamespace(close=lambda: None), producer=_NullFlush())
    return SimpleNamespace(owned={p: owned}, metrics=SimpleNamespace(shard_dropped=lambda _p: None),
                           _assigned=lambda _p: still_assigned, _rejoin=False)


def test_a_fenced_shard_is_dropped_and_the_group_rejoined_whatever_its_flush_raises() -> None:
    me = _owner(3, still_assigned=True)
    Ownership.give_up(me, 3, Loss.FENCED)  # type: ignore[arg-type]
    assert me.owned == {} and me._rejoin


def test_a_stopping_shard_still_raises_a_flush_that_is_not_kafka_s() -> None:
    me = _owner(3, still_assigned=False)
    with pytest.raises(SystemError):
        Ownership.give_up(me, 3, Loss.STOPPED)  # type: ignore[arg-type]
