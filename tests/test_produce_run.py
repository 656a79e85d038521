"""``produce_run``: a run of records in one ``produce_batch`` call, in order, never dropped.

On the real broker: inside a transaction (aborted: invisible; committed: every record, in order),
and with a client queue too small for the run (the refused tail is produced again, in order).
Without a broker: a refusal it cannot repair raises, as ``produce()`` would."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import Messages, consumer, produce_run, producer, transactional_producer
from scheduler.settings import Settings
from tests.test_kafka_semantics import _read_all, _topic


def _run(prefix: str, n: int) -> Messages:
    return [{"value": f"{prefix}-{i}".encode(), "key": str(i % 7).encode()} for i in range(n)]


@pytest.mark.kafka
def test_a_run_in_an_aborted_transaction_is_invisible_and_a_committed_one_is_whole(
    kafka_settings: Settings,
) -> None:
    conn = kafka_settings.kafka()
    topic = _topic(kafka_settings, conn, "run-txn")
    p = transactional_producer(conn, f"test-run-{uuid.uuid4().hex[:8]}")
    p.init_transactions(30)
    p.begin_transaction()
    produce_run(p, topic, _run("aborted", 50), 0)
    p.flush()
    p.abort_transaction(30)
    p.begin_transaction()
    produce_run(p, topic, _run("committed", 60)[:30], 0)
    produce_run(p, topic, _run("committed", 60)[30:], 0)
    p.commit_transaction(30)

    assert _read_all(conn, topic, isolation="read_committed", expect=60) == [
        f"committed-{i}".encode() for i in range(60)
    ]
    assert len(_read_all(conn, topic, isolation="read_uncommitted", expect=110)) == 110


@pytest.mark.kafka
def test_a_run_longer_than_the_clients_queue_is_written_whole_and_in_order(kafka_settings: Settings) -> None:
    conn = kafka_settings.kafka()
    topic = f"{kafka_settings.namespace}.t-run-full-{uuid.uuid4().hex[:6]}"
    admin = admin_client(conn)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=30)
    # Room for 10 records, and none leaves for 200 ms: the batch call queues 10 and refuses 35.
    p = producer(conn, **{"queue.buffering.max.messages": 10, "linger.ms": 200})
    batch, queued = p.produce_batch, []
    p.produce_batch = lambda *a, **kw: queued.append(batch(*a, **kw)) or queued[-1]
    produce_run(p, topic, _run("r", 45), 1)  # keys 0-6: by key, some would land on partition 0
    assert queued == [10]  # the path under test: 35 refused, then produced again one by one
    assert p.flush(30) == 0
    c = consumer(conn)
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()
    assert hi == lo == 0  # every record on the run's partition
    got = _read_all(conn, topic, isolation="read_committed", expect=45, partition=1)
    assert got == [f"r-{i}".encode() for i in range(45)]


class _Refusing:
    """A producer whose ``produce_batch`` refuses the messages at ``refused`` with ``code``."""

    def __init__(self, refused: set[int], code: int) -> None:
        self.refused, self.code = refused, code
        self.queued: list[bytes] = []
        self.placed: list[tuple[str, bytes, int]] = []

    def produce_batch(self, topic: str, messages: Messages, partition: int = -1) -> int:
        for i, m in enumerate(messages):
            if i in self.refused:
                m["_error"] = KafkaError(self.code)
            else:
                self.queued.append(m["value"])
                self.placed.append((topic, m["key"], partition))
        return len(messages) - len(self.refused)

    def produce(self, topic: str, value: bytes, key: bytes, partition: int = -1) -> None:
        self.queued.append(value)
        self.placed.append((topic, key, partition))


def test_a_refused_tail_is_produced_again_in_order_on_the_runs_partition() -> None:
    p = _Refusing({3, 4, 5}, KafkaError._QUEUE_FULL)
    run = _run("r", 6)
    produce_run(p, "t", run, 2)  # type: ignore[arg-type]
    assert p.queued == [f"r-{i}".encode() for i in range(6)]
    assert p.placed == [("t", m["key"], 2) for m in run]


def test_a_buffer_error_raises_a_queue_full_refusal() -> None:
    """Documented for produce_batch (which records were queued is then unknown): it must not
    escape as BufferError, which the processor's transaction handling does not catch."""

    class _Full:
        def produce_batch(self, *_: Any, **__: Any) -> int:
            raise BufferError("Local: Queue full")

    with pytest.raises(KafkaException) as info:
        produce_run(_Full(), "t", _run("r", 3), 0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError._QUEUE_FULL


def test_a_record_queued_past_a_refused_one_raises_the_refusal() -> None:
    """The order is lost: the caller's transaction must not commit."""
    p = _Refusing({2}, KafkaError._QUEUE_FULL)
    with pytest.raises(KafkaException) as info:
        produce_run(p, "t", _run("r", 6), 0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError._QUEUE_FULL
    assert p.queued == [b"r-0", b"r-1", b"r-3", b"r-4", b"r-5"]  # nothing produced again


def test_any_other_refusal_raises_it() -> None:
    p = _Refusing({4, 5}, KafkaError.MSG_SIZE_TOO_LARGE)
    with pytest.raises(KafkaException) as info:
        produce_run(p, "t", _run("r", 6), 0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
