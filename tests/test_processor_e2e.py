"""The processor against the real broker: commands in, transactional dispatch out, crash and restore."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition

from scheduler.client import CommandRejected, SchedulerClient, UnknownTenant, read_schedules
from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.kafka.clients import consumer
from scheduler.records import Occurrence, decode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker.view import VersionsView, version_state

pytestmark = pytest.mark.kafka


def start_processor(settings: Settings, **env: str) -> subprocess.Popen[bytes]:
    e = {**os.environ, "KSCHED_TICK_INTERVAL_MS": "50", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler", "processor", "--no-metrics", "--log-level", "WARNING"],
        env=e,
    )


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name="e2e"))
    add_tenant(kafka_settings.tenants_file, Tenant(name="other"))
    apply_all()
    yield kafka_settings


def read_dispatch(settings: Settings, tenant: str, expect: int, timeout_s: float) -> list[Occurrence]:
    topic = topic_name(settings, "dispatch", tenant)
    c = consumer(settings.kafka())
    c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    out: list[Occurrence] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(out) < expect:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    out.append(decode(m.value() or b"", Occurrence))
        end = time.monotonic() + 1.5  # anything extra (a duplicate) shows up too
        while time.monotonic() < end:
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    out.append(decode(m.value() or b"", Occurrence))
    finally:
        c.close()
    return out


def once_at(ts: int, handler: str = "h", payload: bytes = b"p") -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler=handler, payload=payload)


def test_create_dispatches_at_its_time_and_bad_commands_are_answered(cluster: Settings) -> None:
    proc = start_processor(cluster)
    try:
        with SchedulerClient(cluster, timeout_s=60) as client:
            due = int(time.time()) + 4
            acc = client.create("e2e", once_at(due, payload=b"hello"), key="one")
            assert acc.version == 1
            again = client.create("e2e", once_at(due, payload=b"hello"), key="one")
            assert again.schedule_id == acc.schedule_id
            with pytest.raises(UnknownTenant, match=r"ksched tenants add nobody"):  # it has no topics
                client.create("nobody", once_at(due), key="x")
            with pytest.raises(CommandRejected) as rej:
                client.pause("e2e", acc.schedule_id, expected_version=5)
            assert rej.value.code == "STALE_VERSION"
            got = read_dispatch(cluster, "e2e", 1, 30)
            assert len(got) == 1
            occ = got[0]
            assert occ.occurrence_id == occurrence_id(acc.schedule_id, 1, due)
            assert (occ.payload, occ.tenant, occ.scheduled_for_ms) == (b"hello", "e2e", due * 1000)
            # On time within the SLO (DESIGN.md §7: 5 s); its percentiles are the benchmarks' job, and
            # 2 s was exceeded on a loaded CI machine.
            assert occ.enqueued_at_ms - occ.scheduled_for_ms < 5000
            deadline = time.monotonic() + 30
            while (state := getattr(read_schedules(cluster, "e2e").get(acc.schedule_id), "state", None)) \
                    != "COMPLETED" and time.monotonic() < deadline:
                time.sleep(0.2)
            assert state == "COMPLETED"  # its one time fired
            assert acc.schedule_id not in read_schedules(cluster, "other")  # tenants never see each other
            # Its workers' view still says ACTIVE: a completion writes no versions record, in the
            # transaction that wrote the COMPLETED schedules record above (it changes no verdict).
            view = VersionsView(cluster, "e2e")
            view.start()
            try:
                assert view.wait_caught_up(30)
                assert view.get(acc.schedule_id) == version_state(1, "ACTIVE")
                assert view.verdict(acc.schedule_id, 1, due * 1000) is None  # its occurrence runs
            finally:
                view.stop()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_command_is_answered_without_waiting_for_the_next_tick(cluster: Settings) -> None:
    """The loop wakes on the first command (docs/api.md, "Where a create's round trip went"): with
    a 10 s tick, a create waited for it, 5 s on average; now it is answered at once."""
    proc = start_processor(cluster, KSCHED_TICK_INTERVAL_MS="10000")
    run = uuid.uuid4().hex[:8]
    later = once_at(int(time.time()) + 86_400)  # nothing of this test fires during the module's crash tests
    try:
        with SchedulerClient(cluster, timeout_s=60) as client:
            ids = [client.create("e2e", later, key=f"tick-{run}-warm-up").schedule_id]  # the shards restored
            took = []
            try:
                for i in range(5):
                    started = time.monotonic()
                    ids.append(client.create("e2e", later, key=f"tick-{run}-{i}").schedule_id)
                    took.append(time.monotonic() - started)
            finally:
                for sid in ids:  # nothing left armed in the namespace, which outlives the session
                    client.cancel("e2e", sid)
            assert max(took) < 3.0, took
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("point", ["before_produce", "after_produce", "before_commit", "after_commit"])
def test_crash_at_each_handoff_loses_nothing_and_duplicates_nothing(cluster: Settings, point: str) -> None:
    tenant = "other"
    before = len(read_dispatch(cluster, tenant, 10**9, 0.5))
    proc = start_processor(cluster, KSCHED_FAILPOINT=point)
    try:
        with SchedulerClient(cluster, timeout_s=60) as client:
            # A first command answered means the processor owns its shards and has restored them.
            client.create(tenant, once_at(int(time.time()) + 86_400), key=f"{point}-warmup")
            due = int(time.time()) + 8
            ids = [client.create(tenant, once_at(due), key=f"{point}-{i}").schedule_id for i in range(20)]
            assert time.time() < due, "creating took too long for the test's premise"
        assert proc.wait(60) == 137  # the failpoint fired while emitting
    finally:
        if proc.poll() is None:
            proc.kill()
    proc = start_processor(cluster)  # restart: restore and re-derive
    try:
        got = read_dispatch(cluster, tenant, before + 20, 60)  # all partitions; filtered by id below
        expected = {occurrence_id(sid, 1, due) for sid in ids}
        seen = [o.occurrence_id for o in got if o.occurrence_id in expected]
        assert sorted(seen) == sorted(expected), f"missing {len(expected - set(seen))}, got {len(seen)}"
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("point", ["", "before_commit:6", "after_commit:7"])
def test_a_burst_over_many_budgets_fires_each_once_through_a_crash(cluster: Settings, point: str) -> None:
    """A tick budget of 3 cuts one instant's 32 occurrences into several transactions per shard,
    so shards are ticked again without a poll between (Processor._burst_rounds); a crash at the
    sixth or seventh dispatching commit (the first pass has four: these are in the rounds), then a
    restart, still emits each occurrence exactly once."""
    from concurrent.futures import ThreadPoolExecutor

    tenant, n = "other", 32
    tag = f"rounds{point.replace(':', '-')}"
    before = len(read_dispatch(cluster, tenant, 10**9, 0.5))
    env = {"KSCHED_TICK_BUDGET": "3", **({"KSCHED_FAILPOINT": point} if point else {})}
    proc = start_processor(cluster, **env)
    try:
        with SchedulerClient(cluster, timeout_s=60) as client:
            client.create(tenant, once_at(int(time.time()) + 86_400), key=f"{tag}-warmup")
        due = int(time.time()) + 12

        def create(part: int) -> list[str]:  # four clients at once: the instant stays ahead
            with SchedulerClient(cluster, timeout_s=60) as c:
                return [c.create(tenant, once_at(due), key=f"{tag}-{i}").schedule_id
                        for i in range(part, n, 4)]

        with ThreadPoolExecutor(4) as pool:
            ids = [sid for part in pool.map(create, range(4)) for sid in part]
        assert time.time() < due, "creating took too long for the test's premise"
        if point:
            assert proc.wait(60) == 137  # the failpoint fired during the burst
            proc = start_processor(cluster, KSCHED_TICK_BUDGET="3")  # restart: restore and re-derive
        got = read_dispatch(cluster, tenant, before + n, 60)
        expected = {occurrence_id(sid, 1, due) for sid in ids}
        seen = [o.occurrence_id for o in got if o.occurrence_id in expected]
        assert sorted(seen) == sorted(expected), f"missing {len(expected - set(seen))}, got {len(seen)}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


def test_the_schedule_command_line(cluster: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from scheduler.cli import main

    proc = start_processor(cluster)
    try:
        create = ["schedule", "create", "--tenant", "e2e", "--key", "cli", "--cron", "0 9 * * MON-FRI",
                  "--tz", "Europe/Berlin", "--handler", "report", "--retry-max-attempts", "5"]
        assert main(create) == 0
        made = json.loads(capsys.readouterr().out)
        sid = made["schedule_id"]
        assert made["version"] == 1
        assert main(["schedule", "pause", "--tenant", "e2e", sid]) == 0
        capsys.readouterr()
        assert main(["schedule", "get", "--tenant", "e2e", sid]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert (shown["state"], shown["handler"], shown["timezone"]) == ("PAUSED", "report", "Europe/Berlin")
        assert main(["schedule", "cancel", "--tenant", "e2e", sid, "--expected-version", "7"]) == 1
        assert "STALE_VERSION" in capsys.readouterr().out
        # list reads the history store only (no indexer has fed one here): the error names the setting
        assert main(["schedule", "list", "--tenant", "e2e"]) == 2
        assert "history_dsn" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(30)
