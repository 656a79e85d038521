"""The issue's attacks (issue 11), replayed with only tenant alpha's credentials and bravo's name,
against the real authenticated broker and a running processor (as its own principal): each is
refused by the broker or by the processor, and bravo's schedules fire on time, once, on bravo's
dispatch topic throughout."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from namespaces import own_namespace
from test_access_e2e import _logs_in
from test_attempts_e2e import Running
from test_hostile_records import once

from scheduler.cli import main
from scheduler.client import AccessDenied, SchedulerClient
from scheduler.domain import occurrence_id, schedule_id_for
from scheduler.kafka.clients import consumer, consumer_config, producer
from scheduler.principals import as_admin, as_tenant
from scheduler.processor.runtime import Processor
from scheduler.records import (
    AttemptReport,
    CommandResult,
    DlqEntry,
    Occurrence,
    ScheduleCommand,
    ScheduleSpecRecord,
    decode,
    encode,
)
from scheduler.settings import Settings
from scheduler.topology import topic_name

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def attacked(
    kafka_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, Processor]]:
    """A namespace with tenants alpha and bravo (principals, ACLs, topics) and a processor that
    follows the registry as the processor principal."""
    tenants_file = tmp_path_factory.mktemp("atk") / "tenants.toml"
    with own_namespace(kafka_settings, "atk", tenants_file, tick_interval_ms=50) as settings:
        assert main(["topics", "apply"]) == 0
        for t in ("alpha", "bravo"):
            assert main(["tenants", "add", t]) == 0
        proc = Processor(settings)
        running = Running(proc)
        try:
            with SchedulerClient(settings, tenant="bravo", timeout_s=60) as c:  # answered: shards owned
                c.create("bravo", once(int(time.time()) + 86_400), key="warm-up")
            yield settings, proc
        finally:
            running.stop()


def _read_all(settings: Settings, topic: str, cls: type, settle_s: float = 1.0) -> list[object]:
    """Every record of ``topic`` (as admin), read until nothing new for ``settle_s``."""
    c = consumer(as_admin(settings))
    c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    out: list[object] = []
    quiet_until = time.monotonic() + settle_s
    try:
        while time.monotonic() < quiet_until:
            for m in c.consume(500, 0.2):
                if m.error() is None and m.value():
                    out.append(decode(m.value() or b"", cls))
                    quiet_until = time.monotonic() + settle_s
    finally:
        c.close()
    return out


def _answers(settings: Settings, tenant: str, wanted: set[str], timeout_s: float = 30) -> dict[str, str]:
    """The result codes on ``tenant``'s results topic (read as admin) of the ``wanted`` request ids."""
    got: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(got) and time.monotonic() < deadline:
        for r in _read_all(settings, topic_name(settings, "results", tenant), CommandResult, 0.5):
            assert isinstance(r, CommandResult)
            if r.request_id in wanted:
                got[r.request_id] = r.code or r.status
    return got


def _delivery_error(p: Producer, topic: str, value: bytes, key: bytes) -> int | None:
    """The error of producing one record: from its delivery report, or raised by ``produce`` itself
    when librdkafka already knows the topic is refused (a metadata answer it cached: seen in CI)."""
    seen: list[KafkaError | None] = []
    try:
        p.produce(topic, value, key, on_delivery=lambda err, _m: seen.append(err))
    except KafkaException as exc:
        return int(exc.args[0].code())
    p.flush(15)
    assert seen, "no delivery report"
    return None if seen[0] is None else int(seen[0].code())


