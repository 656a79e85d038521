"""The topic a command or report arrives on is its tenant (issue 11, item 4): a record published
on alpha's ``commands.alpha`` cannot change, answer to or run anything of bravo's, whatever its
tenant field says; bravo's schedules fire on time throughout. A real processor, the real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from test_attempts_e2e import Running
from test_hostile_records import once, read_dispatched
from test_processor_failover import isolated, with_topics

from scheduler.client import SchedulerClient
from scheduler.domain import occurrence_id
from scheduler.kafka.clients import consumer, producer
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.runtime import Processor
from scheduler.records import AttemptReport, CommandResult, ScheduleCommand, decode, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka
__all__ = ["isolated"]  # a fixture, used by name


@pytest.fixture
def two(isolated: Settings) -> Iterator[tuple[Settings, ProcessorMetrics]]:
    tenants = with_topics(isolated, Tenant(name="alpha"), Tenant(name="bravo"))
    metrics = ProcessorMetrics()
    proc = Running(Processor(isolated, tenants=tenants, metrics=metrics))
    with SchedulerClient(isolated, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create("alpha", once(int(time.time()) + 86_400), key="warm-up")
    yield isolated, metrics
    proc.stop()


def answers(settings: Settings, tenant: str, wanted: set[str], timeout_s: float) -> dict[str, CommandResult]:
    """The answers on ``tenant``'s results topic to the ``wanted`` request ids (read from the start)."""
    c = consumer(settings.kafka())
    t = topic_name(settings, "results", tenant)
    c.assign([TopicPartition(t, p, 0) for p in range(settings.partitions)])
    got: dict[str, CommandResult] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while not wanted <= set(got) and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if m.error() is None and m.value():
                    r = decode(m.value() or b"", CommandResult)
                    if r.request_id in wanted:
                        got[r.request_id] = r
    finally:
        c.close()
    return got


def test_records_on_alphas_topic_change_nothing_of_bravos(two: tuple[Settings, ProcessorMetrics]) -> None:
    settings, metrics = two
    due = int(time.time()) + 8
    with SchedulerClient(settings, timeout_s=60) as client:
        bravo = client.create("bravo", once(due, payload=b"bravo's"), key="b1").schedule_id
    now_ms = int(time.time() * 1000)
    cancel_as_bravo = ScheduleCommand(  # names bravo: its topic says alpha
        request_id=uuid.uuid4().hex, tenant="bravo", schedule_id=bravo, kind="CANCEL", issued_at_ms=now_ms
    )
    cancel_as_alpha = ScheduleCommand(  # names alpha, and bravo's schedule
        request_id=uuid.uuid4().hex, tenant="alpha", schedule_id=bravo, kind="CANCEL", issued_at_ms=now_ms
    )
    forged = AttemptReport(  # bravo's occurrence declared failed for good, from alpha's topic
        occurrence_id=occurrence_id(bravo, 1, due), schedule_id=bravo, tenant="bravo", version=1,
        scheduled_for_ms=due * 1000, attempt=1, token="t", kind="FAILED", retryable=False,
        error_class="X", error_message="forged", worker_id="alpha", reported_at_ms=now_ms,
    )
    ignored_before = metrics.ignored("FAILED")
    p = producer(settings.kafka())
    t_alpha = topic_name(settings, "commands", "alpha")
    for value in (encode(cancel_as_bravo), encode(cancel_as_alpha), encode(forged)):
        p.produce(t_alpha, value, bravo.encode())
    assert p.flush(30) == 0

    sent = {cancel_as_bravo.request_id, cancel_as_alpha.request_id}
    got = answers(settings, "alpha", sent, 30)
    assert got[cancel_as_bravo.request_id].code == "TENANT_MISMATCH"
    assert "commands topic of tenant 'alpha'" in (got[cancel_as_bravo.request_id].reason or "")
    assert got[cancel_as_alpha.request_id].code == "NOT_FOUND"  # bravo's schedule is not alpha's
    assert answers(settings, "bravo", sent, 2) == {}  # nothing answered on bravo's topic

    # bravo's schedule fires on time, once, as bravo's
    oid = occurrence_id(bravo, 1, due)
    fired = read_dispatched(settings, {oid}, tenant="bravo")
    assert (fired[oid].enqueued_at_ms - fired[oid].scheduled_for_ms) < 3000
    assert fired[oid].payload == b"bravo's"
    assert metrics.ignored("FAILED") >= ignored_before + 1
    with SchedulerClient(settings, timeout_s=30) as client:
        current = client.get("bravo", bravo)
    assert current is not None and current.state != "CANCELED"
