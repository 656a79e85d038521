"""Shared helpers of tests/test_history*.py: the history backends under test.

A :class:`HistoryBackend` is a picklable description (kind + DSN as ``ksched history --dsn``
takes it), so a subprocess indexer can open the same database.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from scheduler.history import HistoryStore, open_store

KINDS: list[object] = ["sqlite"]


@dataclass(frozen=True)
class HistoryBackend:
    kind: Literal["sqlite", "postgres"]
    dsn: str  # sqlite:///ABS/PATH or a PostgreSQL DSN (search_path = the test's schema)

    def store(self) -> HistoryStore:
        return open_store(self.dsn, Path("/nonexistent/unused.db"))


def normalised(store: HistoryStore) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the three nouns' tables, with booleans as ints (SQLite has none)."""
    def norm(row: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(int(v) if isinstance(v, bool) else v for v in row)

    return {
        "occurrences": [norm(r) for r in store.rows("occurrences", "occurrence_id")],
        "attempts": [norm(r) for r in store.rows("attempts", "occurrence_id, attempt_no, token")],
        "schedules": [norm(r) for r in store.rows("schedules", "schedule_id, version")],
    }
