"""``scheduler.kafka.partitioner`` against Kafka's own test vectors and against librdkafka."""

from __future__ import annotations

import secrets

import pytest
from confluent_kafka.admin import NewTopic

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import producer
from scheduler.kafka.partitioner import murmur2, partition_for
from scheduler.settings import Settings

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
VECTORS = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}


def test_murmur2_matches_kafkas_test_vectors() -> None:
    assert {k: murmur2(k.encode()) for k in VECTORS} == VECTORS


def test_an_empty_key_has_no_partition() -> None:
    with pytest.raises(ValueError, match="empty key"):
        partition_for(b"", 4)


@pytest.mark.kafka
def test_partition_for_agrees_with_the_producers_partitioner(kafka_settings: Settings) -> None:
    topic = f"{kafka_settings.namespace}.partitioner-{secrets.token_hex(3)}"
    admin = admin_client(kafka_settings.kafka())
    for f in admin.create_topics([NewTopic(topic, num_partitions=7, replication_factor=1)]).values():
        f.result(30)
    keys = [secrets.token_hex(16).encode() for _ in range(300)] + [b"x", b"ab", b"abc"]
    landed: dict[bytes, int] = {}
    p = producer(kafka_settings.kafka())
    for k in keys:
        p.produce(topic, b"v", k, on_delivery=lambda err, m: landed.__setitem__(m.key(), m.partition()))
    p.flush(30)
    assert len(landed) == len(keys)
    assert {k: partition_for(k, 7) for k in keys} == landed
