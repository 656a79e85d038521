"""Fill a :class:`~scheduler.status.model.StatusView` from Kafka alone, as the admin principal.

What it asks, and of whom (no private side channel):

1. the cluster's metadata: the brokers, and how many shards ``<ns>.shards`` has;
2. the processors' consumer group ``<ns>.processor``: its members and the ``<ns>.shards``
   partitions assigned to each (that assignment *is* shard ownership);
3. ``<ns>.state`` read to its end: each shard's last ``ShardState`` (watermark, last tick);
4. the tenant registry; the end offsets of every tenant's dispatch and DLQ partitions (one
   ``list_offsets`` per end), then per tenant its worker group's committed offsets and members;
5. the namespace's processors' own /metrics, found in the discovery folder
   (:mod:`scheduler.status.scrape`): due backlog and restores per shard, figures per tenant;
6. Prometheus (setting ``prometheus_url``), when it answers: each tenant's strict lag p99 over
   the last 5 minutes, the window the verdict needs (the processes' counters have none).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import consumer
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.principals import as_admin
from scheduler.records import ShardState, decode
from scheduler.settings import Settings
from scheduler.status.model import ProcessorView, ShardView, StatusView, TenantView
from scheduler.status.scrape import scrape, windowed_lag_p99
from scheduler.tenant_registry import read_registry
from scheduler.topology import topic_name

_TIMEOUT_S = 15.0


def collect(settings: Settings) -> StatusView:
    """The cluster now (module docstring, steps 1-4); KafkaException when the broker cannot answer."""
    conn = as_admin(settings)
    admin = admin_client(conn)
    md = admin.list_topics(timeout=_TIMEOUT_S)  # 1
    brokers = tuple(sorted(f"{b.host}:{b.port} (node {b.id})" for b in md.brokers.values()))
    shards_meta = md.topics.get(topic_name(settings, "shards"))
    n_shards = len(shards_meta.partitions) if shards_meta and shards_meta.partitions else settings.partitions
    processors = _processors(admin, settings)  # 2
    owners = {s: p.client_id for p in processors for s in p.shards}
    states = _shard_states(settings)  # 3
    shards = tuple(
        ShardView(shard=p, owner=owners.get(p), watermark_ms=st.watermark_ms if st else None,
                  updated_at_ms=st.updated_at_ms if st else None, ticks=st.ticks if st else 0,
                  emitted=st.occurrences_emitted if st else 0)
        for p in range(n_shards)
        for st in [states.get(p)]
    )
    registry = read_registry(settings).target  # 4
    tenant_states = {name: str(t.state) for name, t in sorted(registry.items())}
    tenants = _tenants(admin, settings, tenant_states, md.topics)
    return StatusView(
        bootstrap=settings.bootstrap_servers, namespace=settings.namespace, brokers=brokers,
        processors=processors, shards=shards, tenants=tenants, taken_at_ms=int(time.time() * 1000),
        prometheus=settings.prometheus_link,
        figures=scrape(settings.prometheus_targets_dir, settings.namespace),  # 5
        lag_p99_5m=windowed_lag_p99(settings.prometheus_link, settings.namespace),  # 6
    )


def _members(admin: AdminClient, group: str) -> list[Any]:
    desc = admin.describe_consumer_groups([group], request_timeout=_TIMEOUT_S)[group].result(_TIMEOUT_S)
    return list(desc.members)


def _processors(admin: AdminClient, settings: Settings) -> tuple[ProcessorView, ...]:
    shards_topic = topic_name(settings, "shards")
    out = []
    for m in _members(admin, f"{settings.namespace}.processor"):
        tps = m.assignment.topic_partitions if m.assignment else []
        owned = tuple(sorted(tp.partition for tp in tps if tp.topic == shards_topic))
        out.append(ProcessorView(client_id=m.client_id, host=m.host, member_id=m.member_id, shards=owned))
    return tuple(sorted(out, key=lambda p: (p.shards[:1] or (1 << 30,), p.client_id)))


def _shard_states(settings: Settings) -> dict[int, ShardState]:
    latest: dict[bytes, bytes | None] = {}

    def keep(m: Message) -> None:
        key = m.key() or b""
        if key.startswith(b"shard:"):
            latest[key] = m.value()

    c = consumer(as_admin(settings), None, **{"enable.partition.eof": True})  # read_to_end needs it
    try:
        read_to_end(c, all_partitions(c, topic_name(settings, "state")), keep, timeout_s=120)
    finally:
        c.close()
    out: dict[int, ShardState] = {}
    for value in latest.values():
        if value:
            st = decode(value, ShardState)
            out[st.shard] = st
    return out


def _ends(admin: AdminClient, tps: Iterable[TopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    wanted = {tp: spec for tp in tps}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=_TIMEOUT_S)
    return {(tp.topic, tp.partition): f.result(_TIMEOUT_S).offset for tp, f in futures.items()}


def _tenants(
    admin: AdminClient, settings: Settings, states: dict[str, str], topics: dict[str, Any]
) -> tuple[TenantView, ...]:
    """Every tenant's view; the end offsets of all their partitions in one request per end."""

    def parts(kind: str, name: str) -> list[TopicPartition]:
        topic = topic_name(settings, kind, name)
        meta = topics.get(topic)
        return [TopicPartition(topic, p) for p in sorted(meta.partitions)] if meta and meta.partitions else []

    d_parts = {name: parts("dispatch", name) for name in states}
    q_parts = {name: parts("dlq", name) for name in states}
    every = [tp for group in (d_parts, q_parts) for tps in group.values() for tp in tps]
    high = _ends(admin, every, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    low = _ends(admin, every, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    out = []
    for name, state in states.items():
        keys = [(tp.topic, tp.partition) for tp in d_parts[name]]
        committed, workers = _workers(admin, f"{settings.namespace}.tenant.{name}.worker", d_parts[name])
        lag = sum(high[k] - committed.get(k, low[k]) for k in keys)
        depth = sum(high[(tp.topic, tp.partition)] - low[(tp.topic, tp.partition)] for tp in q_parts[name])
        out.append(TenantView(name=name, state=state, dispatch_offsets=sum(high[k] for k in keys),
                              worker_lag=max(lag, 0), workers=workers, dlq_offsets=depth))
    return tuple(out)


def _workers(
    admin: AdminClient, group: str, tps: list[TopicPartition]
) -> tuple[dict[tuple[str, int], int], int]:
    """The worker group's committed offsets of ``tps`` and its members; none of either before the
    group exists (nothing consumed, no worker)."""
    if not tps:
        return {}, 0
    try:
        req = [ConsumerGroupTopicPartitions(group, tps)]
        got = admin.list_consumer_group_offsets(req, request_timeout=_TIMEOUT_S)[group].result(_TIMEOUT_S)
        committed = {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions if tp.offset >= 0}
        return committed, len(_members(admin, group))
    except KafkaException:
        return {}, 0
