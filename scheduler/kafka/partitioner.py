"""Which partition a key lands on: Kafka's ``murmur2`` partitioner, as the producers use it.

Every producer here uses librdkafka's ``murmur2_random`` (``scheduler.kafka.clients``):
for a non-empty key that is the Java client's default, ``toPositive(murmur2(key)) %
partitions``. Knowing the partition lets a reader fetch one schedule's records
from one partition of a co-partitioned topic instead of scanning them all
(``SchedulerClient.get``). A test checks this function against the real producer.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (unsigned)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length - length % 4
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition ``murmur2_random`` gives a non-empty ``key`` among ``partitions``."""
    if not key:
        raise ValueError("an empty key is partitioned at random: it has no fixed partition")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
