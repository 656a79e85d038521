"""Cluster-wide quotas split over the shards by demand (pure: no Kafka, the clock passed in).

DESIGN.md §8: a tenant's ``trigger_rate_per_s``, ``catch_up_rate_per_s``,
``retry_budget_per_min`` and ``max_running`` are promises for the whole cluster.
Every shard's owner knows the tenant's *demand* on its own shard (:class:`Demand`:
the due work it holds back, per lane kind, and what it has in flight) and learns
the other shards' through Kafka (:mod:`scheduler.processor.quota_feed`), into one
:class:`ShareTable` per processor. From the table:

- a **rate** is split in proportion to demand, with a floor of :data:`FLOOR`
  pseudo-occurrences per shard: shard *i* gets ``rate × (d_i + FLOOR) / (D + P × FLOOR)``
  (:func:`rate_share`). Over one view of the table the shares sum to the rate
  exactly; an idle shard still has a trickle, and a shard that gets work counts
  its own demand at once (its entry is live, the others' are about a second old);
- **max_running** is apportioned in whole slots by largest remainder over the
  shards' wants (in flight + waiting), ties rotating every :data:`ROTATE_S` so a cap
  smaller than the busy shards starves none (:func:`apportion`); a shard takes no
  more than the cap less the slots the others *claim* (:meth:`ShareTable.slots`),
  so a shift of the split frees slots before it reuses them.

An entry not refreshed for :data:`STALE_S` (its owner is gone and nobody took the
shard yet) is dropped: its demand and claim count as zero.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence
from typing import NamedTuple

TRIGGER, CATCH_UP, RETRY = 0, 1, 2  # the rate kinds: indexes into Demand
FLOOR = 1.0  # pseudo-demand of every shard: an idle shard keeps a trickle, and D = 0 splits evenly
STALE_S = 15.0  # an entry older than this (15 missed reports) no longer counts
ROTATE_S = 5  # max_running's tie-break order turns this often


class Demand(NamedTuple):
    """One tenant's demand on one shard."""

    trigger: int  # on-time (strict, flexible) occurrences due and not yet emitted
    catch_up: int  # late occurrences waiting on the catch-up lane
    retry: int  # due retries held back by the retry budget
    running: int  # dispatched, not finished (what max_running counts)
    claim: int  # max_running slots this shard holds (at least ``running``)

    @property
    def want(self) -> int:
        """Slots the shard could use: in flight plus waiting."""
        return self.running + self.trigger + self.catch_up + self.retry


_FIELDS = 5  # len(Demand._fields): the totals' width


def rate_share(rate: float, mine: float, total: float, partitions: int) -> float:
    """Shard's part of a cluster-wide ``rate`` given its demand ``mine`` of the tenant's ``total``
    (``mine`` included): ``rate × (mine + FLOOR) / (total + partitions × FLOOR)``.

    Over the ``partitions`` shards of one view the parts sum to ``rate``; ``total = 0`` splits
    evenly. A rate of 0 (no limit) stays 0.
    """
    if rate <= 0:
        return 0.0
    return rate * (max(mine, 0.0) + FLOOR) / (max(total, 0.0) + partitions * FLOOR)


def apportion(cap: int, wants: Sequence[int], offset: int = 0) -> list[int]:
    """``cap`` whole slots over shards by ``wants``: largest remainder, never more than a shard
    wants, ties broken in the order starting at shard ``offset % len(wants)``.

    Post: ``sum(out) == min(cap, sum(wants))`` and ``0 <= out[i] <= wants[i]``.
    """
    n = len(wants)
    total = sum(w for w in wants if w > 0)
    if cap <= 0 or total <= 0:
        return [0] * n
    if total <= cap:
        return [max(w, 0) for w in wants]
    exact = [cap * max(w, 0) / total for w in wants]
    out = [math.floor(x) for x in exact]
    left = cap - sum(out)
    order = sorted(range(n), key=lambda i: (-(exact[i] - out[i]), (i - offset) % n))
    for i in order[:left]:
        out[i] += 1
    return out


class ShareTable:
    """Every shard's last :class:`Demand` per tenant, and the running totals per tenant.

    The shards a processor owns put their entry every tick (:meth:`put`, live); the others'
    come from their owners' reports. One view per tick: what a shard reads between two puts
    is consistent over its processor's shards.
    """

    def __init__(self, partitions: int, stale_s: float = STALE_S) -> None:
        self.partitions = partitions
        self.stale_s = stale_s
        self.entries: dict[int, tuple[float, Mapping[str, Demand]]] = {}  # shard -> (seen at, demand)
        self._totals: dict[str, list[int]] = {}  # tenant -> sums over shards of Demand's fields

    def put(self, shard: int, at: float, demand: Mapping[str, Demand]) -> None:
        """Replace ``shard``'s entry with ``demand`` (tenants absent: zero), seen at ``at``."""
        old = self.entries.get(shard)
        if old is not None:
            self._add(old[1], -1)
        self.entries[shard] = (at, demand)
        self._add(demand, 1)

    def drop_stale(self, now: float, keep: Container[int] = ()) -> list[int]:
        """Drop the entries older than ``stale_s`` except ``keep``'s; returns their shards."""
        gone = [s for s, (at, _) in self.entries.items() if now - at > self.stale_s and s not in keep]
        for s in gone:
            self._add(self.entries.pop(s)[1], -1)
        return gone

    def _add(self, demand: Mapping[str, Demand], sign: int) -> None:
        totals = self._totals
        for tenant, d in demand.items():
            t = totals.get(tenant)
            if t is None:
                t = totals[tenant] = [0] * _FIELDS
            for i in range(_FIELDS):
                t[i] += sign * d[i]
            if sign < 0 and not any(t):
                del totals[tenant]

    def demand(self, shard: int, tenant: str) -> Demand | None:
        entry = self.entries.get(shard)
        return entry[1].get(tenant) if entry is not None else None

    def rate(self, shard: int, tenant: str, kind: int, rate: float) -> float:
        """``shard``'s part of ``tenant``'s cluster-wide ``rate`` of ``kind`` (:func:`rate_share`)."""
        if rate <= 0:
            return 0.0
        mine = self.demand(shard, tenant)
        total = self._totals.get(tenant)
        return rate_share(rate, mine[kind] if mine else 0, total[kind] if total else 0, self.partitions)

    def slots(self, shard: int, tenant: str, cap: int, now: float) -> int:
        """``shard``'s allowance of ``tenant``'s ``max_running`` (0: no limit is the caller's case):
        its apportioned part of ``cap`` by the shards' wants, never more than ``cap`` less what
        the other shards claim. The shard's new claim is ``max(allowance, its running)``."""
        wants = [0] * self.partitions
        claims = 0
        for s, (_, demand) in self.entries.items():
            d = demand.get(tenant)
            if d is not None and 0 <= s < self.partitions:
                wants[s] = d.want
                if s != shard:
                    claims += d.claim
        target = apportion(cap, wants, int(now) // ROTATE_S)[shard] if 0 <= shard < self.partitions else 0
        return max(0, min(target, cap - claims))
