"""One shard's side of the cluster-wide quotas, for one tick (pure: no Kafka).

At the start of its tick (:meth:`QuotaGate.begin`) a shard measures its demand per
tenant (:func:`shard_demand`) and puts it in the processor's
:class:`~scheduler.processor.shares.ShareTable`; its token buckets then run at
its share of each rate (:meth:`QuotaGate.rate`), once per tick per tenant — never
per occurrence. ``max_running`` is a budget of dispatches for the tick
(:meth:`QuotaGate.room`): the shard's allowance less what it has in flight, taken
down by :meth:`QuotaGate.took` as occurrences are emitted; the allowance is
claimed in the table at once, so the processor's next shard sees it in the same
loop iteration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

from scheduler.processor.attempts import Attempt, Attempts
from scheduler.processor.model import DueOccurrence
from scheduler.processor.quotas import TokenBucket
from scheduler.processor.shares import RETRY, ROTATE_S, Demand, ShareTable, apportion
from scheduler.tenants import Tenant
from scheduler.vocabulary import Lane

_ON_TIME = (Lane.STRICT, Lane.FLEXIBLE)


class _Queue(Protocol):
    def due_count(self, now: int) -> int: ...


class _Tenant(Protocol):
    @property
    def tenant(self) -> str: ...


def shard_demand(
    tenants: Mapping[str, Tenant],
    queues: Mapping[tuple[str, Lane], _Queue],
    catch_up: Mapping[str, Iterable[object]],
    retry_held: Iterable[_Tenant],
    running: Mapping[str, int],
    claims: Mapping[str, int],
    now: int,
) -> dict[str, Demand]:
    """Each tenant's :class:`Demand` on the shard: on-time work due (``queues``), the catch-up
    backlog, retries held back by the budget (``retry_held``: their attempts), in flight
    (``running``) and the slots claimed. Tenants with nothing are left out. On-time work is
    counted only for a tenant with a trigger rate or ``max_running`` (``tenants``): no other
    needs it, and a burst's tenant with no limit costs no count."""
    trigger: dict[str, int] = {}
    for (tenant, lane), q in queues.items():
        quota = tenants.get(tenant)
        if quota is None or not (quota.trigger_rate_per_s or quota.max_running) or lane not in _ON_TIME:
            continue
        if n := q.due_count(now):
            trigger[tenant] = trigger.get(tenant, 0) + n
    late = {t: n for t, cq in catch_up.items() if (n := len(cq))}  # type: ignore[arg-type]
    retry: dict[str, int] = {}
    for a in retry_held:
        retry[a.tenant] = retry.get(a.tenant, 0) + 1
    out: dict[str, Demand] = {}
    for t in trigger.keys() | late.keys() | retry.keys() | running.keys() | claims.keys():
        d = Demand(trigger.get(t, 0), late.get(t, 0), retry.get(t, 0), running.get(t, 0), claims.get(t, 0))
        if any(d):
            out[t] = d
    return out


