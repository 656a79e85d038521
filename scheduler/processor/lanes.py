"""A lane queue: the time index of one (tenant, lane) within a shard.

Entries are bucketed by ``available_at`` (epoch seconds). The queue hands out
due entries in the canonical order ``(available_at, schedule_id)`` and keeps a
*cursor* ``(t, schedule_id)``: every entry at or before the cursor has been
given its fate. The cursor is what the processor persists (DESIGN.md §4, the
watermark, refined per tenant and lane so that one tenant's burst can be cut
into many short transactions without a second tenant waiting behind it).

Invariants:
- an entry sits in at most one live bucket, ``entry.armed_at``; copies left in
  other buckets are stale and skipped (lazy deletion);
- :meth:`take` never returns an entry ``<=`` the cursor, so a restored queue
  re-armed from the persisted cursor re-derives exactly what was not yet
  committed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Protocol


class Armable(Protocol):
    schedule_id: str
    armed_at: int | None


Cursor = tuple[int, str]
START: Cursor = (0, "")
DONE = "\U0010ffff"  # sorts after every schedule id: the whole bucket is done


class LaneQueue:
    """Due-time index for one (tenant, lane)."""

    __slots__ = (
        "_buckets", "_heap", "_open", "_open_key", "_open_pos", "_sorted", "cursor", "throttled_by",
        "throttled_from",
    )

    def __init__(self, cursor: Cursor = START) -> None:
        self._buckets: dict[int, list[Armable]] = {}
        self._heap: list[int] = []
        self._sorted: set[int] = set()
        self._open: list[Armable] = []
        self._open_key: int | None = None
        self._open_pos = 0
        self.cursor: Cursor = cursor
        # Since when the tenant's quota has held this lane's due work back (None: it has not);
        # set and cleared by the shard's tick. Lateness is judged at this instant, not later.
        self.throttled_from: int | None = None
        self.throttled_by = "trigger_rate_per_s"  # the quota that did (named in the ENQUEUED event)

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets.values())

    def arm(self, entry: Armable, at: int) -> None:
        """Put ``entry`` in the bucket ``at``; a previous bucket's copy becomes stale.

        Pre: ``(at, entry.schedule_id) > cursor`` — the caller derives ``at`` from the cursor.
        """
        self.arm_all([entry], at)

    def arm_all(self, entries: list[Armable], at: int) -> None:
        """:meth:`arm` of each of ``entries`` at ``at`` (same precondition), in one step: a
        burst re-arms each bucket's schedules at one next time. ``entries`` becomes the
        bucket's when ``at`` has none (the caller gives it up)."""
        for e in entries:
            e.armed_at = at
        bucket = self._buckets.get(at)
        if bucket is None:
            self._buckets[at] = entries
            heapq.heappush(self._heap, at)
        else:
            bucket.extend(entries)
            self._sorted.discard(at)
        if at == self._open_key:
            # Arriving into the bucket being drained: re-open it at the cursor.
            self._open_key = None

    @staticmethod
    def disarm(entry: Armable) -> None:
        entry.armed_at = None

    def next_due(self) -> int | None:
        """The earliest bucket key holding any entry (may hold only stale copies)."""
        while self._heap and self._heap[0] not in self._buckets:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def due_count(self, now: int) -> int:
        """Entries due at ``now`` and not yet handed out (stale copies included: an upper bound).

        O(1) when nothing is due, O(buckets) under a backlog.
        """
        nd = self.next_due()
        if nd is None or nd > now:
            return 0
        total = sum(len(b) for k, b in self._buckets.items() if k <= now)
        if self._open_key is not None and self._open_key <= now:
            total -= self._open_pos
        return max(0, total)

    def counts_until(self, untils: tuple[int, ...]) -> list[int]:
        """For each of ``untils``, entries with ``available_at`` at or before it not yet handed out
        (stale copies included: upper bounds), in one pass over the buckets."""
        totals = [0] * len(untils)
        for k, b in self._buckets.items():
            for i, u in enumerate(untils):
                if k <= u:
                    totals[i] += len(b)
        if self._open_key is not None:
            for i, u in enumerate(untils):
                if self._open_key <= u:
                    totals[i] -= self._open_pos
        return [max(0, t) for t in totals]

    def prepare(self, until: int) -> Iterator[Armable]:
        """Sort every bucket due at or before ``until`` ahead of time; yield its live entries.

        Sorting is done before the due instant so that the moment of firing costs
        only the hand-out (DESIGN.md §4: work ahead of time).
        """
        for key in sorted(k for k in self._buckets if k <= until and k not in self._sorted):
            if key not in self._buckets or key in self._sorted:
                continue  # taken or sorted by take() since this pass began (it spans ticks)
            bucket = self._canonical(key)
            self._buckets[key] = bucket
            self._sorted.add(key)
            yield from bucket

    def _canonical(self, key: int) -> list[Armable]:
        seen: dict[int, Armable] = {}
        for e in self._buckets[key]:
            if e.armed_at == key:
                seen[id(e)] = e
        return sorted(seen.values(), key=lambda e: e.schedule_id)

    def take(self, now: int, limit: int) -> list[Armable]:
        """Hand out up to ``limit`` live entries with ``available_at <= now``, in canonical order.

        Post: the cursor is the last entry handed out, or ``(now, "")``-style
        advance when nothing is due so an idle lane's cursor follows time.
        Each returned entry is disarmed; the caller re-arms it at its next time.
        """
        out: list[Armable] = []
        while len(out) < limit:
            if self._open_key is None:
                key = self.next_due()
                if key is None or key > now:
                    break
                bucket = self._canonical(key) if key not in self._sorted else self._buckets[key]
                self._buckets[key] = bucket
                self._sorted.add(key)
                csid = self.cursor[1] if self.cursor[0] == key else None
                pos = 0
                if csid is not None:
                    while pos < len(bucket) and bucket[pos].schedule_id <= csid:
                        pos += 1
                self._open, self._open_key, self._open_pos = bucket, key, pos
            key = self._open_key
            bucket, pos = self._open, self._open_pos
            room = limit - len(out)
            end = min(len(bucket), pos + room)
            while pos < end:
                e = bucket[pos]
                pos += 1
                if e.armed_at == key:
                    e.armed_at = None
                    out.append(e)
                else:
                    end = min(len(bucket), end + 1)
            self._open_pos = pos
            if out:
                self.cursor = (key, out[-1].schedule_id)
            if pos >= len(bucket):
                del self._buckets[key]
                self._sorted.discard(key)
                self._open_key = None
                self._open = []
                self.cursor = (key, DONE)  # the whole bucket is done
        nd = self.next_due()
        if not out and (nd is None or nd > now) and self.cursor < (now, DONE):
            self.cursor = (now, DONE)
        return out
