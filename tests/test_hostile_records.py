"""One record must never stop a shard (issue 9): each hostile record is published among valid
traffic against a real processor; the valid traffic is still served on time and every bad
command gets its answer (bad reports are ignored and counted)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from test_attempts_e2e import Running
from test_processor_failover import isolated, with_topics

from scheduler.client import SchedulerClient
from scheduler.domain import ScheduleSpec, occurrence_id, schedule_id_for
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.runtime import Processor
from scheduler.records import (
    AttemptReport,
    CommandResult,
    Occurrence,
    ScheduleCommand,
    ScheduleSpecRecord,
    decode,
    encode,
)
from scheduler.settings import Settings
from scheduler.tenants import Tenant
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka
__all__ = ["isolated"]  # a fixture, used by name
TENANT = "hv"


def once(ts: int, **kw: object) -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]


@pytest.fixture
def stack(isolated: Settings) -> Iterator[tuple[Settings, ProcessorMetrics]]:
    """A namespace of its own: the garbage this test publishes must not reach other tests' readers."""
    tenants = with_topics(isolated, Tenant(name=TENANT))
    metrics = ProcessorMetrics()
    proc = Running(Processor(isolated, tenants=tenants, metrics=metrics))
    with SchedulerClient(isolated, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create(TENANT, once(int(time.time()) + 86_400), key="warm-up")
    yield isolated, metrics
    proc.stop()


def command(spec: ScheduleSpecRecord | None, key: str | None, kind: str = "CREATE",
            sid: str | None = "derive") -> ScheduleCommand:
    return ScheduleCommand(
        request_id=uuid.uuid4().hex, tenant=TENANT,
        schedule_id=schedule_id_for(TENANT, key) if sid == "derive" and key else sid,
        idempotency_key=key, kind=kind, spec=spec, issued_at_ms=int(time.time() * 1000),  # type: ignore[arg-type]
    )


def send(p: Producer, settings: Settings, value: bytes, key: bytes | None, partition: int = -1) -> None:
    p.produce(topic_name(settings, "commands", TENANT), value, key, partition=partition)
    p.flush(30)


def send_bad_reports(p: Producer, settings: Settings, valid: list[str], due: int) -> None:
    """Attempt reports the shard must ignore (and count): a foreign tenant's, one for no fire time,
    one on another shard's partition, one without a schedule id."""
    for tenant, sf in (("nobody", due), (TENANT, due + 7)):  # another tenant's name; no fire time
        report = AttemptReport(
            occurrence_id=occurrence_id(valid[0], 1, sf), schedule_id=valid[0], tenant=tenant,
            version=1, scheduled_for_ms=sf * 1000, attempt=1, token="t",
            kind="FAILED" if tenant == "nobody" else "STARTED", retryable=True,
            error_class="X", error_message="m", worker_id="w",
            reported_at_ms=int(time.time() * 1000),
        )
        send(p, settings, encode(report), valid[0].encode())
    home = partition_for(valid[1].encode(), settings.partitions)
    astray = AttemptReport(  # a real occurrence, reported on another shard's partition
        occurrence_id=occurrence_id(valid[1], 1, due), schedule_id=valid[1], tenant=TENANT,
        version=1, scheduled_for_ms=due * 1000, attempt=1, token="t", kind="SUCCEEDED",
        worker_id="w", reported_at_ms=int(time.time() * 1000),
    )
    send(p, settings, encode(astray), valid[1].encode(), (home + 1) % settings.partitions)
    nameless = replace(astray, schedule_id="", kind="FAILED", retryable=True)  # no schedule
    send(p, settings, encode(nameless), b"nameless-report")


def read_answers(results: Consumer, wanted: set[str]) -> tuple[dict[str, CommandResult], list[CommandResult]]:
    """Command results by request id, and the UNDECODABLE ones, until every ``wanted`` request id
    and two UNDECODABLE answers are in (or 60 s)."""
    answers: dict[str, CommandResult] = {}
    undecodable: list[CommandResult] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not wanted <= set(answers) or len(undecodable) < 2):
        for m in results.consume(500, 0.2):
            if m.error() is None and m.value():
                r = decode(m.value() or b"", CommandResult)
                answers[r.request_id] = r
                if r.code == "UNDECODABLE":
                    undecodable.append(r)
    return answers, undecodable


