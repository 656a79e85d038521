"""The history-store contract (DESIGN.md §6): §1's nouns as SQL tables, fed by the indexer.

Tables (``scheduler/history/sql.py`` has the DDL; ``docs/history.md`` the columns):
``occurrences`` (UNIQUE schedule_id, version, scheduled_for_ms), ``attempts``, ``schedules``
(every version, with its effective interval), ``consumer_offsets`` (group_id, topic, partition,
next_offset) and ``history_skipped`` (records skipped, by reason).

Guarantee: :meth:`HistoryStore.apply` writes a batch's rows *and* the offsets after its records
in one database transaction, and the indexer resumes from :meth:`HistoryStore.offsets`, not from
Kafka's committed offsets: a crash anywhere leaves the rows and the offsets of the same prefix of
every partition, so a restart neither loses nor doubles a row. The upserts merge by the rules of
:mod:`scheduler.history.rows` (order-tolerant, idempotent), so even a batch applied twice (a
zombie indexer after a rebalance) changes nothing; offsets never move back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Self

from scheduler.history.mapping import Batch
from scheduler.history.queries import StoreQueries
from scheduler.history.sql import TABLES

#: A partition as the store keys it: (topic, partition).
TopicPartitionKey = tuple[str, int]


class HistoryStoreError(Exception):
    """The store cannot be opened or written; ``str()`` is one line naming the cause and the fix."""


class HistoryConflictError(HistoryStoreError):
    """A batch broke a UNIQUE key: two different occurrence ids for one (schedule, version,
    scheduled_for). Nothing of the batch was written; rebuild it with ``verify_ids=True``."""


class HistoryStore(StoreQueries, ABC):
    """One connection to a history database; single-threaded (the indexer's loop owns it).

    The schema is created on open (idempotently). A store is a context manager that closes itself.
    The read queries (:class:`~scheduler.history.queries.StoreQueries`) are built on ``select``.
    """

    @abstractmethod
    def apply(self, group: str, batch: Batch, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Upsert ``batch``'s rows, add its skip counts and store ``offsets`` (the next offset to
        read of each partition, for consumer group ``group``) in ONE transaction; on any error
        nothing of it is written and the error is raised: :class:`HistoryConflictError` for a
        broken UNIQUE key, else the driver's error."""

    @abstractmethod
    def offsets(self, group: str) -> dict[TopicPartitionKey, int]:
        """The next offset to read of every partition ``group`` has stored."""

    @abstractmethod
    def reset(self) -> None:
        """Empty every table (rows, offsets of every group, skip counts) in one transaction: a rebuild."""

    @abstractmethod
    def rows(self, table: str, order_by: str) -> list[tuple[object, ...]]:
        """Every row of ``table`` (one of :data:`TABLES`) ordered by ``order_by`` (for checks and tests)."""

    @abstractmethod
    def count(self, table: str) -> int:
        """The number of rows of ``table`` (one of :data:`TABLES`)."""

    @abstractmethod
    def scan(self, query: str, params: Sequence[object]) -> Iterator[tuple[object, ...]]:
        """Stream the rows of a read-only ``query`` (``?`` placeholders, both dialects' SQL) in
        batches, in one read transaction; for readers of many rows (the reconciler)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; idempotent."""

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        return {t: self.count(t) for t in TABLES}

    def skipped(self) -> dict[str, int]:
        """Records skipped so far, by reason."""
        return {str(r): int(n) for r, n in self.rows("history_skipped", "reason")}  # type: ignore[call-overload]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def check_table(table: str) -> str:
    """``table`` if it is one of the store's tables, else ValueError naming them."""
    if table not in TABLES:
        raise ValueError(f"table {table!r} is not a history table; use one of {', '.join(TABLES)}")
    return table
