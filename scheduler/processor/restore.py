"""Restore one shard from ``ksched.state[p]`` and ``ksched.schedules[p]`` (read_committed, to the end)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

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


def read_to_end(
    consumer: Consumer,
    tps: list[TopicPartition],
    on_record: Callable[[Message], None],
    timeout_s: float = 600,
) -> int:
    """Feed every committed record of the partitions ``tps`` from the start to ``on_record``.

    All partitions are read at once (the client fetches them in parallel) and
    each ends at its end as ``read_committed`` sees it (the last stable offset);
    raises TimeoutError naming the partitions not yet at their end if that
    takes longer than ``timeout_s``.
    """
    pending: set[tuple[str, int]] = set()
    start: list[TopicPartition] = []
    for tp in tps:
        low, high = consumer.get_watermark_offsets(tp, timeout=30)
        if high > low:
            pending.add((tp.topic, tp.partition))
            start.append(TopicPartition(tp.topic, tp.partition, low))
    if not pending:
        return 0
    consumer.assign(start)
    n = 0
    deadline = time.monotonic() + timeout_s
    last_log = time.monotonic()
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"restore did not reach the end of {sorted(pending)} in {timeout_s}s")
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((m.topic() or "", m.partition() or 0))
                        continue
                    raise RuntimeError(f"restore of {m.topic()}[{m.partition()}]: {err}")
                on_record(m)
                n += 1
            if time.monotonic() - last_log > 5:
                log.info("restoring: %d records so far, %d partitions to go", n, len(pending))
                last_log = time.monotonic()
        return n
    finally:
        consumer.unassign()


def restore_shards(settings: Settings, shards: dict[int, Shard]) -> dict[int, RestoreStats]:
    """Rebuild ``shards`` (by partition) from Kafka, all in one pass over their partitions of
    ``ksched.state`` and ``ksched.schedules``.

    Pre: each shard's producer ran ``init_transactions`` (so no aborted owner holds
    back the last stable offset). Post: entries and cursors are loaded; the caller
    arms them (:meth:`Shard.finish_restore`).
    """
    started = time.monotonic()
    stats = {p: RestoreStats() for p in shards}
    t_state, t_schedules = topic_name(settings, "state"), topic_name(settings, "schedules")
    c = Consumer(
        consumer_config(
            settings.bootstrap_servers,
            f"{settings.namespace}.restore",  # never commits; assign() only
            **{
                "enable.partition.eof": True,
                # Prefetch enough to keep the decode loop busy, not whole partitions: what
                # the client buffers here stays in the processor's RSS after restore.
                "queued.max.messages.kbytes": 16_384,
            },
        )
    )

    def on_record(m: Message) -> None:
        p = m.partition() or 0
        shard, st, value = shards[p], stats[p], m.value()
        if m.topic() == t_state:
            st.state_records += 1
            if value is None:  # a tombstone: the schedule's runtime state was cleared
                shard.restored_runtime.pop((m.key() or b"").decode(), None)
                return
            try:
                codec.restore_state_record(shard, m.key(), value)
            except codec.RecordDecodeError as exc:
                st.undecodable += 1
                log.error("shard %d: undecodable state record %r skipped: %s", p, m.key(), exc)
            return
        if value is None:
            return
        try:
            shard.restore_entry(codec.decode_schedule_entry(value))
        except codec.RecordDecodeError as exc:
            st.undecodable += 1
            log.error("shard %d: undecodable schedule record %r skipped: %s", p, m.key(), exc)

    try:
        read_to_end(
            c,
            [TopicPartition(t, p) for t in (t_state, t_schedules) for p in shards],
            on_record,
        )
    finally:
        c.close()
    for p, shard in shards.items():
        stats[p].schedules = len(shard.entries)
        stats[p].seconds = time.monotonic() - started
    return stats
