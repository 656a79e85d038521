"""Producer and consumer factories: the one place client settings are chosen.

Every producer uses ``murmur2_random`` so a key lands on the same partition
number as the Java client would put it (DESIGN.md §3: co-partitioned topics).
Every consumer reads ``read_committed`` and never auto-commits: offsets move
only inside a transaction or by an explicit commit after the work is done.
Every factory takes a :class:`~scheduler.kafka.connection.KafkaConnection`, never a bare
bootstrap string: the security settings of the principal travel with it.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.errors import auth_error_cb

_checked: set[tuple[str, str, str]] = set()
_checked_lock = threading.Lock()


class NamedConsumer(Consumer):  # type: ignore[misc]
    """A Consumer that knows whose it is (``who``), so an access error can name the principal."""

    who = ""


class NamedProducer(Producer):  # type: ignore[misc]
    """A Producer that knows whose it is (``who``)."""

    who = ""


def check_login(conn: KafkaConnection, timeout_s: float = 5.0) -> None:
    """Fail fast on wrong credentials: the first time a process uses ``conn``, log in once and
    raise :class:`~scheduler.kafka.errors.AuthenticationFailed` if the broker refuses (librdkafka
    itself would retry quietly for ever). An unreachable broker is not judged here: after
    ``timeout_s`` the caller's own client reports it as before."""
    if not conn.principal:
        return
    secret = str(conn.security.get("sasl.password", "")).encode()
    key = (conn.bootstrap, conn.principal, hashlib.sha256(secret).hexdigest())  # no password kept
    with _checked_lock:
        if key in _checked:
            return
    probe = Producer(conn.config(log_level=0, error_cb=auth_error_cb(conn.who)))
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                probe.list_topics(timeout=0.25)
                break
            except KafkaException:
                probe.poll(0.05)  # serves the error callback: raises AuthenticationFailed
    finally:
        probe.flush(0)
    with _checked_lock:
        _checked.add(key)


def _secured(conn: KafkaConnection, cfg: dict[str, Any]) -> dict[str, Any]:
    if conn.principal:
        check_login(conn)
        cfg.setdefault("error_cb", auth_error_cb(conn.who))
    return cfg


PARTITIONER = "murmur2_random"


def producer_config(conn: KafkaConnection, **extra: Any) -> dict[str, Any]:
    """An idempotent producer tuned for short, frequent batches (the first use of ``conn`` checks
    its login: :func:`check_login`; a refused login later raises from poll/flush)."""
    return _secured(conn, conn.config(**{
        "partitioner": PARTITIONER,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "lz4",
        **extra,
    }))


def produce_waiting(
    producer: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int = -1
) -> None:
    """``produce()``, waiting for room when the client's queue is full instead of raising
    BufferError (never dropping a record; inside a transaction an escaping BufferError would
    leave it open). ``partition`` -1: by key. Polls the producer: call from its owning thread."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


Messages = list[dict[str, Any]]
"""``produce_batch``'s messages: ``{"value": bytes | None, "key": bytes}`` each."""


def produce_run(producer: Producer, topic: str, messages: Messages, partition: int) -> None:
    """Every one of ``messages`` to ``topic[partition]``, in their order, in one ``produce_batch``
    call: about a third less CPU a record than ``produce()`` each, measured on a transactional
    producer (docs/decisions.md). Like :func:`produce_waiting`, never drops a record.

    librdkafka marks each record it refuses. A full queue refuses the rest of the batch with it
    (librdkafka's ``rd_kafka_produce_batch``), so those are the run's tail: they are produced again
    one by one, waiting for room, and the order holds. Any other refusal, or a record queued after
    a refused one (the order lost, which librdkafka is not known to do: a guard), raises
    KafkaException, as ``produce()`` raises its refusals: the caller's transaction must not commit
    (the processor gives the shard up and rebuilds it)."""
    try:
        if producer.produce_batch(topic, messages, partition=partition) == len(messages):
            return
    except BufferError as exc:  # documented, not raised by 2.16's C code: which records went is unknown
        raise KafkaException(KafkaError(KafkaError._QUEUE_FULL, f"produce_batch: {exc}")) from exc
    first = next(i for i, m in enumerate(messages) if "_error" in m)
    tail = messages[first:]
    for m in tail:
        err = m.get("_error")
        if err is None or err.code() != KafkaError._QUEUE_FULL:
            raise KafkaException(messages[first]["_error"] if err is None else err)
    for m in tail:
        produce_waiting(producer, topic, m.get("value"), m.get("key"), partition)


def producer(conn: KafkaConnection, **extra: Any) -> Producer:
    p = NamedProducer(producer_config(conn, **extra))
    p.who = conn.who
    return p


def transactional_producer(conn: KafkaConnection, transactional_id: str, **extra: Any) -> Producer:
    """A transactional producer; the caller runs ``init_transactions()``.

    A stable ``transactional_id`` per shard owner is what fences a zombie: a
    new producer with the same id bumps the epoch and the old one's writes fail.
    """
    p = NamedProducer(
        producer_config(
            conn,
            **{"transactional.id": transactional_id, "transaction.timeout.ms": 60_000, **extra},
        )
    )
    p.who = conn.who
    return p


def consumer_config(conn: KafkaConnection, group_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A read_committed, never auto-committing consumer. Without ``group_id`` a random one under
    the principal's group prefix: a reader that only assigns still names a group, and the
    principal's ACLs allow only its own."""
    return _secured(conn, conn.config(**{
        "group.id": group_id or f"{conn.group_prefix}reader-{uuid.uuid4().hex[:12]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        **extra,
    }))


def consumer(conn: KafkaConnection, group_id: str | None = None, **extra: Any) -> Consumer:
    c = NamedConsumer(consumer_config(conn, group_id, **extra))
    c.who = conn.who
    return c
