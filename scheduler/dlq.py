"""The dead-letter queue of a tenant (``ksched.dlq.<tenant>``): list and replay.

A replay puts the dead occurrence back on the tenant's dispatch topic with the
same occurrence id and the next attempt number, keyed by its schedule id (so
on the partition the schedule's processor shard owns). The processor adopts
the replayed attempt from its reports: an attempt number above the one that
died is current. Replaying twice dispatches twice; the workers' idempotency
store makes the second a no-op if the first succeeded.

A replay finds its entry through the history store (``dlq_entries``: the partition and offset of
each occurrence's latest death) and reads that one record, never the whole topic (DESIGN.md §6).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, TopicPartition

from scheduler.history.queries import StoreQueries
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import DlqEntry, Occurrence, RecordDecodeError, decode, encode
from scheduler.settings import Settings
from scheduler.topology import topic_name


def read_dlq(
    settings: Settings, tenant: str, timeout_s: float = 60, conn: KafkaConnection | None = None
) -> list[DlqEntry]:
    """Every dead-letter entry of ``tenant``, oldest first (undecodable records are skipped);
    read as ``conn``'s principal (default: the admin)."""
    out: list[DlqEntry] = []

    def keep(m: Message) -> None:
        try:
            out.append(decode(m.value() or b"", DlqEntry))
        except RecordDecodeError:
            return

    c = consumer(conn or settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, all_partitions(c, topic_name(settings, "dlq", tenant)), keep, timeout_s)
    finally:
        c.close()
    return sorted(out, key=lambda d: (d.dead_at_ms, d.occurrence_id))


class NotInDlq(LookupError):
    """The tenant's DLQ holds no entry of the occurrence (the store is caught up with the topic), or
    the entry's record is gone (retention); ``str()`` says which."""


class DlqNotIndexedYet(TimeoutError):
    """The history store has not indexed the tenant's DLQ topic to its end: the entry may be in the
    part not indexed yet. Retry in a moment (is ``ksched history`` running?)."""


class _Found(Exception):
    """Stops a read at its first record."""


def find_dead(
    settings: Settings, store: StoreQueries, tenant: str, occurrence_id: str, *, wait_s: float = 2.0,
    conn: KafkaConnection | None = None,
) -> DlqEntry:
    """The latest dead-letter entry of ``tenant``'s ``occurrence_id``: its partition and offset from
    the store, then that one record from the topic (as ``conn``'s principal, default the admin).

    Not in the store: :class:`NotInDlq` if the store holds every record of the topic (checked by
    reading at most one record per partition past what it indexed), else, after waiting up to
    ``wait_s`` for the indexer, :class:`DlqNotIndexedYet`. Never reads the whole topic."""
    topic = topic_name(settings, "dlq", tenant)
    c = consumer(conn or settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        deadline = time.monotonic() + wait_s
        while (where := store.dlq_location(tenant, occurrence_id)) is None:
            if not _has_unindexed(c, topic, store.indexed_to(topic)):
                raise NotInDlq(f"occurrence_id {occurrence_id!r} is not in the DLQ of tenant {tenant}")
            if time.monotonic() >= deadline:
                raise DlqNotIndexedYet(
                    f"occurrence_id {occurrence_id!r}: the history store has not indexed the DLQ of tenant "
                    f"{tenant} to its end yet (not indexed yet): retry in a second; if this lasts, check "
                    "that `ksched history` is running")
            time.sleep(0.1)
        found = _read_at(c, topic, *where)
    finally:
        c.close()
    if found is None or found.occurrence_id != occurrence_id or found.tenant != tenant:
        raise NotInDlq(f"occurrence_id {occurrence_id!r}: its DLQ record ({topic} partition {where[0]} "
                       f"offset {where[1]}) is gone (past the topic's retention)")
    return found


def _has_unindexed(c: Consumer, topic: str, indexed: dict[int, int]) -> bool:
    """Whether any partition of ``topic`` has a committed record at or past the store's offset:
    stops at the first (transaction markers and aborted records are skipped by the client)."""

    def stop(m: Message) -> None:
        raise _Found

    tps = all_partitions(c, topic)
    for tp in tps:
        tp.offset = indexed.get(tp.partition, 0)
    try:
        read_to_end(c, tps, stop, timeout_s=10, poll_s=0.05)
    except _Found:
        return True
    return False


def _read_at(c: Consumer, topic: str, partition: int, offset: int) -> DlqEntry | None:
    """The DLQ entry at ``partition``/``offset`` (assign, seek, one record), None if gone."""
    got: list[DlqEntry] = []

    def keep(m: Message) -> None:
        try:
            got.append(decode(m.value() or b"", DlqEntry))
        except RecordDecodeError:
            return

    read_to_end(c, [TopicPartition(topic, partition, offset)], keep, timeout_s=10, poll_s=0.05,
                stop_before={partition: offset + 1})
    return got[0] if got else None


def replay(
    settings: Settings, entries: list[DlqEntry], now_ms: int, conn: KafkaConnection | None = None
) -> list[Occurrence]:
    """Dispatch each entry's occurrence again (same occurrence id, attempt = attempts + 1), as
    ``conn``'s principal (default: the admin)."""
    p = producer(conn or settings.kafka())
    sent: list[Occurrence] = []
    for d in entries:
        occ = Occurrence(
            occurrence_id=d.occurrence_id,
            schedule_id=d.schedule_id,
            tenant=d.tenant,
            version=d.version,
            scheduled_for_ms=d.scheduled_for_ms,
            available_at_ms=d.available_at_ms,
            enqueued_at_ms=now_ms,
            attempt=d.attempts + 1,
            lane="RETRY",
            handler=d.handler,
            payload=d.payload,
        )
        p.produce(topic_name(settings, "dispatch", d.tenant), encode(occ), d.schedule_id.encode())
        sent.append(occ)
    if p.flush(30) > 0:
        raise TimeoutError("replay: the broker did not acknowledge every record within 30 s")
    return sent
