"""Producer and consumer factories: the one place client settings are chosen.

Every producer uses ``murmur2_random`` so a key lands on the same partition
number as the Java client would put it (DESIGN.md §3: co-partitioned topics).
Every consumer reads ``read_committed`` and never auto-commits: offsets move
only inside a transaction or by an explicit commit after the work is done.
Every factory takes a :class:`~scheduler.kafka.connection.KafkaConnection`, never a bare
bootstrap string: the security settings of the principal travel with it.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from scheduler.kafka.connection import KafkaConnection

PARTITIONER = "murmur2_random"


def producer_config(conn: KafkaConnection, **extra: Any) -> dict[str, Any]:
    """An idempotent producer tuned for short, frequent batches."""
    return conn.config(**{
        "partitioner": PARTITIONER,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "lz4",
        **extra,
    })


def produce_waiting(
    producer: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int = -1
) -> None:
    """``produce()``, waiting for room when the client's queue is full instead of raising
    BufferError (never dropping a record; inside a transaction an escaping BufferError would
    leave it open). ``partition`` -1: by key. Polls the producer: call from its owning thread."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def producer(conn: KafkaConnection, **extra: Any) -> Producer:
    return Producer(producer_config(conn, **extra))


def transactional_producer(conn: KafkaConnection, transactional_id: str, **extra: Any) -> Producer:
    """A transactional producer; the caller runs ``init_transactions()``.

    A stable ``transactional_id`` per shard owner is what fences a zombie: a
    new producer with the same id bumps the epoch and the old one's writes fail.
    """
    return Producer(
        producer_config(
            conn,
            **{"transactional.id": transactional_id, "transaction.timeout.ms": 60_000, **extra},
        )
    )


def consumer_config(conn: KafkaConnection, group_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return conn.config(**{
        "group.id": group_id or f"ksched-reader-{uuid.uuid4().hex[:12]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **extra,
    })


def consumer(conn: KafkaConnection, group_id: str | None = None, **extra: Any) -> Consumer:
    return Consumer(consumer_config(conn, group_id, **extra))
