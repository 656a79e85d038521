"""Reports the processor must not apply, and occurrences nobody starts: a real processor, the real broker.

- a FAILED report naming an unregistered tenant, or a tenant other than the
  schedule's, is ignored before anything is written: the valid traffic of its
  shard is still served on time (it used to point a DLQ write at a topic that
  does not exist, and the shard's transactions failed for ever);
- a STARTED report of an occurrence the schedule never had (not a fire time, or
  an id that is not H(schedule_id, version, scheduled_for)) is not tracked, so
  no run is invented when its lease would have expired;
- an overlap-tracked occurrence no worker starts is given up after
  ``start_lease_s``: retried, then DEAD into the DLQ, each with an event.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from dlq_topic import read_dlq

from scheduler.client import SchedulerClient
from scheduler.domain import occurrence_id
from scheduler.kafka.clients import producer
from scheduler.processor.runtime import Processor
from scheduler.records import AttemptReport, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker import Context, Worker
from tests.test_attempts_e2e import Events, Running, once_in

pytestmark = pytest.mark.kafka
TENANT = "ag"
OTHER = "ag-other"  # registered, but owns none of TENANT's schedules


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    for name in (TENANT, OTHER):
        add_tenant(kafka_settings.tenants_file, Tenant(name=name, retry_budget_per_min=0))
    apply_all()
    settings = kafka_settings.replace(lease_s=3, start_lease_s=4, tick_interval_ms=50)
    proc = Running(Processor(settings))
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create(TENANT, once_in(86_400), key="warm-up")
    yield settings
    proc.stop()


def start_worker(settings: Settings, handler: Callable[[Context], object]) -> Running:
    w = Worker(settings, tenant=TENANT, handlers={"h": handler}, grace_s=1, heartbeat_s=0.5)
    r = Running(w)
    assert w.wait_ready(60)
    return r


def send_reports(settings: Settings, reports: list[AttemptReport]) -> None:
    """Produce reports as a worker would: to its tenant's commands topic, keyed by the schedule id."""
    prod = producer(settings.kafka())
    for r in reports:
        prod.produce(topic_name(settings, "commands", r.tenant), encode(r), r.schedule_id.encode())
    assert prod.flush(30) == 0


def report(sid: str, scheduled_for: int, kind: str, **kw: object) -> AttemptReport:
    fields: dict[str, object] = dict(
        occurrence_id=occurrence_id(sid, 1, scheduled_for), schedule_id=sid, tenant=TENANT, version=1,
        scheduled_for_ms=scheduled_for * 1000, attempt=1, token="forged", kind=kind,
        worker_id="not-a-worker", reported_at_ms=int(time.time() * 1000),
    )
    if kind == "FAILED":
        fields.update(retryable=False, error_class="Boom", error_message="forged")
    fields.update(kw)
    return AttemptReport(**fields)  # type: ignore[arg-type]


class Calls:
    """What the handler ran: (occurrence id, scheduled_for, lag in seconds when it started)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, float]] = []
        self.lock = threading.Lock()

    def __call__(self, ctx: Context) -> None:
        with self.lock:
            self.seen.append((ctx.occurrence_id, ctx.scheduled_for_ms // 1000,
                              time.time() - ctx.scheduled_for_ms / 1000))


def test_reports_of_a_foreign_or_unknown_tenant_are_ignored_and_the_shard_stays_on_time(
    stack: Settings,
) -> None:
    calls = Calls()
    events = Events(stack, TENANT)
    w = start_worker(stack, calls)
    try:
        at = int(time.time()) + 6
        with SchedulerClient(stack, timeout_s=60) as client:
            sid = client.create(TENANT, once_in(at - int(time.time())), key=uuid.uuid4().hex).schedule_id
        oid = occurrence_id(sid, 1, at)
        # Before it fires, on its shard: a permanent failure "of" its occurrence from a tenant that
        # is not registered (its DLQ topic does not exist), and one from another registered tenant.
        send_reports(stack, [report(sid, at, "FAILED", tenant="ghost-tenant"),
                             report(sid, at, "FAILED", tenant=OTHER),
                             report(uuid.uuid4().hex, at, "FAILED")])  # a schedule nobody has
        events.wait(lambda ev: any(e.occurrence_id == oid and e.state == "SUCCEEDED" for e in ev), 60)
        assert [(c[0], c[1]) for c in calls.seen] == [(oid, at)]
        assert calls.seen[0][2] < 5.0, f"served {calls.seen[0][2]:.1f}s late"
        assert [e.state for e in events.seen if e.occurrence_id == oid] == ["SUCCEEDED"]
        assert oid not in {d.occurrence_id for d in read_dlq(stack, TENANT)}
    finally:
        w.stop()
        events.close()


def test_a_started_report_of_an_occurrence_the_schedule_never_had_invents_no_run(stack: Settings) -> None:
    calls = Calls()
    events = Events(stack, TENANT)
    w = start_worker(stack, calls)
    try:
        at = int(time.time()) + 3
        with SchedulerClient(stack, timeout_s=60) as client:
            sid = client.create(TENANT, once_in(at - int(time.time())), key=uuid.uuid4().hex).schedule_id
        oid = occurrence_id(sid, 1, at)
        invented = occurrence_id(sid, 1, at + 1)
        send_reports(stack, [report(sid, at + 1, "STARTED"),  # not a fire time of the schedule
                             report(sid, at, "STARTED", occurrence_id=uuid.uuid4().hex)])  # id is not H(...)
        events.wait(lambda ev: any(e.occurrence_id == oid and e.state == "SUCCEEDED" for e in ev), 60)
        time.sleep(stack.lease_s + 4)  # an adopted attempt's lease would have run out and been retried
        events.wait(lambda ev: True, 1)
        assert [(c[0], c[1]) for c in calls.seen] == [(oid, at)]
        assert {e.occurrence_id for e in events.seen if e.schedule_id == sid} == {oid}, [
            (e.state, e.scheduled_for_ms, e.reason) for e in events.seen if e.schedule_id == sid
        ]
        assert invented not in {e.occurrence_id for e in events.seen}
    finally:
        w.stop()
        events.close()


def test_an_occurrence_no_worker_starts_is_retried_then_dead_after_the_start_lease(stack: Settings) -> None:
    events = Events(stack, TENANT)  # no worker runs for this schedule
    try:
        spec = dataclasses.replace(once_in(2), overlap="SKIP_IF_RUNNING", retry_max_attempts=2,
                                   retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
        with SchedulerClient(stack, timeout_s=60) as client:
            sid = client.create(TENANT, spec, key=f"unstarted-{uuid.uuid4()}").schedule_id
        events.wait(lambda ev: any(e.schedule_id == sid and e.state == "DEAD" for e in ev), 60)
        (oid,) = {e.occurrence_id for e in events.seen if e.schedule_id == sid}
        assert events.of(oid) == [("RETRY_WAIT", 1), ("DEAD", 2)]
        assert all("StartLeaseExpired" in (e.reason or "") for e in events.seen if e.occurrence_id == oid)
        dead = [d for d in read_dlq(stack, TENANT) if d.occurrence_id == oid]
        assert [(d.attempts, d.last_error_class) for d in dead] == [(2, "ksched.StartLeaseExpired")]
    finally:
        events.close()
