"""The broker is real: transactions, idempotence and compaction behave as Kafka's do."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import consumer, producer, transactional_producer
from scheduler.kafka.connection import KafkaConnection
from scheduler.settings import Settings

pytestmark = pytest.mark.kafka


def _topic(settings: Settings, admin_bootstrap: KafkaConnection, suffix: str, **config: str) -> str:
    name = f"{settings.namespace}.t-{suffix}-{uuid.uuid4().hex[:6]}"
    admin = admin_client(admin_bootstrap)  # keep the handle alive until the future resolves
    fut = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1, config=config)]
    )
    fut[name].result(timeout=30)
    return name


def _read_all(
    bootstrap: KafkaConnection, topic: str, *, isolation: str, expect: int, timeout_s: float = 20,
    partition: int = 0,
) -> list[bytes]:
    c = consumer(bootstrap, **{"isolation.level": isolation})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(out) < expect:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append(msg.value())
        # Give a little extra time for records that should not be there to show up.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        c.close()
    return out


def test_aborted_transaction_is_invisible_and_committed_one_is_visible(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.kafka()
    topic = _topic(kafka_settings, bootstrap, "txn")
    p = transactional_producer(bootstrap, f"test-txn-{uuid.uuid4().hex[:8]}")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, key=b"k", value=f"aborted-{i}".encode())
    p.flush()
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic, key=b"k", value=f"committed-{i}".encode())
    p.commit_transaction(30)

    committed = _read_all(bootstrap, topic, isolation="read_committed", expect=50)
    assert committed == [f"committed-{i}".encode() for i in range(50)]
    uncommitted = _read_all(bootstrap, topic, isolation="read_uncommitted", expect=100)
    assert len(uncommitted) == 100  # the aborted records are in the log, just invisible


def test_zombie_producer_is_fenced(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.kafka()
    topic = _topic(kafka_settings, bootstrap, "fence")
    tid = f"test-fence-{uuid.uuid4().hex[:8]}"
    old = transactional_producer(bootstrap, tid)
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    new = transactional_producer(bootstrap, tid)
    new.init_transactions(30)  # bumps the epoch: the old producer is now a zombie
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(30)
    err: KafkaError = info.value.args[0]
    assert err.fatal() or err.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    new.begin_transaction()
    new.produce(topic, value=b"owner")
    new.commit_transaction(30)
    assert _read_all(bootstrap, topic, isolation="read_committed", expect=1) == [b"owner"]


def test_idempotent_producer_writes_each_record_once(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.kafka()
    topic = _topic(kafka_settings, bootstrap, "idem")
    p = producer(bootstrap)
    for i in range(1000):
        p.produce(topic, key=str(i % 7).encode(), value=str(i).encode())
    assert p.flush(30) == 0
    values = _read_all(bootstrap, topic, isolation="read_committed", expect=1000)
    assert sorted(int(v) for v in values) == list(range(1000))


def test_compacted_topic_keeps_latest_value_per_key(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.kafka()
    topic = _topic(
        kafka_settings,
        bootstrap,
        "compact",
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.001",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    p = producer(bootstrap)
    for round_ in range(20):
        for key in ("a", "b", "c"):
            p.produce(topic, key=key.encode(), value=f"{key}{round_}".encode())
    p.flush(30)
    deadline = time.monotonic() + 90
    latest: dict[bytes, bytes] = {}
    count = 60
    while time.monotonic() < deadline:
        time.sleep(2)
        p.produce(topic, key=b"roll", value=b"x")  # a new record rolls the active segment
        p.flush(10)
        c = consumer(bootstrap)
        c.assign([TopicPartition(topic, 0, 0)])
        seen: list[tuple[bytes, bytes]] = []
        idle = 0
        while idle < 5:
            msg = c.poll(0.2)
            if msg is None:
                idle += 1
                continue
            if not msg.error():
                seen.append((msg.key(), msg.value()))
        c.close()
        latest = {k: v for k, v in seen if k != b"roll"}
        count = sum(1 for k, _ in seen if k != b"roll")
        if count == 3:
            break
    assert latest == {b"a": b"a19", b"b": b"b19", b"c": b"c19"}
    assert count == 3, f"compaction left {count} records for 3 keys"
