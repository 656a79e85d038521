"""``MemoryStore``: an in-process idempotency store for unit tests and demos.

Same contract as the SQL stores within one process, with no database: the
effect receives ``None``, so only the *record* is transactional -- an effect
that raises leaves the id unrecorded, but whatever it changed elsewhere stays
changed. Effects run one at a time (a single lock), which also gives the
"concurrent duplicate waits, then sees the first" behaviour. Nothing survives
the process.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from scheduler.idempotency.base import Claim, IdempotencyStore, Outcome

T = TypeVar("T")


class MemoryStore(IdempotencyStore[None]):
    """Idempotency store in a dict; the effect gets ``None``."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._processed: dict[str, dt.datetime] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._processed)} processed)"

    def processed_at(self, occurrence_id: str) -> dt.datetime | None:
        """When ``occurrence_id`` was recorded (UTC), or None."""
        return self._processed.get(occurrence_id)

    @contextmanager
    def _claim(self, occurrence_id: str) -> Iterator[Claim[None]]:
        with self._lock:
            if occurrence_id in self._processed:
                yield Claim(first=False, conn=None)
                return
            yield Claim(first=True, conn=None)
            self._processed[occurrence_id] = dt.datetime.now(dt.UTC)

    def _run_batch(self, items: Sequence[tuple[str, Callable[[None], T]]]) -> list[Outcome[T] | Exception]:
        out: list[Outcome[T] | Exception] = []
        with self._lock:  # once for the batch
            for occurrence_id, effect in items:
                if occurrence_id in self._processed:
                    out.append(Outcome(first=False, value=None))
                    continue
                try:
                    value = effect(None)
                except Exception as exc:
                    out.append(exc)
                    continue
                self._processed[occurrence_id] = dt.datetime.now(dt.UTC)
                out.append(Outcome(first=True, value=value))
        return out

    def _seen(self, occurrence_id: str) -> bool:
        return occurrence_id in self._processed

    def _release(self) -> None:
        pass
