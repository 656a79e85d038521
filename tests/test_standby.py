"""Standby shards (scheduler/processor/standby.py) against the real broker.

- a warm copy that followed the topics while a processor wrote them holds, once armed, exactly
  what a restore from the start arms: the same schedules, versions, states, next fire times,
  cursors and runtime state;
- a rolling restart of both processors under steady load restores no shard from the start
  (each warms up before it joins), fires every occurrence once, lag p99 within the 5 s SLO.

(A survivor taking a killed processor's shards from its warm copies, exactly once:
tests/test_processor_failover.py's kill test.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.client import SchedulerClient
from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.processor.restore import restore_shards
from scheduler.processor.shard import Shard
from scheduler.processor.standby import Standby
from scheduler.records import Occurrence
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from tests.test_processor_failover import (
    InProcess,
    OffsetClock,
    TopicReader,
    assert_exactly_once,
    at_least,
    create_commands,
    isolated,  # noqa: F401  (a fixture)
    once,
    spawn_processor,
    split_between,
    wait_for_assignment,
    with_topics,
)

pytestmark = [pytest.mark.kafka]

WARM = Tenant(name="warm")
ROLLING = Tenant(name="sb-rolling")


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    """The session namespace with this module's tenant registered and its topics applied."""
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, ROLLING)
    apply_all()
    yield kafka_settings


def new_shard(settings: Settings, tenants: dict[str, Tenant]) -> Any:
    def make(p: int) -> Shard:
        return Shard(p, tenants, partitions=settings.partitions, lease_s=settings.lease_s,
                     start_lease_s=settings.start_lease_s,
                     finished_retention_s=settings.finished_retention_s)
    return make


def armed(shard: Shard) -> dict[str, Any]:
    """What a shard holds once armed, in comparable form."""
    shard.finish_restore(int(time.time()))
    return {
        "entries": {
            sid: (e.tenant, e.version, e.state, e.effective_from, e.next_for, e.armed_at, e.payload,
                  e.last_request_id)
            for sid, e in shard.entries.items()
        },
        "cursors": dict(shard.cursor_map()),
        "inflight": sorted(shard.attempts.inflight),
        "queued": dict(shard.attempts.queued),
    }


def specs(n: int) -> list[ScheduleSpec]:
    out = []
    for i in range(n):
        out.append(ScheduleSpec(kind="cron", cron=f"{i % 60} * * * *", timezone="Europe/Paris",
                                handler="h", payload=f"p{i}".encode()))
    return out


def test_a_warm_copy_arms_exactly_what_a_restore_arms(isolated: Settings) -> None:  # noqa: F811
    settings = isolated
    tenants = with_topics(settings, WARM)
    standby = Standby(settings, new_shard(settings, tenants))
    standby.follow(owned=[])  # a copy of every shard, from before the first write
    proc = InProcess(settings, tenants, OffsetClock())
    try:
        proc.wait_owning(settings.partitions)
        with SchedulerClient(settings, tenant=WARM.name, timeout_s=60) as client:
            sids = [client.create(WARM.name, s).schedule_id for s in specs(40)]
            for sid in sids[:10]:  # version 2
                client.update(WARM.name, sid, ScheduleSpec(kind="cron", cron="*/5 * * * *",
                                                           timezone="UTC", handler="h2"))
            for sid in sids[10:15]:
                client.pause(WARM.name, sid)
            for sid in sids[15:18]:
                client.cancel(WARM.name, sid)
            for sid in sids[10:12]:
                client.resume(WARM.name, sid)
            while True:  # follow while it writes, as a standby does
                standby.poll(0.05)
                if sum(len(c.shard.entries) for c in standby.copies.values()) >= 40:
                    break
                time.sleep(0.05)
    finally:
        proc.stop()  # its last writes are committed: the ends are final
    deadline = time.monotonic() + 30
    quiet = 0
    while quiet < 10 and time.monotonic() < deadline:  # until nothing new arrives for 1 s
        quiet = quiet + 1 if standby.poll(0.05) == 0 else 0
        time.sleep(0.1)
    make = new_shard(settings, tenants)
    fresh = {p: make(p) for p in range(settings.partitions)}
    restore_shards(settings, fresh)
    warm = {p: standby.take(p) for p in range(settings.partitions)}
    standby.close()
    total = 0
    for p in range(settings.partitions):
        copy = warm[p]
        assert copy is not None
        got, want = armed(copy.shard), armed(fresh[p])
        assert got == want, f"shard {p}: the warm copy differs from a restore"
        total += len(want["entries"])
    assert total == 40


@pytest.mark.slow
def test_a_rolling_restart_restores_no_shard_from_the_start(cluster: Settings, tmp_path: Path) -> None:
    """SIGTERM each processor in turn (a planned restart) and start its successor while one-time
    schedules fall due every 0.2 s: the leaver's shards move to the other's warm copies at once,
    and the successor warms up before it joins, so what it is given back is warm too."""
    procs = [spawn_processor("sb-a", tmp_path), spawn_processor("sb-b", tmp_path)]
    reader = TopicReader(cluster, [topic_name(cluster, "dispatch", ROLLING.name)], Occurrence)
    try:
        wait_for_assignment(cluster, split_between(*procs), 90, "two processors sharing the shards")
        start = int(time.time()) + 15
        dues = [start + i // 5 for i in range(400)]  # 5 a second for 80 s
        sids = create_commands(cluster, ROLLING.name, [once(d) for d in dues])
        expected = {occurrence_id(sid, 1, d) for sid, d in zip(sids, dues, strict=True)}
        time.sleep(max(0.0, start + 10 - time.time()))
        for i, name in enumerate(("sb-a2", "sb-b2")):
            old = procs[i]
            old.stop()  # SIGTERM: it leaves the group
            procs[i] = spawn_processor(name, tmp_path)
            wait_for_assignment(cluster, split_between(*procs), 90, f"{name} sharing the shards")
            reader.poll()
        assert time.time() < dues[-1], "the restarts outlasted the load: the premise is not met"
        reader.read_until(at_least(len(expected)), timeout_s=dues[-1] - time.time() + 60, settle_s=3.0)
        assert_exactly_once([s.value.occurrence_id for s in reader.seen], expected)
        lags = sorted(s.append_ms / 1000 - s.value.scheduled_for_ms / 1000 for s in reader.seen)
        p99 = lags[int(0.99 * (len(lags) - 1))]
        assert p99 <= 5.0, f"lag p99 {p99:.2f}s over the 5 s SLO through a rolling restart"
        logs = "".join(f.read_text(errors="replace") for f in sorted(tmp_path.glob("*.log")))
        assert "warm copy of" in logs
        assert "no warm copy, restoring from the start" not in logs, logs[-4000:]
    finally:
        reader.close()
        for p in procs:
            p.stop()