def read_dispatched(settings: Settings, expected: set[str], tenant: str = TENANT) -> dict[str, Occurrence]:
    """The tenant's dispatched occurrences by id, read until every ``expected`` one is in (or 60 s)."""
    c = consumer(settings.kafka())
    t_dispatch = topic_name(settings, "dispatch", tenant)
    c.assign([TopicPartition(t_dispatch, q, 0) for q in range(settings.partitions)])
    got: dict[str, Occurrence] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not expected <= set(got):
        for m in c.consume(500, 0.2):
            if m.error() is None and m.value():
                o = decode(m.value() or b"", Occurrence)
                got[o.occurrence_id] = o
    c.close()
    return got


def test_hostile_records_are_answered_and_valid_traffic_stays_on_time(
    stack: tuple[Settings, ProcessorMetrics],
) -> None:
    settings, metrics = stack
    good = ScheduleSpecRecord.from_domain(once(int(time.time()) + 3600))
    hostile: dict[str, ScheduleCommand] = {
        "far future at": command(replace(good, at="9999-12-31T23:59", timezone="America/Los_Angeles"), "h1"),
        "start 2**62": command(replace(good, start_ms=2**62), "h2"),
        "huge payload": command(replace(good, payload=b"x" * 850_000), "h4"),
        "derived id mismatch": command(good, "h5", sid="0" * 32),
        "another tenant": replace(command(good, "h6"), tenant="nobody"),
        "update without id": command(good, None, kind="UPDATE", sid=None),
        "1 MB request id": replace(command(good, "h7"), request_id="r" * 300),
    }
    wrong_sid = schedule_id_for(TENANT, "h8")
    wrong_partition = (partition_for(wrong_sid.encode(), settings.partitions) + 1) % settings.partitions
    wrong = command(good, "h8")
    keyless = command(good, None, sid=None)
    p = producer(settings.kafka())
    results = consumer(settings.kafka())
    t_results = topic_name(settings, "results", TENANT)
    results.assign([TopicPartition(t_results, q, 0) for q in range(settings.partitions)])
    due = int(time.time()) + 10
    with SchedulerClient(settings, timeout_s=60) as client:
        valid = []
        for i in range(10):
            cmd = command(ScheduleSpecRecord.from_domain(once(due)), f"v{i}")
            client.publish(cmd, wait=False)
            valid.append(cmd.schedule_id or "")
            if i == 2:
                send(p, settings, b"\x00\x01 not avro at all", b"garbage-key")
                for cmd in hostile.values():
                    send(p, settings, encode(cmd), (cmd.schedule_id or "").encode())
                send(p, settings, encode(wrong), wrong_sid.encode(), wrong_partition)
                send(p, settings, encode(keyless), None)
                send(p, settings, b"\xc3\x01" + b"z" * 950_000, b"oversize-key")
                send_bad_reports(p, settings, valid, due)
        assert time.time() < due, "publishing took too long for the test's premise"
        wanted = {c.request_id[:256] for c in (*hostile.values(), wrong, keyless)}
        answers, undecodable = read_answers(results, wanted)
        results.close()

    def code(name: str) -> str | None:
        return answers[hostile[name].request_id[:256]].code

    assert code("far future at") == "INVALID_SPEC"
    assert code("start 2**62") == "INVALID_SPEC"
    assert code("huge payload") == "INVALID_SPEC"
    assert code("derived id mismatch") == "INVALID_COMMAND"
    assert code("another tenant") == "TENANT_MISMATCH"  # the topic is its tenant
    assert code("update without id") == "INVALID_COMMAND"
    assert code("1 MB request id") == "INVALID_COMMAND"
    assert answers[wrong.request_id].code == "WRONG_PARTITION"
    assert answers[keyless.request_id].status == "ACCEPTED"
    keys = {r.schedule_id for r in undecodable}
    assert {"garbage-key", "oversize-key"} <= keys, undecodable
    assert all("offset" in (r.reason or "") for r in undecodable)
    # the valid traffic was served on time
    expected = {occurrence_id(sid, 1, due) for sid in valid}
    got = read_dispatched(settings, expected)
    assert expected <= set(got)
    lags = [got[o].enqueued_at_ms - got[o].scheduled_for_ms for o in expected]
    assert max(lags) < 3000, lags
    assert metrics.ignored("FAILED") >= 1
    assert metrics.ignored("STARTED") >= 1
    assert metrics.ignored("SUCCEEDED") >= 1  # the wrong partition
    assert metrics.ignored("FAILED") >= 2  # with the nameless one
