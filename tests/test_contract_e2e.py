"""Issue 9's contract against the real broker: a past one-time schedule, throttling that delays
but never drops, cluster-wide quotas, the metrics a scrape shows, replayed updates and the purge
of finished schedules."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families
from test_attempts_e2e import Running

from scheduler.client import SchedulerClient, read_schedules
from scheduler.domain import ScheduleSpec, occurrence_id, schedule_id_for
from scheduler.kafka.clients import consumer
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.restore import restore_shards
from scheduler.processor.runtime import Processor
from scheduler.processor.shard import Shard
from scheduler.records import Occurrence, OccurrenceEvent, ScheduleCommand, ScheduleSpecRecord
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant, load_tenants
from scheduler.topology import topic_name
from tests.topic_values import decoded

pytestmark = pytest.mark.kafka
QUOTA = 8  # trigger_rate_per_s of tenant "slow", split over the 4 shards


def once(ts: int, **kw: object) -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]


class Reader:
    """Follows topics from the beginning, read_committed, decoding each value as ``cls`` records."""

    def __init__(self, settings: Settings, topic: str, cls: type) -> None:
        self.c = consumer(settings.kafka())
        self.c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        self.cls = cls
        self.seen: list[tuple[float, object]] = []

    def until(self, pred: object, timeout_s: float) -> list[object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.c.consume(1000, 0.2):
                if m.error() is None and m.value() is not None:
                    self.seen += [(time.time(), x) for x in decoded(m.value() or b"", self.cls)]
            if pred(self.items()):  # type: ignore[operator]
                return self.items()
        raise AssertionError(f"timed out with {len(self.seen)} records")

    def items(self) -> list[object]:
        return [x for _, x in self.seen]

    def close(self) -> None:
        self.c.close()


def create_many(settings: Settings, tenant: str, specs: list[tuple[str, ScheduleSpec]]) -> list[str]:
    """Create keyed schedules without waiting for each answer in turn; returns their ids."""
    cmds = [
        ScheduleCommand(
            request_id=uuid.uuid4().hex, tenant=tenant, schedule_id=schedule_id_for(tenant, key),
            idempotency_key=key, kind="CREATE", spec=ScheduleSpecRecord.from_domain(spec),
            issued_at_ms=int(time.time() * 1000),
        )
        for key, spec in specs
    ]
    with SchedulerClient(settings, timeout_s=60) as client:
        for c in cmds:
            client.publish(c, wait=False)
        for c in cmds:
            assert client.await_result(c.request_id).status == "ACCEPTED"
    return [c.schedule_id or "" for c in cmds]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[tuple[Settings, int]]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name="ct"))
    add_tenant(kafka_settings.tenants_file, Tenant(name="slow", trigger_rate_per_s=QUOTA))
    apply_all()
    settings = kafka_settings.replace(tick_interval_ms=50, finished_retention_s=4)
    metrics = ProcessorMetrics()
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    proc = Running(Processor(settings, tenants=load_tenants(settings.tenants_file), metrics=metrics))
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create("ct", once(int(time.time()) + 86_400), key="warm-up")
    yield settings, port
    proc.stop()
    server.shutdown()


def test_a_past_one_time_from_the_command_line_fires_or_is_missed(
    stack: tuple[Settings, int], capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.cli import main

    settings, _ = stack
    dispatch = Reader(settings, topic_name(settings, "dispatch", "ct"), Occurrence)
    events = Reader(settings, topic_name(settings, "occurrence-events", "ct"), OccurrenceEvent)
    try:
        past = int(time.time()) - 10
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(past))
        base = ["schedule", "create", "--tenant", "ct", "--at", at, "--tz", "UTC", "--handler", "report"]
        assert main([*base, "--key", "past1"]) == 0
        fired = json.loads(capsys.readouterr().out)["schedule_id"]
        old = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(past - 600))
        skip = ["schedule", "create", "--tenant", "ct", "--at", old, "--tz", "UTC", "--handler", "report"]
        assert main([*skip, "--key", "past2", "--misfire", "SKIP"]) == 0
        missed = json.loads(capsys.readouterr().out)["schedule_id"]
        oid = occurrence_id(fired, 1, past)
        got = dispatch.until(lambda xs: any(o.occurrence_id == oid for o in xs), 30)
        occ = next(o for o in got if o.occurrence_id == oid)  # type: ignore[attr-defined]
        assert (occ.scheduled_for_ms, occ.lane) == (past * 1000, "CATCH_UP")
        moid = occurrence_id(missed, 1, past - 600)
        evs = events.until(lambda xs: any(e.occurrence_id == moid for e in xs), 30)
        assert [e.state for e in evs if e.occurrence_id == moid] == ["MISSED"]  # type: ignore[attr-defined]
        assert not any(o.occurrence_id == moid for o in dispatch.items())  # type: ignore[attr-defined]
        assert read_schedules(settings, "ct")[fired].state == "COMPLETED"  # type: ignore[attr-defined]
    finally:
        dispatch.close()
        events.close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_throttled_work_is_delayed_at_the_cluster_wide_rate_never_missed_and_counted_once(
    stack: tuple[Settings, int],
) -> None:
    settings, port = stack
    n = 120  # 15 s of work at 8/s
    dispatch = Reader(settings, topic_name(settings, "dispatch", "slow"), Occurrence)
    events = Reader(settings, topic_name(settings, "occurrence-events", "slow"), OccurrenceEvent)
    try:
        due = int(time.time()) + 8
        ids = create_many(settings, "slow", [(f"t{i}", once(due, misfire="SKIP", max_lateness_s=3))
                                             for i in range(n)])
        assert time.time() < due, "creating took too long for the test's premise"
        expected = {occurrence_id(sid, 1, due) for sid in ids}
        dispatch.until(lambda xs: len({o.occurrence_id for o in xs} & expected) == n, 60)  # type: ignore[attr-defined]
        stamps = sorted(o.enqueued_at_ms / 1000 for o in dispatch.items())  # type: ignore[attr-defined]
        first_10s = sum(1 for t in stamps if t < stamps[0] + 10)
        # the tenant's quota is 8/s across all four shards (plus each shard's first token)
        assert 0.8 * QUOTA * 10 <= first_10s <= 1.2 * QUOTA * 10 + 4, first_10s
        assert stamps[-1] - due >= 10  # really throttled: well past max_lateness_s=3 ...

        def delays_counted(xs: list[OccurrenceEvent]) -> bool:  # all read, however loaded the machine is
            return sum(e.occurrence_id in expected and e.state == "ENQUEUED" for e in xs) >= n - 2 * QUOTA

        time.sleep(1)
        events.until(delays_counted, 30)
        mine = [e for e in events.items() if e.occurrence_id in expected]  # type: ignore[attr-defined]
        assert [e for e in mine if e.state == "MISSED"] == []  # ... and nothing MISSED
        throttled = [e for e in mine if e.state == "ENQUEUED"]  # type: ignore[attr-defined]
        assert len({e.occurrence_id for e in throttled}) == len(throttled) >= n - 2 * QUOTA
        assert all("delayed" in (e.reason or "") for e in throttled)  # type: ignore[attr-defined]
        m = scrape(port)
        assert m[("ksched_throttled_total", (("tenant", "slow"),))] == len(throttled)
        assert m[("ksched_throttle_delay_seconds_count", (("tenant", "slow"),))] == len(throttled)
        assert m.get(("ksched_missed_total", (("tenant", "slow"),)), 0) == 0
        lags = [v for (name, _), v in m.items() if name == "ksched_watermark_lag_seconds"]
        assert len(lags) == settings.partitions and max(lags) < 5, lags  # was ~1.8e9 on empty shards
        assert m[("ksched_emitted_total", (("lane", "STRICT"), ("tenant", "slow")))] == n
    finally:
        dispatch.close()
        events.close()


def test_a_replayed_update_makes_no_second_version(stack: tuple[Settings, int]) -> None:
    settings, _ = stack
    with SchedulerClient(settings, timeout_s=60) as client:
        sid = client.create("ct", once(int(time.time()) + 3600), key="replay").schedule_id
        cmd = ScheduleCommand(
            request_id="upd-replay-1", tenant="ct", schedule_id=sid, kind="UPDATE",
            spec=ScheduleSpecRecord.from_domain(once(int(time.time()) + 7200)),
            issued_at_ms=int(time.time() * 1000),
        )
        first = client.publish(cmd)
        again = client.publish(cmd)
        assert first is not None and again is not None
        assert (first.status, first.version) == ("ACCEPTED", 2)
        assert (again.status, again.version) == ("ACCEPTED", 2) and "already applied" in (again.reason or "")
    assert read_schedules(settings, "ct")[sid].version == 2  # type: ignore[attr-defined]


def test_finished_schedules_are_tombstoned_after_retention_and_not_restored(
    stack: tuple[Settings, int],
) -> None:
    settings, _ = stack
    due = int(time.time()) + 3
    with SchedulerClient(settings, timeout_s=60) as client:
        ids = [client.create("ct", once(due), key=f"purge-{i}").schedule_id for i in range(20)]
        canceled = client.create("ct", once(due + 3600), key="purge-cancel").schedule_id
        client.cancel("ct", canceled)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = set(read_schedules(settings, "ct")) & {*ids, canceled}
        if not left:
            break
        time.sleep(1)
    assert not left, f"{len(left)} finished schedules not purged"
    shards = {p: Shard(p, {}, partitions=settings.partitions) for p in range(settings.partitions)}
    restore_shards(settings, shards)
    restored = {sid for s in shards.values() for sid in s.entries}
    assert not restored & {*ids, canceled}
