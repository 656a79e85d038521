"""The processor's failure behaviour against the real broker (DESIGN.md §4).

- a ``kill -9`` in the middle of a burst: the surviving processor takes over the
  dead one's shards and every occurrence is seen exactly once;
- a zombie (SIGSTOP past the session timeout, then SIGCONT): the shard's
  transactional id fences it, its late writes never become visible, and once
  back it leaves no shard unprocessed;
- a ten-minute outage under each misfire policy, with an injected clock;
- catch-up work pending at a handover is neither dropped nor repeated;
- fairness: one tenant's burst spanning many ticks does not hold back another
  tenant's strict occurrence due at the same instant.

Every check reads the dispatch topics ``read_committed`` from the start and
compares exact sets of occurrence ids computed here with
:func:`scheduler.domain.occurrence_id`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from namespaces import drop_namespace

from scheduler.access_admin import ensure_services, ensure_tenants
from scheduler.domain import ScheduleSpec, occurrence_id
from scheduler.kafka.admin import admin_client, apply_topics
from scheduler.kafka.clients import consumer, producer
from scheduler.records import (
    CommandResult,
    Occurrence,
    OccurrenceEvent,
    ScheduleCommand,
    ScheduleSpecRecord,
    decode,
    encode,
)
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import desired_topics, topic_name
from tests.test_processor_e2e import once_at
from tests.topic_values import decoded

pytestmark = [pytest.mark.kafka]

SESSION_TIMEOUT_S = 3.0  # the processor's session.timeout.ms (processor_session_timeout_ms)

# Tenants of this module, distinct from test_processor_e2e's ("e2e", "other").
# Paced (100 dispatches/s per shard): a burst takes seconds to emit. One per variant of the kill test.
KILL = {kind: Tenant(name=f"fo-kill-{kind}", trigger_rate_per_s=100) for kind in ("once", "cron")}
ZOMBIE = Tenant(name="fo-zombie")
ORPHAN = Tenant(name="fo-orphan")
BURST = Tenant(name="fo-burst", trigger_rate_per_s=0, max_schedules=10_000_000)  # rate 0: no quota
STRICT = Tenant(name="fo-strict")
MISFIRE = Tenant(name="fo-misfire")


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    """The session namespace with this module's tenants registered and their topics applied."""
    from scheduler.cli.topics_cmd import apply_all

    for t in (*KILL.values(), ZOMBIE, ORPHAN, BURST, STRICT):
        add_tenant(kafka_settings.tenants_file, t)
    apply_all()
    yield kafka_settings


# -- helpers -------------------------------------------------------------------


def once(ts: int, **policy: Any) -> ScheduleSpec:
    """A one-time spec at ``ts``; lateness generous enough that a takeover is never a misfire."""
    return dataclasses.replace(once_at(ts), max_lateness_s=policy.pop("max_lateness_s", 600), **policy)


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    instance_id: str
    log: Path

    @property
    def client_id(self) -> str:
        return f"ksched-processor-{self.instance_id}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self.popen.terminate()
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


# A processor that freezes itself (SIGSTOP: every thread, so its heartbeats stop too) the first
# time a tick that emits dispatch records is about to commit: the transaction is open, its records
# produced. It stands in for the runtime's crash failpoint (failpoints.Failpoint.hit), which exits instead.
STOP_MID_TRANSACTION = """
import logging, os, signal, sys
from scheduler.processor.runtime import Processor
from scheduler.settings import load_settings


class StopMidTransaction:
    point = "before_commit"

    def __init__(self):
        self.fired = False

    def hit(self, point):
        if point == self.point and not self.fired:
            self.fired = True
            logging.getLogger("zombie").warning("SIGSTOP mid-transaction")
            os.kill(os.getpid(), signal.SIGSTOP)


logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
proc = Processor(load_settings(), instance_id=sys.argv[1])
proc.failpoint = StopMidTransaction()
proc.install_signal_handlers()
proc.run()
"""


