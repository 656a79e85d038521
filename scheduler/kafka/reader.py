"""Reading partitions to their end: restore, the SDK's schedule list, the DLQ, workers' views."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from scheduler.kafka.errors import denied, is_denial

log = logging.getLogger("ksched.kafka.reader")


def all_partitions(consumer: Consumer, topic: str, timeout_s: float = 10) -> list[TopicPartition]:
    """Every partition of ``topic``; raises LookupError naming the topic if it does not exist,
    :class:`~scheduler.kafka.errors.AccessDenied` if the principal may not see it."""
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is not None and is_denial(meta.error):
        raise denied(getattr(consumer, "who", ""), meta.error, topic, "read")
    if meta is None or meta.error is not None or not meta.partitions:
        raise LookupError(f"topic {topic} does not exist: run `ksched topics apply`")
    return [TopicPartition(topic, p) for p in sorted(meta.partitions)]


# Errors of a partition whose leader is not settled yet (a topic created a moment ago, a leader
# election): asking again shortly succeeds.
_TRANSIENT = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
})


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float = 30) -> tuple[int, int]:
    """``(low, high)`` offsets of ``tp``, asking again while its leader is not settled (a topic
    created a moment ago answers NOT_LEADER_FOR_PARTITION at first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if is_denial(err):
                raise denied(getattr(consumer, "who", ""), err, tp.topic, "read") from None
            if err.code() not in _TRANSIENT or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def read_one(consumer: Consumer, tp: TopicPartition, timeout_s: float = 10) -> Message | None:
    """The committed record at ``tp.offset`` of ``tp``, or None when there is none: past retention
    (the consumer resets to another offset), at or past the end, or not a committed record.

    Pre: ``consumer`` was created with ``enable.partition.eof``. One fetch, answered as soon as the
    record is there: :func:`read_to_end` would first ask for the watermarks and wait out a
    batch's ``poll_s`` (about half a second a record; ``ksched dlq replay --all`` reads thousands).
    Raises TimeoutError naming the record when no answer comes within ``timeout_s``."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset)])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1, timeout=min(0.5, timeout_s)):
                err = m.error()
                if err is None:
                    return m if m.offset() == tp.offset else None
                if err.code() == KafkaError._PARTITION_EOF:
                    return None
                if is_denial(err):
                    raise denied(getattr(consumer, "who", ""), err, tp.topic, "read")
                raise RuntimeError(f"read of {tp.topic}[{tp.partition}] at offset {tp.offset}: {err}")
        raise TimeoutError(f"no answer for {tp.topic}[{tp.partition}] offset {tp.offset} in {timeout_s}s")
    finally:
        consumer.unassign()


def _past(consumer: Consumer, pending: set[tuple[str, int]], ends: dict[tuple[str, int], int]) -> set[
        tuple[str, int]]:
    """The partitions whose position reached their window's end: a window may end on a transaction
    marker, which no record delivered ends."""
    return {(t, p) for t, p in pending & ends.keys()
            if consumer.position([TopicPartition(t, p)])[0].offset >= ends[(t, p)]}


def _in_window(m: Message, ends: dict[tuple[str, int], int], pending: set[tuple[str, int]]) -> bool:
    """Whether ``m`` is before its partition's window end (the rest of a batch may be past it);
    its partition is done when ``m`` is the window's last offset."""
    where, offset = (m.topic() or "", m.partition() or 0), m.offset() or 0
    if offset >= ends[where] - 1:
        pending.discard(where)
    return offset < ends[where]


def _starts(consumer: Consumer, tps: list[TopicPartition], stop_before: dict[int, int] | None) -> tuple[
        set[tuple[str, int]], list[TopicPartition], dict[tuple[str, int], int]]:
    """The partitions with something to read, where each starts, and each window's end."""
    pending: set[tuple[str, int]] = set()
    start: list[TopicPartition] = []
    ends: dict[tuple[str, int], int] = {}
    for tp in tps:
        low, high = watermarks(consumer, tp)
        first = max(low, tp.offset)  # an unset offset is negative
        if stop_before is not None:
            high = ends[(tp.topic, tp.partition)] = min(high, stop_before.get(tp.partition, high))
        if high > first:
            pending.add((tp.topic, tp.partition))
            start.append(TopicPartition(tp.topic, tp.partition, first))
    return pending, start, ends


def read_to_end(
    consumer: Consumer,
    tps: list[TopicPartition],
    on_record: Callable[[Message], None],
    timeout_s: float = 600,
    poll_s: float = 0.5,
    stop_before: dict[int, int] | None = None,
) -> int:
    """Feed every committed record of the partitions ``tps`` from the start to ``on_record``
    (from a partition's ``offset`` instead, when it holds one: the tail after what a caller
    already read), and up to the offset ``stop_before`` gives a partition (excluded), if any: a
    bounded window of a topic, e.g. one page of it.

    Pre: ``consumer`` was created with ``enable.partition.eof`` (the end is how it knows).

    All partitions are read at once (the client fetches them in parallel) and
    each ends at its end as ``read_committed`` sees it (the last stable offset);
    raises TimeoutError naming the partitions not yet at their end if that
    takes longer than ``timeout_s``. ``poll_s`` is the wait of each batch: a batch returns
    early only when full, so a small topic read at start wants a short one.
    """
    pending, start, ends = _starts(consumer, tps, stop_before)
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
            for m in consumer.consume(num_messages=10_000, timeout=poll_s):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((m.topic() or "", m.partition() or 0))
                        continue
                    if is_denial(err):
                        raise denied(getattr(consumer, "who", ""), err, m.topic() or "?", "read")
                    raise RuntimeError(f"restore of {m.topic()}[{m.partition()}]: {err}")
                if stop_before is not None and not _in_window(m, ends, pending):
                    continue
                on_record(m)
                n += 1
            pending -= _past(consumer, pending, ends)  # only windows are in ends
            if time.monotonic() - last_log > 5:
                log.info("restoring: %d records so far, %d partitions to go", n, len(pending))
                last_log = time.monotonic()
        return n
    finally:
        consumer.unassign()
