"""The processor's long-lived heap: keep millions of schedule entries out of the cyclic GC's way."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import time
from collections.abc import Iterator

log = logging.getLogger("ksched.processor.heap")
TRIM_EVERY_S = 5.0  # malloc_trim walks every arena: not at every settle of a create storm
# Longest a settle waits for a burst to end, from the first settle it put off: a catch-up that
# fills every tick for minutes still has the entries created meanwhile frozen.
MAX_DEFER_S = 10.0


class Heap:
    """When to ``gc.freeze`` and when to hand freed memory back to the OS."""

    def __init__(self) -> None:
        self.changed = False  # commands (new entries) or a restore since the last freeze
        self._last_freeze = 0.0
        self._last_trim = 0.0
        self._deferred_at: float | None = None  # the first settle put off while shards were behind

    def settle(self, force: bool = False, *, behind: bool = False) -> None:
        """Take the long-lived schedule entries out of the cyclic GC's sight (``gc.freeze``).

        A shard holds up to millions of entries; a burst promotes many short-lived
        objects, and each full collection that follows would traverse every entry
        (~0.3 s per 500,000: pauses measured in the burst's lag plot). Entries are
        freed by reference counting as before; only cycles among frozen objects
        would leak, so the young generations are collected first. At most once a
        second, and only after commands (new entries) or a restore (``force``).

        ``behind``: shards still have dispatches due (a burst's rounds ran out of time). The settle
        then waits, at most ``MAX_DEFER_S`` from the first one it put off: its collection (0.1-0.2 s
        after a burst's reports, docs/performance.md) would come before the burst's last dispatches.
        """
        now = time.monotonic()
        if not (force or (self.changed and now - self._last_freeze >= 1.0)):
            return
        if behind and not force:
            if self._deferred_at is None:
                self._deferred_at = now
            if now - self._deferred_at < MAX_DEFER_S:
                return
        self._deferred_at = None
        gc.collect(1)
        gc.freeze()
        self.changed = False
        self._last_freeze = now
        if force or now - self._last_trim >= TRIM_EVERY_S:
            # Applying commands frees as much as it keeps (decoded commands, encoded outputs,
            # the client's buffers): without a trim RSS per armed schedule stayed twice what
            # the entries hold (docs/decisions.md, issue 14 item 4).
            self.release_free_memory()
            self._last_trim = now
            took = time.monotonic() - now
            if took > 0.05:
                log.info("heap: settling took %.0f ms", took * 1000)

    @contextlib.contextmanager
    def no_collections(self) -> Iterator[None]:
        """A restore pass without the cyclic GC, then :meth:`settle`.

        A restore creates up to millions of entries and keeps every one: each full collection on
        the way traverses all of them again, for nothing (a quarter of restore's CPU, measured
        in docs/decisions.md). Reference counting still frees what a restore drops (an older
        record of a schedule); a restore makes no cycles of its own.
        """
        try:
            with self.quiet():
                yield
        finally:
            self.settle(force=True)

    @staticmethod
    @contextlib.contextmanager
    def quiet() -> Iterator[None]:
        """The ticks of one loop iteration without automatic collections.

        A burst's tick allocates a tuple and two byte strings per occurrence: every 700
        allocations the cyclic GC ran, and its older generations went over every occurrence
        of the tick so far again (a fifth of the processor's samples in a 200,000 burst,
        docs/decisions.md). Nothing a tick makes holds a cycle, and reference counting frees it
        as before; the allocations are counted, so the first allocation after the iteration
        runs one collection of them all.
        """
        was = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()

    @staticmethod
    def release_free_memory() -> None:
        """Hand memory freed by a restore back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

        A restore decodes every record of the shard's compacted topics, including schedules that a
        later tombstone (a purge) drops again; without this the process keeps that peak as RSS.
        """
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
