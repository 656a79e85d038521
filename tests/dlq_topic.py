"""A tenant's whole DLQ topic, read as it is: the tests that check what the processor wrote to it.

The product never reads a whole DLQ topic (``ksched dlq`` and ``/v1/dlq`` go through the history
store, DESIGN.md §6); a test asserting the processor's own output reads the topic itself, so a
lagging indexer cannot hide a missing or extra entry."""

from __future__ import annotations

from confluent_kafka import Message

from scheduler.kafka.clients import consumer
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import DlqEntry, RecordDecodeError, decode
from scheduler.settings import Settings
from scheduler.topology import topic_name


def read_dlq(settings: Settings, tenant: str, timeout_s: float = 60) -> list[DlqEntry]:
    """Every dead-letter entry of ``tenant`` (as the admin), oldest death first; undecodable records
    are skipped."""
    out: list[DlqEntry] = []

    def keep(m: Message) -> None:
        try:
            out.append(decode(m.value() or b"", DlqEntry))
        except RecordDecodeError:
            return

    c = consumer(settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, all_partitions(c, topic_name(settings, "dlq", tenant)), keep, timeout_s)
    finally:
        c.close()
    return sorted(out, key=lambda d: (d.dead_at_ms, d.occurrence_id))
