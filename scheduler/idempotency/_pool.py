"""A small blocking connection pool shared by the SQL stores.

Contract: at most ``max_size`` connections exist at once; :meth:`acquire`
hands out an idle one (most recently used first) or opens a new one, and
waits up to ``acquire_timeout_s`` when all are in use, then raises
:class:`~scheduler.idempotency.errors.StoreBusyError`. The caller gives each
connection back with :meth:`release`, saying whether it can be reused (it must
be outside any transaction); a connection that cannot is closed. A connection
is only ever used by one thread at a time. :meth:`close` closes the idle
connections and makes later :meth:`release` calls close theirs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from scheduler.idempotency.errors import StoreBusyError, StoreClosedError

C = TypeVar("C")


class ConnectionPool(Generic[C]):
    """Bounded LIFO pool; ``connect`` and ``disconnect`` run outside the pool's lock.

    Errors of ``disconnect`` are ignored: closing is cleanup.
    """

    def __init__(
        self,
        connect: Callable[[], C],
        disconnect: Callable[[C], None],
        *,
        max_size: int,
        acquire_timeout_s: float,
        owner: str,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"{owner}: max_connections must be >= 1, got {max_size}")
        if acquire_timeout_s <= 0:
            raise ValueError(f"{owner}: acquire_timeout_s must be > 0, got {acquire_timeout_s}")
        self._connect = connect
        self._disconnect = disconnect
        self._max_size = max_size
        self._timeout_s = acquire_timeout_s
        self._owner = owner
        self._cond = threading.Condition()
        self._idle: list[C] = []
        self._size = 0
        self._closed = False

    def acquire(self) -> C:
        """An idle or new connection; raises StoreBusyError after ``acquire_timeout_s``."""
        deadline = time.monotonic() + self._timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise StoreClosedError(f"{self._owner}: the connection pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._size < self._max_size:
                    self._size += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreBusyError(
                        f"{self._owner}: all {self._max_size} connections stayed busy for "
                        f"{self._timeout_s:g} s: raise max_connections (now {self._max_size}) or "
                        "acquire_timeout_s, or run fewer effects at once"
                    )
                self._cond.wait(remaining)
        try:
            return self._connect()
        except BaseException:
            with self._cond:
                self._size -= 1
                self._cond.notify()
            raise

    def release(self, conn: C, *, reuse: bool) -> None:
        """Give ``conn`` back: keep it idle if ``reuse`` and the pool is open, else close it."""
        with self._cond:
            keep = reuse and not self._closed
            if keep:
                self._idle.append(conn)
            else:
                self._size -= 1
            self._cond.notify()
        if not keep:
            self._close_quietly(conn)

    def discard_idle(self) -> None:
        """Close the idle connections (e.g. after one of them turned out dead); the pool stays open."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._size -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            self._close_quietly(conn)

    def close(self) -> None:
        """Close the idle connections; connections in use are closed when released."""
        with self._cond:
            self._closed = True
        self.discard_idle()

    def _close_quietly(self, conn: C) -> None:
        # Closing is cleanup (often in a ``finally``): an error here must not mask the real one.
        with contextlib.suppress(Exception):
            self._disconnect(conn)
