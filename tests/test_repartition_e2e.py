"""``ksched repartition`` against the real broker: a namespace of 2 shards moved to one of 3 at a
cutover instant C, with schedules firing on both sides of it (docs/operations.md).

The old side's processor runs with ``emit_until = C``; the migration is first killed with
SIGKILL midway through its transaction, then run again; the new side's processor takes over.
A real worker runs on each side (the old one until its side is drained); what they ran and both
sides' dispatch topics (read ``read_committed`` from the start) are compared with the exact set
computed here from the specs (the domain's ``occurrence_id``): 0 missing, 0 duplicates; the
paused schedule stays paused, the updated one keeps its version. Both processors run in-process
on an injected clock (cron has minute resolution: waiting for real minutes would make this slow).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from namespaces import drop_namespace

from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.kafka.clients import producer
from scheduler.records import (
    CommandResult,
    Occurrence,
    Schedule,
    ScheduleCommand,
    ScheduleSpecRecord,
    decode,
    encode,
)
from scheduler.repartition import (
    KILL_AFTER_ENV,
    RepartitionError,
    cursor_problems,
    repartition,
    shard_cursors,
    unapplied_commands,
)
from scheduler.settings import Settings
from scheduler.tenant_admin import apply_all
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker import Context, Worker
from tests.test_attempts_e2e import Running
from tests.test_processor_failover import (
    InProcess,
    TopicReader,
    assert_exactly_once,
    create_commands,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]  # 60-160 s here: two processor generations, a killed copy

TENANT = Tenant(name="rp", trigger_rate_per_s=0)
NEW_PARTITIONS = 3


class SteppedClock:
    """The processors' clock: it stands still at ``at`` until the test moves it, so that what is
    due is decided by the test's steps, not by how long a step takes on a loaded machine."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def sides(kafka_settings: Settings, tmp_path: Path) -> Iterator[tuple[Settings, Settings]]:
    """The old namespace (2 shards, the tenant registered, topics applied) and the new one's name."""
    tenants_file = tmp_path / "tenants.toml"
    add_tenant(tenants_file, TENANT)
    old = kafka_settings.replace(namespace=f"{kafka_settings.namespace}-rp{secrets.token_hex(2)}",
                                 partitions=2, tick_interval_ms=50, tenants_file=tenants_file)
    new = old.replace(namespace=f"{old.namespace}-new", partitions=NEW_PARTITIONS)
    apply_all(old)
    yield old, new
    drop_namespace(new)
    drop_namespace(old)


def once_spec(t: int) -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="h", max_lateness_s=600)


def send(settings: Settings, sid: str, kind: str, at: float, spec: ScheduleSpec | None = None) -> str:
    """Produce one command for ``sid`` (issued at ``at``, the processors' time); its request id."""
    rid = uuid.uuid4().hex
    cmd = ScheduleCommand(request_id=rid, tenant=TENANT.name, schedule_id=sid, kind=kind,  # type: ignore[arg-type]
                          spec=None if spec is None else ScheduleSpecRecord.from_domain(spec),
                          issued_at_ms=int(at * 1000))
    p = producer(settings.kafka())
    p.produce(topic_name(settings, "commands", TENANT.name), encode(cmd), sid.encode())
    assert p.flush(30) == 0
    return rid


def command(
    settings: Settings, sid: str, kind: str, at: float, spec: ScheduleSpec | None = None
) -> CommandResult:
    """Send one command for ``sid`` and wait for its answer."""
    rid = send(settings, sid, kind, at, spec)
    reader = TopicReader(settings, [topic_name(settings, "results", TENANT.name)], CommandResult)
    try:
        reader.read_until(lambda seen: any(s.value.request_id == rid for s in seen), 60, settle_s=0)
        return next(s.value for s in reader.seen if s.value.request_id == rid)
    finally:
        reader.close()


def dispatched(settings: Settings) -> list[Occurrence]:
    reader = TopicReader(settings, [topic_name(settings, "dispatch", TENANT.name)], Occurrence)
    try:
        reader.read_until(lambda _: False, 0, settle_s=3)
        return [s.value for s in reader.seen]
    finally:
        reader.close()


def schedules_of(settings: Settings) -> dict[str, Schedule]:
    from scheduler.repartition import _read

    out: dict[str, Schedule] = {}
    _read(settings, [topic_name(settings, "schedules")],
          lambda m: out.__setitem__((m.key() or b"").decode(), decode(m.value() or b"", Schedule)))
    return out


