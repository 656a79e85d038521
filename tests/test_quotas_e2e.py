"""Cluster-wide quotas against the real broker (issue 11, item 5): a tenant's trigger rate, catch-up
rate and retry budget hold across shards and processors within ±20 % over 10 s, a lowered quota is
in force within 10 s, and ``max_running`` holds across worker processes (docs/schedules.md,
"Quotas are cluster-wide")."""

from __future__ import annotations

import dataclasses
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from namespaces import drop_namespace
from test_attempts_e2e import Running
from test_processor_e2e import once_at
from test_processor_failover import InProcess, OffsetClock, TopicReader, with_topics
from test_worker_support import Concurrency, running

from scheduler.access_admin import ensure_services
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.partitioner import partition_for
from scheduler.processor.runtime import Processor
from scheduler.records import CommandResult, Occurrence, ScheduleCommand, ScheduleSpecRecord, decode, encode
from scheduler.settings import Settings
from scheduler.tenant_admin import current, put
from scheduler.tenants import Tenant
from scheduler.topology import topic_name
from scheduler.worker import Context

pytestmark = pytest.mark.kafka
WINDOW_S = 10
TOLERANCE = 0.2


@pytest.fixture
def space(kafka_settings: Settings) -> Iterator[Settings]:
    """A namespace of its own: no other test's reports or schedules in the shares."""
    settings = kafka_settings.replace(
        namespace=f"{kafka_settings.namespace}-q{secrets.token_hex(2)}", tick_interval_ms=50
    )
    ensure_services(settings)  # its processors run as its own processor principal
    yield settings
    drop_namespace(settings)


def ids_on(shards: set[int], n: int, partitions: int) -> list[str]:
    """``n`` schedule ids whose partition is one of ``shards``, in turn."""
    out: list[str] = []
    order = sorted(shards)
    while len(out) < n:
        sid = uuid.uuid4().hex
        if partition_for(sid.encode(), partitions) == order[len(out) % len(order)]:
            out.append(sid)
    return out


def create(
    settings: Settings, tenant: str, sids: list[str], at: int, timeout_s: float = 60, **spec_fields: Any
) -> None:
    """One CREATE of a one-time schedule at ``at`` (with ``spec_fields``) per id, straight to the
    commands topic; wait until every one is accepted."""
    t_results = topic_name(settings, "results", tenant)
    results = consumer(settings.kafka())
    results.assign([
        TopicPartition(t_results, p, results.get_watermark_offsets(TopicPartition(t_results, p), 10)[1])
        for p in range(settings.partitions)
    ])
    prod = producer(settings.kafka())
    spec = ScheduleSpecRecord.from_domain(dataclasses.replace(once_at(at), **spec_fields))
    for sid in sids:
        cmd = ScheduleCommand(request_id=sid, tenant=tenant, schedule_id=sid, kind="CREATE", spec=spec,
                              issued_at_ms=int(time.time() * 1000))
        prod.produce(topic_name(settings, "commands", tenant), encode(cmd), sid.encode())
        prod.poll(0)
    assert prod.flush(30) == 0
    todo = set(sids)
    deadline = time.monotonic() + timeout_s
    try:
        while todo and time.monotonic() < deadline:
            for m in results.consume(5000, 0.2):
                if m.error() is None:
                    r = decode(m.value() or b"", CommandResult)
                    assert r.status == "ACCEPTED" or r.request_id not in todo, r
                    todo.discard(r.request_id)
    finally:
        results.close()
    assert not todo, f"{len(todo)} creates unanswered"


def dispatch_times(settings: Settings, tenant: str, until: float, min_attempt: int = 1) -> list[float]:
    """The broker's append times (s) of the tenant's dispatch records of attempt ``min_attempt`` or
    later, read until ``until``."""
    reader = TopicReader(settings, [topic_name(settings, "dispatch", tenant)], Occurrence)
    try:
        while time.time() < until:
            reader.poll()
        return sorted(s.append_ms / 1000 for s in reader.seen if s.value.attempt >= min_attempt)
    finally:
        reader.close()


def wait_split(a: InProcess, b: InProcess) -> None:
    """Until the two processors own the four shards between them, then 2 s more (no rebalance
    during the measure)."""
    deadline = time.monotonic() + 90
    while not (a.proc.owned and b.proc.owned and len(a.proc.owned) + len(b.proc.owned) == 4):
        assert time.monotonic() < deadline, (sorted(a.proc.owned), sorted(b.proc.owned))
        time.sleep(0.2)
    time.sleep(2)


def in_window(times: list[float], start: float, seconds: float = WINDOW_S) -> int:
    return sum(1 for t in times if start <= t < start + seconds)


def assert_rate(count: int, rate: float, seconds: float, what: str) -> None:
    want = rate * seconds
    print(f"{what}: {count} emitted in {seconds:g} s, quota {want:g} ({count / want - 1:+.1%})")
    assert abs(count - want) <= TOLERANCE * want, f"{what}: {count} emitted, want {want:g} ± 20 %"


