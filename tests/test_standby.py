"""Standby shards (scheduler/processor/standby.py) against the real broker.

A warm copy that followed the topics while a processor wrote them holds, once armed, exactly
what a restore from the start arms: the same schedules, versions, states, next fire times,
cursors and runtime state. (A survivor taking a killed processor's shards from its warm copies,
exactly once: tests/test_processor_failover.py's kill test.)
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from scheduler.client import SchedulerClient
from scheduler.domain import ScheduleSpec
from scheduler.processor.restore import restore_shards
from scheduler.processor.shard import Shard
from scheduler.processor.standby import Standby
from scheduler.settings import Settings
from scheduler.tenants import Tenant
from tests.test_processor_failover import (
    InProcess,
    OffsetClock,
    isolated,  # noqa: F401  (a fixture)
    with_topics,
)

pytestmark = [pytest.mark.kafka]

WARM = Tenant(name="warm")


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