def test_alphas_attacks_on_bravo_are_refused_and_bravo_fires_on_time(
    attacked: tuple[Settings, Processor],
) -> None:
    settings, proc = attacked
    ns, alpha = settings.namespace, as_tenant(settings, "alpha")
    due = int(time.time()) + 12
    with SchedulerClient(settings, tenant="bravo", timeout_s=60) as bravo_client:
        bravo_ids = [bravo_client.create("bravo", once(due + i, payload=b"bravo's"), key=f"b{i}").schedule_id
                     for i in range(3)]
    target = bravo_ids[0]
    now_ms = int(time.time() * 1000)
    rogue = producer(alpha)  # alpha's own principal, outside the SDK's checks

    # 1. read bravo's schedules (with payloads), results and dispatch: the broker refuses.
    with SchedulerClient(settings, tenant="alpha", timeout_s=10) as alpha_client:
        with pytest.raises(AccessDenied):
            alpha_client.get("bravo", target)
        with pytest.raises(AccessDenied):  # the SDK refuses to send bravo's commands as alpha
            alpha_client.cancel("bravo", target)
    for topic in (f"{ns}.schedules", f"{ns}.schedules.bravo", f"{ns}.results.bravo", f"{ns}.dispatch.bravo"):
        c = Consumer(consumer_config(alpha))
        try:
            meta = c.list_topics(topic, timeout=10).topics[topic]
            assert meta.error is not None, topic
            assert meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
        finally:
            c.close()

    # 2. squat bravo's idempotency key: a CREATE naming bravo on alpha's topic is refused, and one
    #    naming alpha derives alpha's own id, so bravo's create of that key is still bravo's.
    spec = ScheduleSpecRecord.from_domain(once(due + 3600))
    squat_as_bravo = ScheduleCommand(
        request_id=uuid.uuid4().hex, tenant="bravo", schedule_id=schedule_id_for("bravo", "k-squat"),
        idempotency_key="k-squat", kind="CREATE", spec=spec, issued_at_ms=now_ms,
    )
    # 3. cancel bravo's schedule: naming bravo (TENANT_MISMATCH), naming itself (not its schedule);
    # 4. take bravo's schedule id as alpha's (a create of an id that is not alpha's).
    cancel_as_bravo = ScheduleCommand(request_id=uuid.uuid4().hex, tenant="bravo", schedule_id=target,
                                      kind="CANCEL", issued_at_ms=now_ms)
    cancel_as_alpha = ScheduleCommand(request_id=uuid.uuid4().hex, tenant="alpha", schedule_id=target,
                                      kind="CANCEL", issued_at_ms=now_ms)
    create_over = ScheduleCommand(request_id=uuid.uuid4().hex, tenant="alpha", schedule_id=target,
                                  kind="CREATE", spec=spec, issued_at_ms=now_ms)
    # 5. forge a final FAILED report of bravo's occurrence (it would go DEAD, its DLQ entry with
    #    bravo's payload into a DLQ), naming bravo and naming alpha.
    forged = [
        AttemptReport(occurrence_id=occurrence_id(target, 1, due), schedule_id=target, tenant=tenant,
                      version=1, scheduled_for_ms=due * 1000, attempt=1, token="t", kind="FAILED",
                      retryable=False, error_class="X", error_message="forged", worker_id="alpha",
                      reported_at_ms=now_ms)
        for tenant in ("bravo", "alpha")
    ]
    for cmd in (squat_as_bravo, cancel_as_bravo, cancel_as_alpha, create_over, *forged):
        key = cmd.schedule_id.encode() if cmd.schedule_id else b""
        assert _delivery_error(rogue, f"{ns}.commands.alpha", encode(cmd), key) is None
    # 6. inject an occurrence into bravo's dispatch topic; write bravo's commands topic.
    fake = Occurrence(
        occurrence_id=uuid.uuid4().hex, schedule_id=target, tenant="bravo", version=1, handler="h",
        payload=b"alpha's", scheduled_for_ms=now_ms, available_at_ms=now_ms, attempt=1, lane="STRICT",
        enqueued_at_ms=now_ms,
    )
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _delivery_error(rogue, f"{ns}.dispatch.bravo", encode(fake), target.encode()) == denied
    assert _delivery_error(rogue, f"{ns}.commands.bravo", encode(cancel_as_bravo), target.encode()) == denied
    # 7. run a worker as bravo (bravo's group) with alpha's credentials.
    w = Consumer(consumer_config(alpha, f"{ns}.tenant.bravo.worker", **{"session.timeout.ms": 6000}))
    try:
        w.subscribe([f"{ns}.dispatch.alpha"])
        errors = [m.error().code() for m in (w.poll(0.5) for _ in range(40)) if m is not None and m.error()]
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors
        assert not w.assignment()
    finally:
        w.close()

    codes = _answers(settings, "alpha", {c.request_id for c in (squat_as_bravo, cancel_as_bravo,
                                                                   cancel_as_alpha, create_over)})
    assert codes[squat_as_bravo.request_id] == "TENANT_MISMATCH"
    assert codes[cancel_as_bravo.request_id] == "TENANT_MISMATCH"
    assert codes[cancel_as_alpha.request_id] == "NOT_FOUND"
    assert codes[create_over.request_id] != "ACCEPTED"
    assert _answers(settings, "bravo", {squat_as_bravo.request_id, cancel_as_bravo.request_id}, 2) == {}
    with SchedulerClient(settings, tenant="bravo", timeout_s=60) as bravo_client:
        mine = bravo_client.create("bravo", once(due + 3600), key="k-squat")
        assert mine.schedule_id == schedule_id_for("bravo", "k-squat") and mine.version == 1
        assert all((s := bravo_client.get("bravo", sid)) is not None and s.state != "CANCELED"
                   for sid in bravo_ids)

    # Bravo's occurrences: each on bravo's dispatch topic once, on time, with bravo's payload;
    # none on alpha's; no DLQ entry anywhere.
    expected = {occurrence_id(sid, 1, due + i) for i, sid in enumerate(bravo_ids)}
    deadline = time.monotonic() + 60
    while True:
        fired = [o for o in _read_all(settings, f"{ns}.dispatch.bravo", Occurrence)
                 if isinstance(o, Occurrence) and o.occurrence_id in expected]
        if {o.occurrence_id for o in fired} >= expected or time.monotonic() > deadline:
            break
    assert sorted(o.occurrence_id for o in fired) == sorted(expected)  # each once
    assert all(o.payload == b"bravo's" and o.enqueued_at_ms - o.scheduled_for_ms < 3000 for o in fired)
    assert not [o for o in _read_all(settings, f"{ns}.dispatch.alpha", Occurrence, 0.5)
                if isinstance(o, Occurrence) and o.schedule_id in bravo_ids]
    for t in ("alpha", "bravo"):
        assert _read_all(settings, f"{ns}.dlq.{t}", DlqEntry, 0.5) == []
    assert proc.metrics.ignored("FAILED") >= 2