def wait_until(what: str, ok: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never {what} in {timeout_s}s"
        time.sleep(0.3)


def start_worker(settings: Settings, ran: list[tuple[str, str]], side: str) -> Running:
    """A real worker of ``settings``' namespace; ``ran`` gets (side, occurrence id) per execution."""
    def h(ctx: Context) -> None:
        ran.append((side, ctx.occurrence_id))

    w = Worker(settings, tenant=TENANT.name, handlers={"h": h}, grace_s=1, heartbeat_s=0.5)
    r = Running(w)
    assert w.wait_ready(60)
    return r


def run_cli(
    old: Settings, new: Settings, cutover: int, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "KSCHED_NAMESPACE": old.namespace, "KSCHED_PARTITIONS": str(old.partitions),
         "KSCHED_TENANTS_FILE": str(old.tenants_file), **env}
    argv = [sys.executable, "-m", "scheduler", "repartition", "--to", new.namespace,
            "--partitions", str(new.partitions), "--cutover", str(cutover), *args]
    return subprocess.run(argv, env=e, capture_output=True, text=True, timeout=180)


def test_repartition_moves_every_schedule_exactly_once_across_the_cutover(
    sides: tuple[Settings, Settings],
) -> None:
    old, new = sides
    minute = (int(time.time()) // 60 + 2) * 60  # M: the processors' clock starts 20 s before it
    cutover = minute + 70
    clock = SteppedClock(minute - 20)
    tenants = {TENANT.name: TENANT}
    cron = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h", max_lateness_s=600)
    flexible = dataclasses.replace(cron, window_minutes=1)
    ones = [once_spec(t) for t in range(cutover - 3, cutover + 3)]

    ran: list[tuple[str, str]] = []
    # leases far longer than the clock's steps: a step must not expire a running attempt
    old, new = old.replace(lease_s=3600, start_lease_s=3600), new.replace(lease_s=3600, start_lease_s=3600)
    old_proc = InProcess(old.replace(emit_until=cutover), tenants, clock)
    old_worker = start_worker(old, ran, "old")
    try:
        old_proc.wait_owning(old.partitions)
        specs = [cron, cron, cron, flexible, *ones]
        plain, updated, paused, flex, *once_ids = create_commands(
            old, TENANT.name, specs, issued_at_ms=int(clock() * 1000))
        v2 = dataclasses.replace(cron, payload=b"v2")
        assert command(old, updated, "UPDATE", clock(), v2).status == "ACCEPTED"
        assert command(old, paused, "PAUSE", clock()).status == "ACCEPTED"
        clock.at = cutover + 2  # past the cutover: the old side stops at C - 1
        wait_until("every old shard at the cutover", lambda: not cursor_problems(old, cutover))
        with pytest.raises(RepartitionError, match="still running"):
            repartition(old, new.namespace, NEW_PARTITIONS, cutover)
        # the old side drains: its worker runs what it dispatched, its processor applies the reports
        wait_until("the old side's occurrences run",
                   lambda: {o.occurrence_id for o in dispatched(old)} <= {oid for _, oid in ran})
        wait_until("the old side's reports applied", lambda: not unapplied_commands(old))
    finally:
        old_worker.stop()
        old_proc.stop()
    check = run_cli(old, new, cutover, "--check")
    assert check.returncode == 0, check.stdout + check.stderr

    # a command that reaches the old side after its processors stopped: refused until applied
    late = uuid.uuid4().hex
    send(old, late, "CREATE", clock(), once_spec(minute + 86_400))
    with pytest.raises(RepartitionError, match="not applied yet"):
        repartition(old, new.namespace, NEW_PARTITIONS, cutover)
    old_proc = InProcess(old.replace(emit_until=cutover), tenants, clock)  # restarted: still at C - 1
    try:
        wait_until("the late command applied", lambda: not unapplied_commands(old))
    finally:
        old_proc.stop()

    with pytest.raises(RepartitionError, match="only grows"):
        repartition(old, new.namespace, 1, cutover)
    killed = run_cli(old, new, cutover, **{KILL_AFTER_ENV: "5"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not schedules_of(new), "a killed copy left records a read_committed reader sees"
    rerun = run_cli(old, new, cutover)
    assert rerun.returncode == 0, rerun.stderr
    again = run_cli(old, new, cutover)
    assert again.returncode == 2 and "ran already" in again.stderr, again.stderr

    # each new shard restores its cursors from its own partition of the state topic
    assert {q: st.shard for q, st in shard_cursors(new).items()} == {q: q for q in range(NEW_PARTITIONS)}
    assert not cursor_problems(new, cutover)
    before, after = schedules_of(old), schedules_of(new)
    assert {sid: (s.version, s.state, s.spec) for sid, s in after.items()} == {
        sid: (s.version, s.state, s.spec) for sid, s in before.items()}
    assert after[paused].state == "PAUSED" and after[updated].version == 2 and late in after

    new_proc = InProcess(new, tenants, clock)
    new_worker = start_worker(new, ran, "new")
    try:
        new_proc.wait_owning(NEW_PARTITIONS)
        clock.at = minute + 179  # M+120's flexible fire is available by M+179; M+180 is not due
        versions = {plain: 1, updated: 2, flex: 1}
        fires = (minute, minute + 60, minute + 120)
        expected = {occurrence_id(sid, v, f) for sid, v in versions.items() for f in fires}
        once = dict(zip(range(cutover - 3, cutover + 3), once_ids, strict=True))
        expected |= {occurrence_id(sid, 1, t) for t, sid in once.items()}
        wait_until("every expected occurrence run", lambda: len(ran) >= len(expected), 90)
        time.sleep(3)  # anything extra shows up too
    finally:
        new_worker.stop()
        new_proc.stop()
    assert_exactly_once([oid for _, oid in ran], expected)  # what the workers ran, both sides
    old_occ, new_occ = dispatched(old), dispatched(new)
    old_ids, new_ids = [o.occurrence_id for o in old_occ], [o.occurrence_id for o in new_occ]
    twice = [(side, o) for side, occs in (("old", old_occ), ("new", new_occ)) for o in occs
             if (old_ids + new_ids).count(o.occurrence_id) > 1]
    assert not twice, f"cutover {cutover}, minute {minute}; dispatched more than once: {twice}"
    assert_exactly_once(old_ids + new_ids, expected)
    # the one-time schedules around C: each side emitted exactly its own
    assert {occurrence_id(sid, 1, t) for t, sid in once.items() if t < cutover} <= set(old_ids)
    assert {occurrence_id(sid, 1, t) for t, sid in once.items() if t >= cutover} <= set(new_ids)