@pytest.mark.parametrize("quota", ["trigger_rate_per_s", "catch_up_rate_per_s"])
def test_a_rate_holds_when_the_due_work_sits_on_one_shard_of_four(space: Settings, quota: str) -> None:
    rate = 40
    limits = {"trigger_rate_per_s": 0, "catch_up_rate_per_s": 0, quota: rate}
    tenants = with_topics(space, Tenant(name="qa", max_schedules=100_000, **limits))
    proc = InProcess(space, tenants, OffsetClock())
    try:
        proc.wait_owning(4)
        # A one-time schedule already due when it is created is late work: the catch-up lane.
        at = int(time.time()) + (6 if quota == "trigger_rate_per_s" else -1)
        create(space, "qa", ids_on({0}, rate * 18, space.partitions), at)
        times = dispatch_times(space, "qa", max(at, time.time()) + 16)
    finally:
        proc.stop()
    assert times and times[0] >= at - 1
    # From the second second on (the first one spends the bucket's banked second).
    assert_rate(in_window(times, times[0] + 2), rate, WINDOW_S, f"{quota}: one shard of four")


def test_a_rate_holds_across_two_processors(space: Settings) -> None:
    rate = 40
    tenants = with_topics(space, Tenant(name="qb", trigger_rate_per_s=rate, max_schedules=100_000))
    clock = OffsetClock()
    a = InProcess(space, tenants, clock)
    b = InProcess(space, tenants, clock)
    try:
        wait_split(a, b)
        shards = {min(a.proc.owned), min(b.proc.owned)}  # one shard of each processor
        due = int(time.time()) + 6
        create(space, "qb", ids_on(shards, rate * 18, space.partitions), due)
        times = dispatch_times(space, "qb", due + 16)
    finally:
        a.stop()
        b.stop()
    assert_rate(in_window(times, times[0] + 2), rate, WINDOW_S, f"shards {sorted(shards)} on two processors")


def test_the_retry_budget_holds_across_two_processors(space: Settings) -> None:
    """Every first attempt fails at once, so every retry is due within a second of it: the tenant's
    retry budget alone spreads them, split between the shards of two processors."""
    per_s = 20
    tenant = Tenant(name="qr", retry_budget_per_min=per_s * 60, trigger_rate_per_s=0, max_schedules=100_000)
    tenants = with_topics(space, tenant)
    clock = OffsetClock()
    a = InProcess(space, tenants, clock)
    b = InProcess(space, tenants, clock)

    def fail(ctx: Context) -> None:
        raise RuntimeError("always failing: a retry each")

    try:
        wait_split(a, b)
        with running(space, "qr", {"h": fail}, concurrency=16, tenants=tenants, worker_id="wr"):
            due = int(time.time()) + 6
            create(space, "qr", ids_on({0, 1, 2, 3}, per_s * 18, space.partitions), due,
                   retry_max_attempts=2, retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
            times = dispatch_times(space, "qr", due + 20, min_attempt=2)
    finally:
        a.stop()
        b.stop()
    assert times, "no retry was dispatched"
    assert_rate(in_window(times, times[0] + 2), per_s, WINDOW_S, "retries over four shards on two processors")


def test_a_rate_lowered_during_a_burst_is_in_force_within_ten_seconds(space: Settings) -> None:
    high, low = 100, 20
    tenant = Tenant(name="qc", trigger_rate_per_s=high, max_schedules=100_000)
    with_topics(space, tenant)
    put(space, current(space), tenant)
    proc = Processor(space, instance_id=f"qc-{secrets.token_hex(3)}")  # follows the registry
    run = Running(proc)
    try:
        deadline = time.monotonic() + 90
        while len(proc.owned) < 4 or "qc" not in proc.tenants:
            assert time.monotonic() < deadline, sorted(proc.owned)
            time.sleep(0.1)
        due = int(time.time()) + 6
        create(space, "qc", ids_on({1}, high * 5 + low * 16, space.partitions), due)
        time.sleep(max(0.0, due + 5 - time.time()))
        lowered_at = time.time()
        put(space, current(space), Tenant(name="qc", trigger_rate_per_s=low, max_schedules=100_000))
        times = dispatch_times(space, "qc", lowered_at + 12)
    finally:
        run.stop()
    assert_rate(in_window(times, lowered_at - 4, 4), high, 4, "before the change")
    # In force within 10 s: the last 8 of the 10 seconds after the change run at the new rate.
    assert_rate(in_window(times, lowered_at + 2, 8), low, 8, "after the change")


def test_max_running_holds_across_two_workers(space: Settings) -> None:
    cap, n = 3, 24
    tenant = Tenant(name="qd", max_running=cap, trigger_rate_per_s=0)
    tenants = with_topics(space, tenant)
    work = Concurrency(hold_s=0.5)
    ran = work.ran
    handlers: dict[str, Any] = {"h": work}
    proc = InProcess(space, tenants, OffsetClock())
    try:
        proc.wait_owning(4)
        with running(space, "qd", handlers, concurrency=cap, tenants=tenants, worker_id="w1"), \
                running(space, "qd", handlers, concurrency=cap, tenants=tenants, worker_id="w2"):
            due = int(time.time()) + 4
            create(space, "qd", ids_on({0, 1, 2, 3}, n, space.partitions), due)
            deadline = time.monotonic() + 60
            while len(ran) < n:
                assert time.monotonic() < deadline, f"{len(ran)} of {n} ran"
                time.sleep(0.1)
    finally:
        proc.stop()
    print(f"max_running {cap}: peak {work.peak} handlers at once over two workers, {len(ran)} ran")
    assert len(set(ran)) == n
    assert work.peak == cap  # reached, never exceeded (each worker alone would allow 3)
