"""Helpers for the worker tests against the real broker (no tests here).

No processor is involved: the tests write dispatch and versions records
themselves and read the attempt reports back from ``ksched.commands``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from scheduler.kafka.clients import consumer, producer
from scheduler.records import (
    AttemptReport,
    AttemptReports,
    Occurrence,
    VersionRecord,
    decode_command_topic,
    encode,
)
from scheduler.settings import Settings
from scheduler.topology import topic_name
from scheduler.worker import Handler, Worker

NOW_MS = 1_790_000_000_000


def occ(
    tenant: str, sid: str, *, version: int = 1, handler: str = "h", payload: bytes = b"p", attempt: int = 1,
    at_ms: int = NOW_MS,
) -> Occurrence:
    return Occurrence(
        occurrence_id=f"{sid}/v{version}/{at_ms}", schedule_id=sid, tenant=tenant, version=version,
        scheduled_for_ms=at_ms, available_at_ms=at_ms, enqueued_at_ms=at_ms + 5, attempt=attempt,
        lane="STRICT", handler=handler, payload=payload,
    )


@functools.cache
def _producer(bootstrap: str) -> Producer:
    return producer(bootstrap)  # one per session: an idempotent producer's start-up costs a round trip


def close_producer() -> None:
    """Drop the cached producer (module teardown), so none outlives the session's broker."""
    _producer.cache_clear()


def send(
    settings: Settings, topic: str, records: Sequence[tuple[str, bytes | None]], partition: int | None = None
) -> None:
    """Produce ``(key, value)`` pairs in order (to ``partition`` when given) and wait for the acks."""
    p = _producer(settings.kafka())
    for key, value in records:
        if partition is None:
            p.produce(topic, value, key.encode())
        else:
            p.produce(topic, value, key.encode(), partition=partition)
    assert p.flush(30) == 0


def dispatch(
    settings: Settings, tenant: str, *items: Occurrence | bytes, partition: int | None = None
) -> None:
    topic = topic_name(settings, "dispatch", tenant)
    records = [(i.schedule_id, encode(i)) if isinstance(i, Occurrence) else ("junk", i) for i in items]
    send(settings, topic, records, partition)


def version(settings: Settings, tenant: str, sid: str, v: int | None, state: str = "ACTIVE") -> None:
    """A VersionRecord for ``sid``, or a tombstone when ``v`` is None."""
    value = None if v is None else encode(
        VersionRecord(schedule_id=sid, tenant=tenant, version=v, state=state, updated_at_ms=NOW_MS)  # type: ignore[arg-type]
    )
    send(settings, topic_name(settings, "versions", tenant), [(sid, value)])


def committed(settings: Settings, tenant: str, partition: int) -> int:
    """The worker group's committed offset of a dispatch partition (negative: none)."""
    c = consumer(settings.kafka(), f"{settings.namespace}.tenant.{tenant}.worker")
    try:
        tp = TopicPartition(topic_name(settings, "dispatch", tenant), partition)
        return int(c.committed([tp], 10)[0].offset)
    finally:
        c.close()


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


class Reports:
    """Attempt reports of one tenant on its ``ksched.commands.<tenant>``, read from the beginning."""

    def __init__(self, settings: Settings, tenant: str) -> None:
        self.tenant = tenant
        self.all: list[AttemptReport] = []
        self._c = consumer(settings.kafka())
        topic = topic_name(settings, "commands", tenant)
        self._c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(settings.partitions)])

    def poll(self, seconds: float = 0.0) -> list[AttemptReport]:
        end = time.monotonic() + seconds
        while True:
            for m in self._c.consume(500, 0.05):
                if m.error() is None:
                    rec = decode_command_topic(m.value() or b"")
                    reps = rec.reports if isinstance(rec, AttemptReports) else (rec,)
                    self.all += [r for r in reps if isinstance(r, AttemptReport) and r.tenant == self.tenant]
            if time.monotonic() >= end:
                return self.all

    def until(self, cond: Callable[[list[AttemptReport]], bool], timeout: float = 30) -> list[AttemptReport]:
        deadline = time.monotonic() + timeout
        while not cond(self.poll()):
            assert time.monotonic() < deadline, f"reports after {timeout}s: {self.summary()}"
        return self.all

    def of(self, sid: str, kind: str | None = None) -> list[AttemptReport]:
        return [r for r in self.all if r.schedule_id == sid and (kind is None or r.kind == kind)]

    def finals(self) -> dict[str, AttemptReport]:
        return {r.schedule_id: r for r in self.all if r.kind in ("SUCCEEDED", "FAILED")}

    def summary(self) -> list[tuple[str, str, str | None]]:
        return [(r.schedule_id, r.kind, r.error_class) for r in self.all]

    def close(self) -> None:
        self._c.close()


@contextmanager
def reports(settings: Settings, tenant: str) -> Iterator[Reports]:
    r = Reports(settings, tenant)
    try:
        yield r
    finally:
        r.close()


@contextmanager
def running(
    settings: Settings, tenant: str, handlers: Mapping[str, Handler], **kw: Any
) -> Iterator[Worker]:
    """A worker running on a thread; stopped (and checked to have stopped cleanly) on exit."""
    w = Worker(settings, tenant=tenant, handlers=handlers, **kw)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            w.run()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=target, name=f"worker-{tenant}", daemon=True)
    t.start()
    wait_for(lambda: w.wait_ready(0.05) or not t.is_alive(), 30, "the worker to be ready")
    assert not errors, errors
    try:
        yield w
    finally:
        w.stop()
        t.join(60)
        assert not t.is_alive(), "the worker did not stop"
        assert not errors, errors


class Concurrency:
    """A handler holding each occurrence ``hold_s`` seconds: ``peak`` is the most handlers it saw
    running at once (across every worker that calls it), ``ran`` the occurrence ids it finished."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.peak = 0
        self.ran: list[str] = []
        self._now = 0
        self._lock = threading.Lock()

    def __call__(self, ctx: Any) -> None:
        with self._lock:
            self._now += 1
            self.peak = max(self.peak, self._now)
        time.sleep(self.hold_s)
        with self._lock:
            self._now -= 1
            self.ran.append(ctx.occurrence_id)
