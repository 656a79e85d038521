"""Restore one shard from ``ksched.state[p]`` and ``ksched.schedules[p]`` (read_committed, to the end)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition

from scheduler.kafka.clients import consumer_config
from scheduler.kafka.reader import read_to_end
from scheduler.principals import as_processor
from scheduler.processor import wire_state
from scheduler.processor.shard import Shard
from scheduler.records import RecordDecodeError
from scheduler.settings import Settings
from scheduler.topology import topic_name

log = logging.getLogger("ksched.processor.restore")


@dataclass
class RestoreStats:
    schedules: int = 0
    state_records: int = 0
    undecodable: int = 0
    seconds: float = 0.0


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
    decode_entry = wire_state.decode_schedule_entry
    c = Consumer(
        consumer_config(
            as_processor(settings),
            f"{settings.namespace}.processor.restore",  # never commits; assign() only; in its ACLs
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
        shard, value = shards[p], m.value()
        if m.topic() != t_state:  # ksched.schedules: nearly every record
            if value is None:  # a purged schedule (its older record may not be compacted away yet)
                shard.forget((m.key() or b"").decode())
                return
            try:
                shard.restore_entry(decode_entry(value))
            except RecordDecodeError as exc:
                stats[p].undecodable += 1
                log.error("shard %d: undecodable schedule record %r skipped: %s", p, m.key(), exc)
            return
        st = stats[p]
        st.state_records += 1
        if value is None:  # a tombstone: the schedule's runtime state was cleared
            shard.restored_runtime.pop((m.key() or b"").decode(), None)
            return
        try:
            wire_state.restore_state_record(shard, m.key(), value)
        except RecordDecodeError as exc:
            st.undecodable += 1
            log.error("shard %d: undecodable state record %r skipped: %s", p, m.key(), exc)

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
