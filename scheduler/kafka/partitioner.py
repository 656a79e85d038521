"""Kafka's key → partition mapping (``murmur2``), as every ksched producer uses it.

All schedule-keyed topics use librdkafka's ``murmur2_random`` partitioner, which
is the Java client's default for keyed records: ``toPositive(murmur2(key)) %
partitions``. The processor recomputes it to refuse a command or report that
was produced to another partition than its key's (a second live copy of a
schedule, or a report that the shard holding the schedule never sees), and the
SDK reads one schedule's records from one partition instead of scanning all
(``SchedulerClient.get``). Tests check it against Kafka's vectors and the real producer.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int (test vectors: Kafka's UtilsTest)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of a keyed record among ``partitions`` (``murmur2_random`` with a key)."""
    if not key:
        raise ValueError("an empty key is partitioned at random: it has no fixed partition")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
