"""Attempt decisions that must survive a handover or a pause: real processors, the real broker.

- fencing across a ``kill -9`` of the processor between an attempt's STARTED and
  its SUCCEEDED: the next owner ignores a late report of an older attempt of the
  same occurrence (attempt numbers of retried occurrences are persisted);
- an occurrence dispatched before a pause and consumed after the resume is not
  run: the worker's recheck sees the pause in the version record (CANCELED).

Each test runs in a namespace of its own (``isolated``): one kills processors of
its own group, the other moves its processor's clock to a minute boundary.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.client import SchedulerClient
from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.kafka.clients import producer
from scheduler.records import AttemptReport, Occurrence, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker import Worker
from tests.test_attempts_e2e import Events, Running
from tests.test_processor_failover import (
    InProcess,
    OffsetClock,
    Proc,
    TopicReader,
    create_commands,
    isolated,
    once,
    spawn_processor,
    wait_for_assignment,
    with_topics,
)

pytestmark = pytest.mark.kafka
__all__ = ["isolated"]  # a fixture, used by name

FENCE = Tenant(name="ho-fence", retry_budget_per_min=0)
PAUSE = Tenant(name="ho-pause")


@pytest.fixture
def own_processes(isolated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """``isolated`` with a tenants file of its own, seen by processors spawned as subprocesses."""
    tenants_file = tmp_path / "tenants.toml"
    add_tenant(tenants_file, FENCE)
    with_topics(isolated, FENCE)
    monkeypatch.setenv("KSCHED_NAMESPACE", isolated.namespace)
    monkeypatch.setenv("KSCHED_TENANTS_FILE", str(tenants_file))
    yield isolated.replace(tenants_file=tenants_file)


def owns_all(p: Proc) -> Callable[[dict[str, set[int]]], bool]:
    return lambda members: members == {p.client_id: {0, 1, 2, 3}}


def send(settings: Settings, occ: Occurrence, kind: str, attempt: int, token: str, **kw: object) -> None:
    """A worker's report of attempt ``attempt`` of ``occ``, produced and flushed."""
    rep = AttemptReport(
        occurrence_id=occ.occurrence_id, schedule_id=occ.schedule_id, tenant=occ.tenant, version=occ.version,
        scheduled_for_ms=occ.scheduled_for_ms, attempt=attempt, token=token, kind=kind,  # type: ignore[arg-type]
        worker_id="test", reported_at_ms=int(time.time() * 1000), **kw,  # type: ignore[arg-type]
    )
    prod = producer(settings.kafka())
    prod.produce(topic_name(settings, "commands", occ.tenant), encode(rep), occ.schedule_id.encode())
    assert prod.flush(30) == 0


def dispatched(reader: TopicReader, oid: str, attempt: int, timeout_s: float) -> Occurrence:
    reader.read_until(
        lambda seen: any(s.value.occurrence_id == oid and s.value.attempt == attempt for s in seen),
        timeout_s, settle_s=0,
    )
    found = [s.value for s in reader.seen if s.value.occurrence_id == oid and s.value.attempt == attempt]
    assert found, f"attempt {attempt} of {oid} never dispatched"
    return found[0]


def test_a_late_report_of_an_older_attempt_is_fenced_after_a_kill_9_of_the_processor(
    own_processes: Settings, tmp_path: Path
) -> None:
    settings = own_processes
    a = spawn_processor("ho-a", tmp_path)
    reader = TopicReader(settings, [topic_name(settings, "dispatch", FENCE.name)], Occurrence)
    events = Events(settings, FENCE.name)
    b = None
    try:
        wait_for_assignment(settings, owns_all(a), 90, "a owning all")
        at = int(time.time()) + 3
        (sid,) = create_commands(settings, FENCE.name, [once(at, retry_backoff_base_s=1.0,
                                                             retry_backoff_cap_s=1.0)])
        oid = occurrence_id(sid, 1, at)
        # The test is the worker: attempt 1 fails, attempt 2 starts ...
        first = dispatched(reader, oid, 1, 60)
        send(settings, first, "STARTED", 1, "t1")
        send(settings, first, "FAILED", 1, "t1", retryable=True, error_class="Flaky", error_message="again")
        second = dispatched(reader, oid, 2, 60)
        send(settings, second, "STARTED", 2, "t2")
        events.wait(lambda ev: any(e.occurrence_id == oid and e.state == "RETRY_WAIT" for e in ev), 30)
        time.sleep(1.0)  # ... and the owner applies that STARTED (ticks every 50 ms) before it dies
        a.popen.send_signal(signal.SIGKILL)
        assert a.popen.wait(10) == -signal.SIGKILL
        b = spawn_processor("ho-b", tmp_path)
        wait_for_assignment(settings, owns_all(b), 90, "b owning all")
        # The first attempt's worker was only slow: its SUCCEEDED arrives now, then attempt 2's.
        send(settings, first, "SUCCEEDED", 1, "t1")
        send(settings, second, "SUCCEEDED", 2, "t2")
        events.wait(lambda ev: any(e.occurrence_id == oid and e.state == "SUCCEEDED" for e in ev), 60)
        time.sleep(2)  # anything the late report caused has been recorded by now
        events.wait(lambda ev: True, 1)
        assert events.of(oid) == [("RETRY_WAIT", 1), ("SUCCEEDED", 2)], b.log_text()[-3000:]
    finally:
        reader.close()
        events.close()
        a.stop()
        if b is not None:
            b.stop()


def test_an_occurrence_dispatched_before_a_pause_is_not_run_after_the_resume(isolated: Settings) -> None:
    settings = isolated
    registry = with_topics(settings, PAUSE)
    clock = OffsetClock()
    proc = InProcess(settings, registry, clock)
    ran: list[int] = []
    events = Events(settings, PAUSE.name)
    reader = TopicReader(settings, [topic_name(settings, "dispatch", PAUSE.name)], Occurrence)
    w: Running | None = None
    try:
        proc.wait_owning(4)
        real = time.time()
        boundary = (int(real) // 60 + 1) * 60
        if boundary - real < 5:  # too close to create before it
            time.sleep(boundary - real + 0.5)
            real, boundary = time.time(), boundary + 60
        clock.offset = boundary - real - 2  # the processor's next minute starts in 2 s
        spec = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h")
        with SchedulerClient(settings, timeout_s=60) as client:
            sid = client.create(PAUSE.name, spec, key="paused-while-enqueued").schedule_id
            oid = occurrence_id(sid, 1, boundary)
            dispatched(reader, oid, 1, 60)  # on the topic; no worker yet
            client.pause(PAUSE.name, sid)
            client.resume(PAUSE.name, sid)
        worker = Worker(settings, tenant=PAUSE.name, tenants=registry, grace_s=1, heartbeat_s=0.5,
                        handlers={"h": lambda ctx: ran.append(ctx.scheduled_for_ms)})
        w = Running(worker)
        assert worker.wait_ready(60)
        events.wait(lambda ev: any(e.occurrence_id == oid and e.state == "CANCELED" for e in ev), 60)
        (ev,) = [e for e in events.seen if e.occurrence_id == oid]
        assert "paused at" in (ev.reason or ""), ev.reason
        assert boundary * 1000 not in ran
    finally:
        if w is not None:
            w.stop()
        reader.close()
        events.close()
        proc.stop()
