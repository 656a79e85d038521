"""``BatchWriter``: applies the indexer's batches on one background thread, in order.

The indexer maps batch N+1 (Python, on its own thread) while the database applies batch N (the
driver releases the GIL while the server works), so a rebuild runs at the slower of the two
rates instead of their sum. At most one batch waits while another is applied: memory stays
bounded and the consumer is back-pressured by :meth:`submit`.

Order and exactness are unchanged: batches are applied one at a time in submission order, each
in one transaction with its offsets. A batch refused with
:class:`~scheduler.history.base.HistoryConflictError` is rebuilt by its ``rebuild`` callable
(the same records, every id checked) and applied once more. The first error stops the writer;
the next :meth:`submit` or :meth:`drain` raises it on the caller's thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler.history.base import HistoryConflictError, HistoryStore, TopicPartitionKey
from scheduler.history.mapping import Batch


@dataclass(frozen=True)
class Job:
    batch: Batch
    offsets: Mapping[TopicPartitionKey, int]
    rebuild: Callable[[], Batch]


class BatchWriter:
    """One thread applying :class:`Job`\\ s to ``store`` for ``group``; ``done(job, batch, seconds)``
    runs on that thread after each commit (the batch actually applied, the time it took)."""

    def __init__(self, store: HistoryStore, group: str, done: Callable[[Job, Batch, float], None]) -> None:
        self._store, self._group, self._done = store, group, done
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=1)
        self._idle = threading.Condition()
        self._pending = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="history-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job``; blocks while another one already waits. Raises the writer's error."""
        self._raise()
        with self._idle:
            self._pending += 1
        self._jobs.put(job)

    def drain(self) -> None:
        """Wait until every submitted job is committed; raises the writer's error."""
        with self._idle:
            while self._pending and self._error is None:
                self._idle.wait(0.5)
        self._raise()

    def close(self) -> None:
        """Stop the thread after the queued jobs (call :meth:`drain` first to see their errors)."""
        self._jobs.put(None)
        self._thread.join(60)

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the history writer stopped: {self._error}") from self._error

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if self._error is None:
                try:
                    started = time.monotonic()
                    applied = self._apply(job)
                    self._done(job, applied, time.monotonic() - started)
                except BaseException as exc:  # handed to the indexer's thread by _raise
                    self._error = exc
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _apply(self, job: Job) -> Batch:
        try:
            self._store.apply(self._group, job.batch, job.offsets)
            return job.batch
        except HistoryConflictError:
            checked = job.rebuild()
            self._store.apply(self._group, checked, job.offsets)
            return checked