def spawn_processor(name: str, log_dir: Path, *args: str, stop_mid_transaction: bool = False) -> Proc:
    """Like test_processor_e2e.start_processor, with an instance id, extra CLI args and a log file."""
    e = {**os.environ, "KSCHED_TICK_INTERVAL_MS": "50"}
    instance_id = f"{name}-{secrets.token_hex(3)}"
    log = log_dir / f"{instance_id}.log"
    if stop_mid_transaction:
        argv = [sys.executable, "-c", STOP_MID_TRANSACTION, instance_id]
    else:
        argv = [sys.executable, "-m", "scheduler", "processor", "--no-metrics", "--log-level", "INFO"]
        argv += ["--instance-id", instance_id, *args]
    with log.open("wb") as fh:
        popen = subprocess.Popen(argv, env=e, stderr=fh)
    return Proc(popen, instance_id, log)


def is_stopped(pid: int) -> bool:
    """The process is in state T (stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def group_assignment(settings: Settings) -> tuple[str, dict[str, set[int]]]:
    """The processor group's state and, per member client id, its partitions of the shards topic."""
    group = f"{settings.namespace}.processor"
    t_shards = topic_name(settings, "shards")
    admin = admin_client(settings.kafka())  # kept alive until the future resolves
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    members = {
        m.client_id: {tp.partition for tp in m.assignment.topic_partitions if tp.topic == t_shards}
        for m in desc.members
    }
    return str(getattr(desc.state, "name", desc.state)), members


def wait_for_assignment(
    settings: Settings, ok: Callable[[dict[str, set[int]]], bool], timeout_s: float, what: str
) -> dict[str, set[int]]:
    deadline = time.monotonic() + timeout_s
    members: dict[str, set[int]] = {}
    state = "?"
    while time.monotonic() < deadline:
        state, members = group_assignment(settings)
        if state == "STABLE" and ok(members):
            return members
        time.sleep(0.5)
    raise AssertionError(f"group never reached {what} in {timeout_s}s: {state} {members}")


def split_between(*procs: Proc) -> Callable[[dict[str, set[int]]], bool]:
    """Every shard owned, by exactly these processors, each owning at least one."""

    def ok(members: dict[str, set[int]]) -> bool:
        want = {p.client_id for p in procs}
        owned = [members.get(c, set()) for c in want]
        return set(members) == want and all(owned) and set().union(*owned) == {0, 1, 2, 3}

    return ok


def create_commands(
    settings: Settings,
    tenant: str,
    specs: list[ScheduleSpec],
    timeout_s: float = 120,
    issued_at_ms: int | None = None,
) -> list[str]:
    """Produce one CREATE per spec straight to the commands topic (as ``ksched bench burst`` does)
    and wait until the processor accepted every one; returns the schedule ids, in order."""
    bs = settings.kafka()
    t_results = topic_name(settings, "results", tenant)
    results = consumer(bs)
    ends = [
        TopicPartition(t_results, p, results.get_watermark_offsets(TopicPartition(t_results, p), 10)[1])
        for p in range(settings.partitions)
    ]
    results.assign(ends)
    prod = producer(bs)
    t_commands = topic_name(settings, "commands", tenant)
    sids: list[str] = []
    now_ms = issued_at_ms or int(time.time() * 1000)
    for spec in specs:
        sid = uuid.uuid4().hex
        sids.append(sid)
        cmd = ScheduleCommand(
            request_id=sid,
            tenant=tenant,
            schedule_id=sid,
            kind="CREATE",
            spec=ScheduleSpecRecord.from_domain(spec),
            issued_at_ms=now_ms,
        )
        while True:
            try:
                prod.produce(t_commands, encode(cmd), sid.encode())
                break
            except BufferError:
                prod.poll(0.05)
    assert prod.flush(60) == 0
    todo = set(sids)
    rejected: list[CommandResult] = []
    deadline = time.monotonic() + timeout_s
    try:
        while todo and time.monotonic() < deadline:
            for m in results.consume(10_000, 0.2):
                if m.error() is not None:
                    continue
                r = decode(m.value() or b"", CommandResult)
                if r.request_id in todo:
                    todo.discard(r.request_id)
                    if r.status != "ACCEPTED":
                        rejected.append(r)
    finally:
        results.close()
    assert not rejected, f"{len(rejected)} creates rejected, e.g. {rejected[0]}"
    assert not todo, f"{len(todo)} of {len(sids)} creates unanswered after {timeout_s}s"
    return sids


@dataclass(frozen=True)
class Seen:
    partition: int
    append_ms: int  # LogAppendTime on dispatch topics
    value: Any


