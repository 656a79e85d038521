"""Restore one shard from ``ksched.state[p]`` and ``ksched.schedules[p]`` (read_committed, to the end)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_INVALID, Consumer, Message, TopicPartition

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


def restore_shards(
    settings: Settings,
    shards: dict[int, Shard],
    starts: Mapping[tuple[str, int], int] | None = None,
    consumer: Consumer | None = None,
) -> dict[int, RestoreStats]:
    """Rebuild ``shards`` (by partition) from Kafka, all in one pass over their partitions of
    ``ksched.state`` and ``ksched.schedules``; a partition named in ``starts`` is read from that
    offset on (a warm copy's tail, :mod:`~scheduler.processor.standby`), the others from the start.
    ``consumer``: a :func:`restore_consumer` to use (left open), one already connected: a new
    one spends 0.3-1 s connecting, most of a warm copy's take-over (measured).

    Pre: each shard's producer ran ``init_transactions`` (so no aborted owner holds
    back the last stable offset). Post: entries and cursors are loaded; the caller
    arms them (:meth:`Shard.finish_restore`).
    """
    started = time.monotonic()
    stats = {p: RestoreStats() for p in shards}
    apply = RecordApplier(settings, shards, stats)
    c = consumer or restore_consumer(settings)
    starts = starts or {}
    try:
        read_to_end(
            c,
            [TopicPartition(t, p, starts.get((t, p), OFFSET_INVALID)) for t in apply.topics for p in shards],
            apply,
        )
    finally:
        if consumer is None:
            c.close()
    for p, shard in shards.items():
        stats[p].schedules = len(shard.entries)
        stats[p].seconds = time.monotonic() - started
    return stats


def restore_consumer(settings: Settings, **extra: object) -> Consumer:
    """An assign-only ``read_committed`` consumer of the shards' state and schedules partitions."""
    return Consumer(
        consumer_config(
            as_processor(settings),
            f"{settings.namespace}.processor.restore",  # never commits; assign() only; in its ACLs
            **{
                "enable.partition.eof": True,
                # Prefetch enough to keep the decode loop busy, not whole partitions: what
                # the client buffers here stays in the processor's RSS after restore. With 1 MB
                # fetches per partition (the default) the loop waited for the fetcher a quarter
                # of a warm-up (py-spy --idle, docs/decisions.md).
                "queued.max.messages.kbytes": 65_536,
                "max.partition.fetch.bytes": 16 << 20,
                # The last fetch finds nothing: the broker would hold it 500 ms (the default).
                "fetch.wait.max.ms": 10,
                **extra,
            },
        )
    )


class RecordApplier:
    """Applies one record of ``ksched.state[p]`` or ``ksched.schedules[p]`` to shard p: what
    restore and a warm copy (:mod:`~scheduler.processor.standby`) both do with what they read."""

    def __init__(self, settings: Settings, shards: dict[int, Shard], stats: dict[int, RestoreStats]) -> None:
        self.shards, self.stats = shards, stats
        self.t_state = topic_name(settings, "state")
        self.topics = (self.t_state, topic_name(settings, "schedules"))
        self._decode_entry = wire_state.decode_schedule_entry

    def __call__(self, m: Message) -> None:
        self.apply(m, m.partition() or 0, m.topic())

    def apply(self, m: Message, p: int, topic: str | None) -> None:
        """:meth:`__call__` for a caller that already read ``m``'s partition and topic."""
        shard, value = self.shards[p], m.value()
        if topic != self.t_state:  # ksched.schedules: nearly every record
            if value is None:  # a purged schedule (its older record may not be compacted away yet)
                shard.forget((m.key() or b"").decode())
                return
            try:
                shard.restore_entry(self._decode_entry(value))
            except RecordDecodeError as exc:
                self.stats[p].undecodable += 1
                log.error("shard %d: undecodable schedule record %r skipped: %s", p, m.key(), exc)
            return
        st = self.stats[p]
        st.state_records += 1
        if value is None:  # a tombstone: the schedule's runtime state was cleared
            shard.restored_runtime.pop((m.key() or b"").decode(), None)
            return
        try:
            wire_state.restore_state_record(shard, m.key(), value)
        except RecordDecodeError as exc:
            st.undecodable += 1
            log.error("shard %d: undecodable state record %r skipped: %s", p, m.key(), exc)