def test_rotating_credentials_loses_no_occurrence(attacked: tuple[Settings, Processor]) -> None:
    """bravo's password is rotated while its occurrences fire and its worker runs them: the old
    password stops working, a worker restarted with the new one goes on, and every occurrence
    runs exactly once (nothing lost, nothing doubled)."""
    from scheduler.worker import Context, Worker

    settings, _ = attacked
    ran: list[str] = []

    def handler(ctx: Context) -> None:
        ran.append(ctx.occurrence_id)

    def worker() -> Running:
        w = Worker(settings, tenant="bravo", handlers={"h": handler}, grace_s=1, heartbeat_s=0.5)
        r = Running(w)
        assert w.wait_ready(60)
        return r

    due = int(time.time()) + 8
    with SchedulerClient(settings, tenant="bravo", timeout_s=60) as c:
        ids = [c.create("bravo", once(due + 3 * i), key=f"rot-{i}").schedule_id for i in range(5)]
    expected = {occurrence_id(sid, 1, due + 3 * i) for i, sid in enumerate(ids)}
    old = as_tenant(settings, "bravo")
    first = worker()
    try:
        while len(set(ran) & expected) < 2:  # the rotation lands mid-stream
            assert time.time() < due + 30, f"ran only {ran}"
            time.sleep(0.2)
        assert main(["tenants", "rotate-credentials", "bravo"]) == 0
    finally:
        first.stop()
    new = as_tenant(settings, "bravo")
    assert new.security["sasl.password"] != old.security["sasl.password"]
    second = worker()  # reads the new password from the credentials file
    try:
        deadline = time.monotonic() + 60
        while not expected <= set(ran) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        second.stop()
    assert sorted(o for o in ran if o in expected) == sorted(expected)  # each once
    assert not _logs_in(old) and _logs_in(new)  # the broker refuses the old password