class TopicReader:
    """A read_committed reader of every partition of some topics, from the start."""

    def __init__(self, settings: Settings, topics: list[str], cls: type) -> None:
        self.cls = cls
        self.c = consumer(settings.kafka(), None, **{"fetch.wait.max.ms": 10})
        self.c.assign([TopicPartition(t, p, 0) for t in topics for p in range(settings.partitions)])
        self.seen: list[Seen] = []

    def poll(self, timeout_s: float = 0.2) -> int:
        n = 0
        for m in self.c.consume(10_000, timeout_s):
            if m.error() is None:
                for x in decoded(m.value() or b"", self.cls):
                    self.seen.append(Seen(m.partition() or 0, m.timestamp()[1], x))
                    n += 1
        return n

    def read_until(self, done: Callable[[list[Seen]], bool], timeout_s: float, settle_s: float = 2.0) -> None:
        """Read until ``done(seen)`` or the timeout, then ``settle_s`` more (anything extra shows up too)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done(self.seen):
            self.poll()
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            self.poll()

    def close(self) -> None:
        self.c.close()


def at_least(n: int) -> Callable[[list[Seen]], bool]:
    return lambda seen: len(seen) >= n


def assert_exactly_once(got: list[str], expected: set[str]) -> None:
    counts = Counter(got)
    missing = expected - set(counts)
    extra = set(counts) - expected
    dups = {k: v for k, v in counts.items() if v > 1}
    assert not missing and not extra and not dups, (
        f"{len(missing)} missing, {len(extra)} unexpected, {len(dups)} duplicated "
        f"(of {len(expected)} expected, {len(got)} seen)"
    )


# -- 1. kill -9 in the middle of a burst ---------------------------------------


def daily_at(ts: int) -> ScheduleSpec:
    """A daily cron at ``ts`` (a minute boundary): it fires there, then not again for a day."""
    tm = time.gmtime(ts)
    cron = f"{tm.tm_min} {tm.tm_hour} * * *"
    return ScheduleSpec(kind="cron", cron=cron, timezone="UTC", handler="h", max_lateness_s=600)


@pytest.mark.parametrize(
    "kind",
    [
        # A one-time schedule is marked COMPLETED in the transaction that emits it.
        "once",
        # A recurring one stays ACTIVE: only the committed lane cursor tells the next owner what was
        # emitted. Cron has minute resolution, so this waits for a minute boundary: slow.
        pytest.param("cron", marks=pytest.mark.slow),
    ],
)
def test_kill_9_mid_burst_the_other_processor_takes_over_exactly_once(
    cluster: Settings, tmp_path: Path, kind: str
) -> None:
    n = 2000
    tenant = KILL[kind].name  # 100 dispatches/s per shard: ~500 per shard take ~4 s to emit
    a = spawn_processor("fo-kill-a", tmp_path)
    b = spawn_processor("fo-kill-b", tmp_path)
    reader = TopicReader(cluster, [topic_name(cluster, "dispatch", tenant)], Occurrence)
    try:
        members = wait_for_assignment(cluster, split_between(a, b), 90, "two processors sharing the shards")
        victim_parts = members[a.client_id]
        if kind == "once":
            due = int(time.time()) + 15
            spec = once(due)
        else:
            due = (int(time.time()) + 15) // 60 * 60 + 60
            spec = daily_at(due)
        sids = create_commands(cluster, tenant, [spec] * n)
        assert time.time() < due - 1, "loading took too long for the test's premise"
        expected = {occurrence_id(sid, 1, due) for sid in sids}

        # Kill the victim ~1 s into its part of the burst (its first records are visible).
        deadline = time.monotonic() + due - time.time() + 60
        while not any(s.partition in victim_parts for s in reader.seen):
            assert time.monotonic() < deadline, "the victim never emitted"
            reader.poll()
        time.sleep(1.0)
        killed_ms = int(time.time() * 1000)
        a.popen.send_signal(signal.SIGKILL)
        assert a.popen.wait(10) == -signal.SIGKILL

        reader.read_until(at_least(n), timeout_s=120, settle_s=3.0)
        assert b.popen.poll() is None, b.log_text()[-3000:]
        assert_exactly_once([s.value.occurrence_id for s in reader.seen], expected)
        # The premise: the victim's shards were mid-burst when it died, and the survivor finished them.
        on_victim = [s for s in reader.seen if s.partition in victim_parts]
        before = [s for s in on_victim if s.append_ms <= killed_ms]
        after = [s for s in on_victim if s.append_ms > killed_ms]
        assert before and after, (len(before), len(after))
        _, members = group_assignment(cluster)
        assert members == {b.client_id: {0, 1, 2, 3}}
        # Standby shards: b took the victim's shards from its warm copies (their tail only).
        for p in victim_parts:
            assert re.search(rf"shard {p}: warm copy of [1-9]\d* records", b.log_text()), b.log_text()[-3000:]
    finally:
        reader.close()
        a.stop()
        b.stop()


# -- 2. a zombie is fenced -----------------------------------------------------


def freeze_zombie_through_a_takeover(
    cluster: Settings, tenant: str, a: Proc, b: Proc, reader: TopicReader, n: int
) -> tuple[set[str], set[int]]:
    """With ``a`` (self-stopping) and ``b`` sharing the shards, make ``n`` one-time schedules due
    at t1. ``a`` freezes at t1 mid-transaction; once ``b`` owns every shard and every occurrence of
    t1 is visible, ``a`` is let go (SIGCONT). Returns t1's occurrence ids and ``a``'s old shards."""
    members = wait_for_assignment(cluster, split_between(a, b), 90, "two processors sharing the shards")
    zombie_parts = members[a.client_id]
    t1 = int(time.time()) + 10
    sids = create_commands(cluster, tenant, [once(t1) for _ in range(n)])
    assert time.time() < t1, "loading took too long for the test's premise"
    expected = {occurrence_id(s, 1, t1) for s in sids}
    # At t1 the zombie stops itself with a transaction open on one of its shards.
    deadline = time.monotonic() + t1 - time.time() + 30
    while not is_stopped(a.popen.pid):
        assert a.popen.poll() is None, a.log_text()[-3000:]
        assert time.monotonic() < deadline, "the zombie never reached its first emitting commit"
        time.sleep(0.05)
    stopped = time.monotonic()
    try:
        # Its session expires; the other processor takes every shard (init_transactions on each
        # shard's transactional id fences the zombie and aborts its open transaction) and emits
        # all of t1's burst.
        wait_for_assignment(
            cluster, lambda m: m == {b.client_id: {0, 1, 2, 3}}, 60, "the survivor owning every shard"
        )
        reader.read_until(at_least(len(expected)), timeout_s=60, settle_s=0)
        assert time.monotonic() - stopped > SESSION_TIMEOUT_S
    finally:
        os.kill(a.popen.pid, signal.SIGCONT)
    # Back, the zombie commits its open transaction and ticks its other stale shards before it
    # learns it lost them: all of that must be fenced and stay invisible.
    reader.read_until(lambda _: False, timeout_s=0, settle_s=3.0)
    return expected, zombie_parts


def test_zombie_after_sigstop_is_fenced_and_its_late_writes_stay_invisible(
    cluster: Settings, tmp_path: Path
) -> None:
    tenant = ZOMBIE.name
    a = spawn_processor("fo-zombie-a", tmp_path, stop_mid_transaction=True)
    b = spawn_processor("fo-zombie-b", tmp_path)
    reader = TopicReader(cluster, [topic_name(cluster, "dispatch", tenant)], Occurrence)
    try:
        expected, zombie_parts = freeze_zombie_through_a_takeover(cluster, tenant, a, b, reader, 200)
        assert_exactly_once([s.value.occurrence_id for s in reader.seen], expected)
        zlog = a.log_text()
        fenced = {int(p) for p in re.findall(r"shard (\d+): producer fenced", zlog)}
        assert fenced and fenced <= zombie_parts, (fenced, zombie_parts, zlog[-3000:])
        # It rejoins the group as a member that owns shards again.
        wait_for_assignment(cluster, split_between(a, b), 90, "the zombie back as a member")
        assert a.popen.poll() is None, a.log_text()[-3000:]
        assert b.popen.poll() is None, b.log_text()[-3000:]
    finally:
        reader.close()
        a.stop()
        b.stop()


@pytest.mark.slow
def test_after_a_zombie_comes_back_every_shard_is_still_processed(cluster: Settings, tmp_path: Path) -> None:
    """Regression: a zombie's produce() on its fenced producer raised KafkaError _FATAL, which
    runtime._tick_failed took for an abortable error: it re-ran _on_assign for the shard, whose
    init_transactions fenced the shard's rightful owner; that owner dropped the shard while the
    group still assigned it, and no processor ticked it until the next rebalance (commands went
    unanswered, occurrences unemitted)."""
    tenant = ORPHAN.name
    a = spawn_processor("fo-orphan-a", tmp_path, stop_mid_transaction=True)
    b: Proc | None = None
    reader = TopicReader(cluster, [topic_name(cluster, "dispatch", tenant)], Occurrence)
    try:
        # The zombie joins first: the one that joins later (b now, the zombie when it comes back)
        # is handed shards 0 and 1, so b keeps the zombie's old shards after the zombie's return.
        wait_for_assignment(cluster, lambda m: m == {a.client_id: {0, 1, 2, 3}}, 90, "a owning all")
        b = spawn_processor("fo-orphan-b", tmp_path)
        # A large burst: the zombie, let go, spends long enough producing its other stale shard's
        # part that its producer learns of the fencing in the middle (produce() raises _FATAL).
        expected1, zombie_parts = freeze_zombie_through_a_takeover(cluster, tenant, a, b, reader, 2000)
        if len(zombie_parts) < 2:
            pytest.fail(f"premise: the zombie owned one shard only ({zombie_parts})")
        assert_exactly_once([s.value.occurrence_id for s in reader.seen], expected1)
        wait_for_assignment(cluster, split_between(a, b), 90, "the zombie back as a member")
        # Every shard answers commands and emits again.
        t2 = int(time.time()) + 5
        sids2 = create_commands(cluster, tenant, [once(t2) for _ in range(200)], timeout_s=30)
        expected2 = {occurrence_id(s, 1, t2) for s in sids2}
        reader.read_until(at_least(len(expected1) + len(expected2)), timeout_s=60, settle_s=3.0)
        assert_exactly_once([s.value.occurrence_id for s in reader.seen], expected1 | expected2)
    finally:
        reader.close()
        a.stop()
        if b is not None:
            b.stop()


# -- 3. a ten-minute outage under each misfire policy ---------------------------


class OffsetClock:
    """The wall clock plus an adjustable offset: a processor on it lives ``offset`` seconds ahead."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class InProcess:
    """A :class:`scheduler.processor.runtime.Processor` running in a thread."""

    def __init__(self, settings: Settings, tenants: dict[str, Tenant], clock: OffsetClock, **kw: Any) -> None:
        from scheduler.processor.runtime import Processor

        self.proc = Processor(
            settings, tenants=tenants, clock=clock, instance_id=f"fo-{uuid.uuid4().hex[:6]}", **kw
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.proc.run()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def wait_owning(self, n: int, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.proc.owned) < n:
            assert self.thread.is_alive(), f"processor died: {self.error!r}"
            assert time.monotonic() < deadline, f"owns {sorted(self.proc.owned)} after {timeout_s}s"
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "Processor.run() did not return after stop()"
        assert self.error is None, repr(self.error)


@pytest.fixture
def isolated(kafka_settings: Settings) -> Iterator[Settings]:
    """A namespace of its own: an injected clock moves its shard cursors minutes ahead of real
    time, which would make every later processor of the shared namespace skip real work."""
    settings = kafka_settings.replace(
        namespace=f"{kafka_settings.namespace}-fo{secrets.token_hex(2)}", tick_interval_ms=50
    )
    ensure_services(settings)  # its processors run as its own processor principal
    yield settings
    drop_namespace(settings)


def with_topics(settings: Settings, *tenants: Tenant) -> dict[str, Tenant]:
    registry = {t.name: t for t in tenants}
    apply_topics(admin_client(settings.kafka()), desired_topics(settings, registry))
    ensure_tenants(settings, list(registry))  # their principals: workers run as them
    return registry


def every_minute(**policy: Any) -> ScheduleSpec:
    return ScheduleSpec(
        kind="cron", cron="* * * * *", timezone="UTC", handler="h", max_lateness_s=30, **policy
    )


def create_before_outage(
    settings: Settings,
    tenants: dict[str, Tenant],
    clock: OffsetClock,
    tenant: str,
    specs: dict[str, ScheduleSpec],
) -> tuple[dict[str, str], list[int]]:
    """Create ``specs`` on a processor running 2 s past a minute boundary (injected time) and
    stop it well before the next one, M1; then move ``clock`` so that a processor started next
    lives 32 s after M10: ten minutes of outage, M1..M10 all later than a 30 s max_lateness, M11
    still 28 s ahead. Returns the schedule ids by name and [M1..M10]."""
    now = time.time()
    m0 = (int(now) // 60 + 1) * 60
    clock.offset = m0 + 2 - now
    m1 = m0 + 60
    first = InProcess(settings, tenants, clock)
    try:
        first.wait_owning(settings.partitions)
        names = list(specs)
        ids = create_commands(settings, tenant, list(specs.values()), issued_at_ms=int(clock() * 1000))
    finally:
        first.stop()
    assert clock() < m1, "creating took too long: the first minute fired on time"
    fires = [m1 + 60 * i for i in range(10)]
    clock.offset = fires[-1] + 32 - time.time()
    return dict(zip(names, ids, strict=True)), fires


def outage_ids(reader: TopicReader, fires: list[int]) -> list[str]:
    """Occurrence ids of the records about M1..M10 (or earlier: there must be none). Should a slow
    run reach M11 in injected time, that minute fires on time: it is not part of the outage."""
    end_ms = (fires[-1] + 60) * 1000
    return [s.value.occurrence_id for s in reader.seen if s.value.scheduled_for_ms < end_ms]


def test_ten_minute_outage_applies_each_misfire_policy(isolated: Settings) -> None:
    settings = isolated
    tenants = with_topics(settings, MISFIRE)
    tenant = MISFIRE.name
    clock = OffsetClock()
    sids, fires = create_before_outage(
        settings,
        tenants,
        clock,
        tenant,
        {
            "skip": every_minute(misfire="SKIP"),
            "fire_once": every_minute(misfire="FIRE_ONCE"),
            "catch_up_3": every_minute(misfire="CATCH_UP", catch_up_limit=3),
            "catch_up_20": every_minute(misfire="CATCH_UP", catch_up_limit=20),  # > 10: all emitted
        },
    )
    # SKIP: none; FIRE_ONCE: the latest; CATCH_UP(K): the K latest (Shard._misfire keeps late[cut:]).
    kept = {"skip": [], "fire_once": fires[-1:], "catch_up_3": fires[-3:], "catch_up_20": fires}
    expected_dispatch = {occurrence_id(sids[k], 1, f) for k, fs in kept.items() for f in fs}
    expected_missed = {occurrence_id(sids[k], 1, f) for k, fs in kept.items() for f in fires if f not in fs}
    assert len(expected_dispatch) == 14 and len(expected_missed) == 26

    dispatch = TopicReader(settings, [topic_name(settings, "dispatch", tenant)], Occurrence)
    events = TopicReader(settings, [topic_name(settings, "occurrence-events", tenant)], OccurrenceEvent)
    try:
        second = InProcess(settings, tenants, clock)
        try:
            second.wait_owning(settings.partitions)
            dispatch.read_until(at_least(len(expected_dispatch)), timeout_s=20, settle_s=0)
            events.read_until(at_least(len(expected_missed)), timeout_s=20, settle_s=2.0)
            dispatch.read_until(lambda _: False, timeout_s=0, settle_s=0.5)
        finally:
            second.stop()
        assert_exactly_once(outage_ids(dispatch, fires), expected_dispatch)
        assert_exactly_once(outage_ids(events, fires), expected_missed)
        for e in (s.value for s in events.seen):
            assert e.state == "MISSED", e
            assert e.occurrence_id == occurrence_id(e.schedule_id, 1, e.scheduled_for_ms // 1000)

        # A restart after the outage was handled re-derives nothing: the fates were committed.
        third = InProcess(settings, tenants, clock)
        try:
            third.wait_owning(settings.partitions)
            dispatch.read_until(lambda _: False, timeout_s=0, settle_s=2.0)
            events.read_until(lambda _: False, timeout_s=0, settle_s=0.5)
        finally:
            third.stop()
        assert_exactly_once(outage_ids(dispatch, fires), expected_dispatch)
        assert_exactly_once(outage_ids(events, fires), expected_missed)
    finally:
        dispatch.close()
        events.close()


def test_catch_up_backlog_survives_a_handover(isolated: Settings) -> None:
    """Regression: pending catch-up occurrences lived only in memory (Shard.catch_up) while the
    lane cursor past them was committed, so a restart or rebalance dropped them (neither
    dispatched nor MISSED). A handover mid-backlog must neither drop nor repeat any."""
    settings = isolated
    # One catch-up dispatch a second on the schedule's shard: the quota is split over the 4 shards.
    slow = Tenant(name="fo-slow-catch-up", catch_up_rate_per_s=4)
    tenants = with_topics(settings, slow)
    clock = OffsetClock()
    sids, fires = create_before_outage(
        settings, tenants, clock, slow.name, {"cu5": every_minute(misfire="CATCH_UP", catch_up_limit=5)}
    )
    expected = {occurrence_id(sids["cu5"], 1, f) for f in fires[-5:]}
    dispatch = TopicReader(settings, [topic_name(settings, "dispatch", slow.name)], Occurrence)
    try:
        second = InProcess(settings, tenants, clock)
        try:
            second.wait_owning(settings.partitions)
            dispatch.read_until(at_least(1), timeout_s=20, settle_s=0)
        finally:
            second.stop()  # a restart (or rebalance) with catch-up work still pending
        if len(dispatch.seen) >= len(expected):
            pytest.fail(f"premise: the backlog drained before the stop ({len(dispatch.seen)} seen)")
        third = InProcess(settings, tenants, clock)
        try:
            third.wait_owning(settings.partitions)
            dispatch.read_until(at_least(len(expected)), timeout_s=12, settle_s=2.0)
        finally:
            third.stop()
        assert_exactly_once(outage_ids(dispatch, fires), expected)
        t_events = topic_name(settings, "occurrence-events", slow.name)
        events = TopicReader(settings, [t_events], OccurrenceEvent)
        try:
            events.read_until(at_least(5), timeout_s=10, settle_s=0.5)
        finally:
            events.close()
        # MISSED for the five beyond the limit; ENQUEUED notes for catch-up the quota delayed
        assert {s.value.state for s in events.seen} <= {"MISSED", "ENQUEUED"}
        events.seen = [s for s in events.seen if s.value.state == "MISSED"]
        assert_exactly_once(outage_ids(events, fires), {occurrence_id(sids["cu5"], 1, f) for f in fires[:5]})
    finally:
        dispatch.close()


# -- 4. fairness: a burst does not hold back another tenant's strict work ---------


def test_strict_occurrence_of_a_second_tenant_is_not_held_behind_a_burst(
    cluster: Settings, tmp_path: Path
) -> None:
    n = 4000  # ~1,000 per shard: two ticks of 500 each
    budget = 500
    p = spawn_processor("fo-fair", tmp_path, "--tick-budget", str(budget))
    reader = TopicReader(
        cluster,
        [topic_name(cluster, "dispatch", BURST.name), topic_name(cluster, "dispatch", STRICT.name)],
        Occurrence,
    )
    try:
        wait_for_assignment(
            cluster, lambda m: m == {p.client_id: {0, 1, 2, 3}}, 90, "one processor owning all"
        )
        due = int(time.time()) + 20
        burst = create_commands(cluster, BURST.name, [once(due) for _ in range(n)])
        (strict,) = create_commands(cluster, STRICT.name, [once(due)])
        assert time.time() < due - 1, "loading took too long for the test's premise"
        reader.read_until(at_least(n + 1), timeout_s=due - time.time() + 90, settle_s=2.0)
    finally:
        reader.close()
        p.stop()
    a = [s for s in reader.seen if s.value.tenant == BURST.name]
    b = [s for s in reader.seen if s.value.tenant == STRICT.name]
    assert_exactly_once([s.value.occurrence_id for s in a], {occurrence_id(s, 1, due) for s in burst})
    assert_exactly_once([s.value.occurrence_id for s in b], {occurrence_id(strict, 1, due)})
    (mine,) = b
    first_tick = min(s.value.enqueued_at_ms for s in a)
    # The premise: on the strict schedule's shard the burst needed several ticks.
    same_shard = [s for s in a if s.partition == mine.partition]
    assert len(same_shard) > budget
    assert len({s.value.enqueued_at_ms for s in same_shard}) > 1
    # Every shard ticks with one clock value per loop (runtime.Processor._loop_once): the strict occurrence
    # went out in the very first tick that emitted anything.
    assert mine.value.enqueued_at_ms == first_tick, (mine.value.enqueued_at_ms - first_tick, "ms late")
