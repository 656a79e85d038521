"""Which offsets of a dispatch partition may be committed.

Handlers finish out of order (a slow one at offset 10, a fast one at 11), but a
consumer group stores one offset per partition: "everything before this is
done". So the commit point is the *lowest unfinished* offset, or one past the
last consumed offset when nothing is unfinished. Everything at or after the
commit point is redelivered after a crash or rebalance, which DESIGN.md §5
expects (the idempotency store makes it safe); nothing before it ever is.

Offsets are not contiguous (transaction markers of the processor's
transactions occupy offsets), so the commit point is taken from the offsets
actually consumed, never computed as ``finished + 1`` by arithmetic.

Not thread-safe: owned by the worker's consumer thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class PartitionProgress:
    """Consumed and finished offsets of one assigned partition."""

    open: deque[int] = field(default_factory=deque)  # consumed, in order; finished ones pruned from the left
    finished: set[int] = field(default_factory=set)  # finished offsets still in ``open``
    submitted: set[int] = field(default_factory=set)  # handed to a handler, report not yet acknowledged
    last: int | None = None  # highest consumed offset
    committed: int | None = None  # the last commit point this worker committed
    # Which assignment of the partition this is: a job consumed under an earlier assignment
    # (revoked, then assigned back) must not finish an offset of the new one.
    epoch: int = 0

    def consumed(self, offset: int) -> bool:
        """Track ``offset``; False (ignore the record) if it is not past the last consumed one,
        which a partition read in order only does after a seek."""
        if self.last is not None and offset <= self.last:
            return False
        self.open.append(offset)
        self.last = offset
        return True

    def finish(self, offset: int) -> None:
        """Mark ``offset`` done (its final report is delivered, or it was skipped)."""
        if self.open and offset >= self.open[0]:
            self.finished.add(offset)
            while self.open and self.open[0] in self.finished:
                self.finished.discard(self.open.popleft())

    @property
    def unfinished(self) -> int:
        return len(self.open) - len(self.finished)

    def commit_point(self) -> int | None:
        """The offset to commit (next to read), or None before anything was consumed."""
        if self.open:
            return self.open[0]
        return None if self.last is None else self.last + 1

    def to_commit(self) -> int | None:
        """The commit point if it moved past what was committed, else None."""
        point = self.commit_point()
        if point is None or (self.committed is not None and point <= self.committed):
            return None
        return point
