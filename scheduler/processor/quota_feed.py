"""The Kafka side of the cluster-wide quotas: the owned shards' demand out, every shard's in.

Each tick, a shard puts its demand per tenant into its processor's
:class:`~scheduler.processor.shares.ShareTable` (:mod:`scheduler.processor.quota_gate`).
This module shares the table through the compacted topic ``<namespace>.quota-demand``
(one ``QuotaDemand`` record per shard, key ``shard:<p>``):

- :meth:`QuotaFeed.report` gives an owned shard's entry to write about once a second
  (:data:`REPORT_S`), sooner when the set of tenants with demand changed (a shard
  that gets work is known to the others within a tick or two). The runtime writes it
  in the shard's tick transaction (``Checkpoint.quota_demand``): a fenced owner's
  report never becomes visible, and a report is never ahead of the state it reflects;
- :meth:`QuotaFeed.poll` (never blocks, ``read_committed``) puts the other shards'
  reports in the table, aged by when this processor read them (a report already older
  than ``STALE_S`` by its own time is skipped: a processor that starts does not take a
  dead owner's last words for fresh ones), and drops entries not refreshed for ``STALE_S``.
"""

from __future__ import annotations

import logging
from collections.abc import Container

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from scheduler.kafka.clients import consumer
from scheduler.kafka.reader import all_partitions
from scheduler.principals import as_processor
from scheduler.processor.shard import Shard
from scheduler.processor.shares import Demand, ShareTable
from scheduler.records import QuotaDemand, RecordDecodeError, TenantDemand, decode, encode
from scheduler.settings import Settings
from scheduler.topology import topic_name

log = logging.getLogger("ksched.processor.quotas")
REPORT_S = 1.0  # an owned shard's demand is written at least this often


class DemandTopicMissing(LookupError):
    """The quota-demand topic does not exist; the message names it and the fix."""


def demand_key(shard: int) -> bytes:
    return f"shard:{shard}".encode()


def encode_demand(shard: int, owner: str, clock: float, demand: dict[str, Demand]) -> bytes:
    tenants = tuple(
        TenantDemand(tenant=t, trigger=d.trigger, catch_up=d.catch_up, retry=d.retry, running=d.running,
                     claim=d.claim)
        for t, d in sorted(demand.items())
    )
    return encode(QuotaDemand(shard=shard, owner=owner, at_ms=int(clock * 1000), tenants=tenants))


def decode_demand(value: bytes) -> tuple[int, float, dict[str, Demand]]:
    """``(shard, written at, demand per tenant)`` of a record; raises ``RecordDecodeError``."""
    rec = decode(value, QuotaDemand)
    return rec.shard, rec.at_ms / 1000, {
        t.tenant: Demand(t.trigger, t.catch_up, t.retry, t.running, t.claim) for t in rec.tenants
    }


class QuotaFeed:
    """The processor's :attr:`table`, fed from ``<namespace>.quota-demand``; one thread (the loop's)."""

    def __init__(self, settings: Settings, owner: str) -> None:
        self.settings = settings
        self.owner = owner
        self.topic = topic_name(settings, "quota-demand")
        self.table = ShareTable(settings.partitions)
        self._consumer: Consumer | None = None
        self._sent: dict[int, tuple[float, frozenset[str]]] = {}  # shard -> (last report, its tenants)

    def start(self) -> QuotaFeed:
        """Follow the topic from its start (compacted: one record per shard). Raises
        :class:`DemandTopicMissing` naming the fix when it does not exist: reports would fail
        every tick's transaction."""
        # As the processor's principal (it reads and writes the topic); its credentials are looked
        # up here, not when the processor is built (a processor driven by hand never starts this).
        c = consumer(as_processor(self.settings), None, **{
            "client.id": f"ksched-quota-demand-{self.owner}", "fetch.wait.max.ms": 100,
        })
        try:
            tps = all_partitions(c, self.topic)
        except LookupError as exc:
            c.close()
            raise DemandTopicMissing(f"cluster-wide quotas: {exc}") from None
        c.assign([TopicPartition(self.topic, tp.partition, OFFSET_BEGINNING) for tp in tps])
        self._consumer = c
        return self

    def attach(self, shard: Shard) -> None:
        """Let ``shard`` (owned) split its quotas by this processor's table."""
        if shard.gate.table is not self.table:
            shard.gate.share(self.table)

    def poll(self, owned: Container[int], clock: float, limit: int = 1000) -> int:
        """Apply the reports that arrived (never waits), except of the shards in ``owned`` (their
        entries are live here); drop stale entries. Returns the reports applied."""
        n = 0
        if self._consumer is not None:
            for m in self._consumer.consume(num_messages=limit, timeout=0):
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("quota demand topic %s: %s", self.topic, err)
                    continue
                value = m.value()
                if value is None:
                    continue
                try:
                    shard, at, demand = decode_demand(value)
                except RecordDecodeError as exc:
                    log.warning("quota demand record %r skipped: %s", m.key(), exc)
                    continue
                fresh = clock - at <= self.table.stale_s
                if fresh and shard not in owned and 0 <= shard < self.table.partitions:
                    self.table.put(shard, clock, demand)
                    n += 1
        self.table.drop_stale(clock, owned)
        return n

    def report(self, shard: int, clock: float) -> bytes | None:
        """The owned ``shard``'s entry to write now, or None (reported less than ``REPORT_S``
        ago and the same tenants have demand)."""
        entry = self.table.entries.get(shard)
        demand = dict(entry[1]) if entry is not None else {}
        tenants = frozenset(demand)
        last = self._sent.get(shard)
        if last is not None and clock - last[0] < REPORT_S and last[1] == tenants:
            return None
        self._sent[shard] = (clock, tenants)
        return encode_demand(shard, self.owner, clock, demand)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
