"""Bounded memories of what a shard did recently: :class:`LastN`.

Two uses. The request ids a shard applied, so that a replayed command changes
nothing: a client that did not see its answer (a timeout, a lost connection)
sends the same command again with the same ``request_id``, and the processor
answers it as it answered the first time instead of applying it twice (a second
version, a second pause). The last request that changed each schedule also
travels on its ``ksched.schedules`` record (``last_request_id``), so a replay
across a failover is recognised too. And the occurrences whose attempts
finished, so that a duplicate report of one is dropped
(:class:`scheduler.processor.attempts.Attempts`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

RECENT_REQUESTS = 100_000

V = TypeVar("V")


class Applied(NamedTuple):
    """What an accepted request did: enough to answer its replay."""

    schedule_id: str
    tenant: str
    kind: str  # "" when restored (the schedule record does not say which kind it was)
    version: int | None


class LastN(Generic[V]):
    """A map of the ``limit`` most recently remembered keys; the oldest is forgotten first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._done: OrderedDict[str, V] = OrderedDict()
        # The map's own bound ``get``, not a method wrapping it: a Python call less per lookup
        # (every attempt report's fencing looks its occurrence up here).
        self.get: Callable[[str], V | None] = self._done.get

    def __len__(self) -> int:
        return len(self._done)

    def remember(self, key: str, value: V) -> None:
        done = self._done
        if key in done:  # a new key is stored last already: moving it too cost a quarter more
            done.move_to_end(key)
        done[key] = value
        if len(done) > self.limit:
            done.popitem(last=False)


def recent_requests(limit: int = RECENT_REQUESTS) -> LastN[Applied]:
    """The request ids a shard applied, with what each did."""
    return LastN(limit)
