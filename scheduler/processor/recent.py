"""The request ids a shard applied recently, so that a replayed command changes nothing.

A client that did not see its answer (a timeout, a lost connection) sends the
same command again with the same ``request_id``; the processor answers it as
it answered the first time instead of applying it twice (a second version, a
second pause). Kept in memory for the last ``limit`` accepted requests of the
shard; the last request that changed each schedule also travels on its
``ksched.schedules`` record (``last_request_id``), so a replay across a
failover is recognised too.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

RECENT_REQUESTS = 100_000


class Applied(NamedTuple):
    """What an accepted request did: enough to answer its replay."""

    schedule_id: str
    tenant: str
    kind: str  # "" when restored (the schedule record does not say which kind it was)
    version: int | None


class RecentRequests:
    """A bounded, insertion-ordered map ``request_id -> Applied``."""

    def __init__(self, limit: int = RECENT_REQUESTS) -> None:
        self.limit = limit
        self._done: OrderedDict[str, Applied] = OrderedDict()

    def __len__(self) -> int:
        return len(self._done)

    def get(self, request_id: str) -> Applied | None:
        return self._done.get(request_id)

    def remember(self, request_id: str, applied: Applied) -> None:
        self._done[request_id] = applied
        self._done.move_to_end(request_id)
        if len(self._done) > self.limit:
            self._done.popitem(last=False)