class QuotaGate:
    """The shard's view of its processor's :class:`ShareTable` for the tick in progress."""

    def __init__(self, shard_id: int, partitions: int) -> None:
        self.shard_id = shard_id
        self.partitions = partitions
        # The processor's table (the runtime hands it over: :meth:`share`). Without one the shard
        # knows no other shard's demand and falls back to an even split: 1/P of each rate and of
        # max_running, an upper bound that is never exceeded.
        self.table: ShareTable | None = None
        self.claims: dict[str, int] = {}  # tenant -> max_running slots held (reported)
        self._left: dict[str, int] = {}  # tenant -> dispatches still allowed this tick
        self._clock = 0.0

    def share(self, table: ShareTable) -> None:
        """Split the quotas by the demand in ``table`` (the processor's, shared by its shards)."""
        self.table = table

    def begin(self, demand: dict[str, Demand], clock: float) -> None:
        """A tick starts: publish the shard's ``demand`` (its entry is live), forget the last
        tick's allowances (recomputed on first use). A claim shrinks to what is in flight until
        the tenant's allowance is recomputed: a tenant with nothing left to emit lets its slots go."""
        self._left.clear()
        self._clock = clock
        if self.table is None:
            return
        self.table.put(self.shard_id, clock, demand)
        for tenant, claim in list(self.claims.items()):
            d = demand.get(tenant)
            running = d.running if d is not None else 0
            if running < claim:
                self._claim(tenant, running)

    def begin_tick(
        self,
        tenants: Mapping[str, Tenant],
        queues: Mapping[tuple[str, Lane], _Queue],
        catch_up: Mapping[str, Iterable[object]],
        attempts: Attempts,
        now: int,
        clock: float,
    ) -> None:
        """:meth:`begin` with the shard's demand measured now (:func:`shard_demand`)."""
        held = [a for oid in attempts.retry_throttled if (a := attempts.inflight.get(oid)) is not None]
        self.begin(shard_demand(tenants, queues, catch_up, held, attempts.running, self.claims, now), clock)

    def bucket(
        self, buckets: dict[str, TokenBucket], tenant: str, rate: float, clock: float, kind: int
    ) -> TokenBucket:
        """The shard's token bucket for ``tenant`` in ``buckets``, at its part of the tenant's
        cluster-wide ``rate`` of ``kind``; it banks at most a second of the part (two for retries;
        at least one token), and keeps its tokens when the part moves. Called once per tenant and
        round of a lane, never per occurrence.

        Why two for retries: retry times are whole seconds, so a throttled retry comes back a
        second (and up to a tick) later; a bank of one second would drop what accrues in that tick
        and the fraction of a token, each wave — measured 12-17 % under the budget with four shards."""
        share = self.rate(tenant, kind, rate)
        burst = max(math.ceil(2 * share) if kind == RETRY else int(share), 1)
        b = buckets.get(tenant)
        if b is None:
            b = buckets[tenant] = TokenBucket(share, burst)
        elif b.rate != share:
            b.set_rate(share, burst, clock)
        return b

    def dispatched(self, attempts: Attempts, dispatch: list[DueOccurrence], start: int) -> None:
        """Track ``dispatch[start:]`` (one capped tenant's, just emitted) until their final
        reports, what ``max_running`` counts, and take them from the tick's room."""
        for occ in dispatch[start:]:
            attempts.dispatched(Attempt(occ.occurrence_id, occ.schedule_id, occ.tenant, occ.version,
                                        occ.scheduled_for, occ.attempt))
        if len(dispatch) > start:
            self.took(dispatch[start].tenant, len(dispatch) - start)

    def rate(self, tenant: str, kind: int, rate: float) -> float:
        """The shard's part of ``tenant``'s cluster-wide ``rate`` of ``kind`` (0: no limit)."""
        if self.table is None:
            return rate / self.partitions
        return self.table.rate(self.shard_id, tenant, kind, rate)

    def room(self, tenant: str, cap: int, running: int) -> int:
        """Dispatches ``tenant`` may still make this tick under ``max_running`` = ``cap`` with
        ``running`` in flight here (``1 << 62`` when ``cap`` is 0: no limit). The first call
        of the tick claims the shard's allowance in the table."""
        if cap <= 0:
            return 1 << 62
        left = self._left.get(tenant)
        if left is None:
            if self.table is None:
                even = apportion(cap, [cap] * self.partitions, int(self._clock) // ROTATE_S)
                allowance = even[self.shard_id]
            else:
                allowance = self.table.slots(self.shard_id, tenant, cap, self._clock)
            claim = max(allowance, running)
            self._claim(tenant, claim)
            left = self._left[tenant] = max(0, allowance - running)
        return left

    def took(self, tenant: str, n: int) -> None:
        """``n`` occurrences of a capped ``tenant`` were dispatched (after :meth:`room`)."""
        if tenant in self._left:
            self._left[tenant] -= n

    def _claim(self, tenant: str, claim: int) -> None:
        """Hold ``claim`` slots from now: in the table at once (the processor's other shards
        read it this loop iteration), in the next report for the other processors."""
        if claim:
            self.claims[tenant] = claim
        else:
            self.claims.pop(tenant, None)
        if self.table is None:
            return
        entry = self.table.entries.get(self.shard_id)
        old = entry[1].get(tenant) if entry is not None else None
        if old is None and not claim:
            return
        d = (old or Demand(0, 0, 0, 0, 0))._replace(claim=claim)
        demand = dict(entry[1]) if entry is not None else {}
        demand[tenant] = d
        self.table.put(self.shard_id, entry[0] if entry is not None else self._clock, demand)
