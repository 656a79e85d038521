"""Restore one shard from ``ksched.state[p]`` and ``ksched.schedules[p]`` (read_committed, to the end)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from scheduler.kafka.clients import consumer_config
from scheduler.processor import codec
from scheduler.processor.shard import Shard
from scheduler.settings import Settings
from scheduler.topology import topic_name

log = logging.getLogger("ksched.processor.restore")


@dataclass
class RestoreStats:
    schedules: int = 0
    state_records: int = 0
    undecodable: int = 0
    seconds: float = 0.0


def read_to_end(consumer: Consumer, tp: TopicPartition, on_record: object, timeout_s: float = 120) -> int:
    """Feed every committed record of ``tp`` from the start to ``on_record(key, value)``.

    Ends at the partition's end as ``read_committed`` sees it (the last stable
    offset); raises TimeoutError naming the partition if that takes longer
    than ``timeout_s``.
    """
    low, high = consumer.get_watermark_offsets(tp, timeout=30)
    if high <= low:
        return 0
    consumer.assign([TopicPartition(tp.topic, tp.partition, low)])
    n = 0
    deadline = time.monotonic() + timeout_s
    last_log = time.monotonic()
    try:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"restore of {tp.topic}[{tp.partition}] did not reach the end in {timeout_s}s"
                )
            batch = consumer.consume(num_messages=10_000, timeout=0.5)
            done = False
            for m in batch:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                        continue
                    raise RuntimeError(f"restore of {tp.topic}[{tp.partition}]: {err}")
                on_record(m.key(), m.value())  # type: ignore[operator]
                n += 1
            if done:
                return n
            if time.monotonic() - last_log > 5:
                log.info("restoring %s[%d]: %d records so far", tp.topic, tp.partition, n)
                last_log = time.monotonic()
    finally:
        consumer.unassign()


def restore_shard(settings: Settings, shard: Shard, p: int) -> RestoreStats:
    """Rebuild ``shard`` from Kafka. Pre: the shard's producer ran ``init_transactions``
    (so no aborted owner holds back the last stable offset)."""
    started = time.monotonic()
    stats = RestoreStats()
    c = Consumer(
        consumer_config(
            settings.bootstrap_servers,
            f"{settings.namespace}.restore",  # never commits; assign() only
            **{
                "enable.partition.eof": True,
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 52_428_800,
            },
        )
    )
    try:

        def on_state(key: bytes | None, value: bytes | None) -> None:
            stats.state_records += 1
            if value is None:
                return
            try:
                codec.restore_state_record(shard, key, value)
            except codec.RecordDecodeError as exc:
                stats.undecodable += 1
                log.error("shard %d: undecodable state record %r skipped: %s", p, key, exc)

        def on_schedule(key: bytes | None, value: bytes | None) -> None:
            if value is None:
                return
            try:
                entry = codec.decode_schedule_entry(value)
                shard.restore_entry(entry)
                stats.schedules += 1
            except codec.RecordDecodeError as exc:
                stats.undecodable += 1
                log.error("shard %d: undecodable schedule record %r skipped: %s", p, key, exc)

        read_to_end(c, TopicPartition(topic_name(settings, "state"), p), on_state)
        read_to_end(c, TopicPartition(topic_name(settings, "schedules"), p), on_schedule)
    finally:
        c.close()
    stats.schedules = len(shard.entries)
    stats.seconds = time.monotonic() - started
    return stats
