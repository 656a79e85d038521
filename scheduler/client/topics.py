"""Reading a tenant's schedules from its compacted topic ``ksched.schedules.<tenant>``.

Queries read the history store (``scheduler/client/queries.py``); these reads remain for what
the store cannot answer: :func:`read_schedule` is ``get``'s fallback when no store has indexed
this namespace (one partition, the one the id is keyed to), :func:`read_schedules` an
administrator's and the tests' full read of one tenant's topic.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Message, TopicPartition

from scheduler.client.errors import UnknownTenant
from scheduler.domain.bounds import check_schedule_id, check_tenant
from scheduler.kafka.clients import consumer
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.partitioner import partition_for
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import Schedule, decode
from scheduler.settings import Settings
from scheduler.topology import topic_name


def _unknown_tenant(settings: Settings, tenant: str, topic: str) -> UnknownTenant:
    return UnknownTenant(
        f"tenant {tenant!r}: its topic {topic} does not exist: register the tenant "
        f"(ksched tenants add {tenant}) or check the namespace ({settings.namespace!r})"
    )


def partitions_of(settings: Settings, c: Consumer, tenant: str, topic: str) -> list[TopicPartition]:
    """Every partition of ``tenant``'s ``topic``; :class:`UnknownTenant` when it does not exist."""
    try:
        return all_partitions(c, topic)
    except LookupError:
        raise _unknown_tenant(settings, tenant, topic) from None


def read_schedules(
    settings: Settings, tenant: str, timeout_s: float = 30, conn: KafkaConnection | None = None
) -> dict[str, Schedule]:
    """The current ``Schedule`` records of ``tenant``, read from its compacted ``ksched.schedules.<tenant>``.

    A tenant reads only its own topic (the broker's ACLs); a record of another tenant is skipped.
    """
    check_tenant(tenant)
    topic = topic_name(settings, "schedules", tenant)
    out: dict[str, Schedule] = {}

    def keep(m: Message) -> None:
        if m.value() is None:  # a tombstone: the schedule was purged after its retention
            out.pop((m.key() or b"").decode(), None)
            return
        try:
            s = decode(m.value() or b"", Schedule)
        except ValueError:
            return
        if s.tenant == tenant:
            out[s.schedule_id] = s

    c = consumer(conn or settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, partitions_of(settings, c, tenant, topic), keep, timeout_s)
    finally:
        c.close()
    return out


def read_schedule(
    settings: Settings,
    tenant: str,
    schedule_id: str,
    timeout_s: float = 30,
    conn: KafkaConnection | None = None,
) -> Schedule | None:
    """The current ``Schedule`` record of ``schedule_id`` for ``tenant``, or None.

    Reads only the partition of ``ksched.schedules.<tenant>`` the id is keyed to
    (:func:`scheduler.kafka.partitioner.partition_for`), to its end.
    """
    check_tenant(tenant)
    check_schedule_id(schedule_id)
    topic = topic_name(settings, "schedules", tenant)
    key = schedule_id.encode()
    latest: list[bytes | None] = [None]

    def keep(m: Message) -> None:
        if m.key() == key:
            latest[0] = m.value()

    c = consumer(conn or settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        tp = TopicPartition(topic, partition_for(key, len(partitions_of(settings, c, tenant, topic))))
        read_to_end(c, [tp], keep, timeout_s)
    finally:
        c.close()
    if latest[0] is None:
        return None
    s = decode(latest[0], Schedule)
    return s if s.tenant == tenant else None  # another tenant's schedule does not exist here
