"""The dead-letter queue of a tenant (``ksched.dlq.<tenant>``): list and replay.

A replay puts the dead occurrence back on the tenant's dispatch topic with the
same occurrence id and the next attempt number, keyed by its schedule id (so
on the partition the schedule's processor shard owns). The processor adopts
the replayed attempt from its reports: an attempt number above the one that
died is current. Replaying twice dispatches twice; the workers' idempotency
store makes the second a no-op if the first succeeded.
"""

from __future__ import annotations

from confluent_kafka import Message

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
