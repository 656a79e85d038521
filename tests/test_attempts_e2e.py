"""The attempt lifecycle end to end: a real processor, real workers, the real broker.

Retries then DEAD and the DLQ, replay with the same occurrence id, a
permanent failure, lease expiry fencing an old worker, cancel/update while
enqueued, and a worker killed between its effect and its offset commit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from dlq_topic import read_dlq

from scheduler.client import SchedulerClient
from scheduler.dlq import replay
from scheduler.domain import ScheduleSpec
from scheduler.kafka.clients import consumer
from scheduler.processor.runtime import Processor
from scheduler.records import OccurrenceEvent, occurrence_events
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker import Context, PermanentError, RetryableError, Worker

pytestmark = pytest.mark.kafka
TENANT = "lc"


def once_in(seconds: int, **kw: object) -> ScheduleSpec:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(time.time()) + seconds))
    return ScheduleSpec(kind="once", at=at, timezone="UTC", handler="h", **kw)  # type: ignore[arg-type]


class Running:
    """A processor or worker run in a thread of the test process."""

    def __init__(self, target: Processor | Worker) -> None:
        self.target = target
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.target.run()
        except BaseException as exc:  # shown by stop(): a dead processor is not a mere timeout
            self.error = exc
            raise

    def stop(self) -> None:
        self.target.stop()
        self.thread.join(60)
        assert self.error is None, f"{type(self.target).__name__} died: {self.error!r}"


class Events:
    """Follows a tenant's ``ksched.occurrence-events.<tenant>`` read_committed."""

    def __init__(self, settings: Settings, tenant: str = TENANT) -> None:
        self.c = consumer(settings.kafka())
        topic = topic_name(settings, "occurrence-events", tenant)
        self.c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        self.seen: list[OccurrenceEvent] = []

    def wait(self, pred: Callable[[list[OccurrenceEvent]], bool], timeout_s: float) -> list[OccurrenceEvent]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.c.consume(500, 0.2):
                if m.error() is None:
                    self.seen += occurrence_events(m.value() or b"")
            if pred(self.seen):
                return self.seen
        raise AssertionError(f"timed out; events so far: {[(e.state, e.attempt) for e in self.seen]}")

    def of(self, oid: str) -> list[tuple[str, int | None]]:
        return [(e.state, e.attempt) for e in self.seen if e.occurrence_id == oid]

    def close(self) -> None:
        self.c.close()


@pytest.fixture(scope="module")
def stack(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT, retry_budget_per_min=0))
    apply_all()
    settings = kafka_settings.replace(lease_s=3, tick_interval_ms=50)
    proc = Running(Processor(settings))
    with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
        client.create(TENANT, once_in(86_400), key="warm-up")
    yield settings
    proc.stop()


def worker(settings: Settings, handlers: dict[str, Callable[[Context], object]], **kw: object) -> Running:
    kw.setdefault("heartbeat_s", 0.5)  # the processor's lease is 3 s in these tests
    if kw["heartbeat_s"] >= settings.lease_s:  # a worker that heartbeats too late, on purpose
        settings = settings.replace(lease_s=1000)
    w = Worker(settings, tenant=TENANT, handlers=handlers, grace_s=1, **kw)  # type: ignore[arg-type]
    r = Running(w)
    assert w.wait_ready(60)
    return r


def test_retries_then_dead_then_replay_runs_it_again_with_the_same_id(stack: Settings) -> None:
    calls: list[tuple[str, int]] = []
    replayed = threading.Event()

    def h(ctx: Context) -> None:
        calls.append((ctx.occurrence_id, ctx.attempt))
        if not replayed.is_set():
            raise RetryableError("down")

    events = Events(stack)
    w = worker(stack, {"h": h})
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            spec = once_in(3, retry_max_attempts=2, retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
            sid = client.create(TENANT, spec, key="retry-dead").schedule_id
        events.wait(lambda ev: any(e.schedule_id == sid and e.state == "DEAD" for e in ev), 60)
        (oid,) = {e.occurrence_id for e in events.seen if e.schedule_id == sid}
        assert events.of(oid) == [("RETRY_WAIT", 1), ("DEAD", 2)]
        assert calls == [(oid, 1), (oid, 2)]
        dead = [d for d in read_dlq(stack, TENANT) if d.occurrence_id == oid]
        assert [(d.attempts, d.last_error_class) for d in dead] == [
            (2, "scheduler.worker.handlers.RetryableError")
        ]
        replayed.set()
        replay(stack, dead, int(time.time() * 1000))
        events.wait(
            lambda ev: ("SUCCEEDED", 3) in [(e.state, e.attempt) for e in ev if e.occurrence_id == oid], 60
        )
        assert calls[-1] == (oid, 3)  # the same occurrence id, the next attempt
    finally:
        w.stop()
        events.close()


def test_a_permanent_failure_is_dead_at_once(stack: Settings) -> None:
    def h(ctx: Context) -> None:
        raise PermanentError("bad payload")

    events = Events(stack)
    w = worker(stack, {"h": h})
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            sid = client.create(TENANT, once_in(3), key="permanent").schedule_id
        events.wait(lambda ev: any(e.schedule_id == sid and e.state == "DEAD" for e in ev), 60)
        (oid,) = {e.occurrence_id for e in events.seen if e.schedule_id == sid}
        assert events.of(oid) == [("DEAD", 1)]
        assert oid in {d.occurrence_id for d in read_dlq(stack, TENANT)}
    finally:
        w.stop()
        events.close()


def test_lease_expiry_gives_a_new_attempt_and_the_old_completion_is_ignored(stack: Settings) -> None:
    first_done = threading.Event()
    calls: list[int] = []

    def h(ctx: Context) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            time.sleep(7)  # no heartbeat for longer than lease_s=3
            first_done.set()

    events = Events(stack)
    w = worker(stack, {"h": h}, heartbeat_s=100, concurrency=2)
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            spec = once_in(3, retry_backoff_base_s=1.0, retry_backoff_cap_s=1.0)
            sid = client.create(TENANT, spec, key="lease").schedule_id
        events.wait(lambda ev: any(e.schedule_id == sid and e.state == "SUCCEEDED" for e in ev), 60)
        assert first_done.wait(30)
        time.sleep(2)  # the old worker's late SUCCEEDED has been reported and applied by now
        events.wait(lambda ev: True, 1)
        (oid,) = {e.occurrence_id for e in events.seen if e.schedule_id == sid}
        states = events.of(oid)
        assert states == [("RETRY_WAIT", 1), ("SUCCEEDED", 2)], states
        assert "LeaseExpired" in next(e.reason or "" for e in events.seen if e.occurrence_id == oid)
        assert sorted(calls) == [1, 2]
    finally:
        w.stop()
        events.close()


def test_cancel_or_update_while_enqueued_is_not_executed(stack: Settings) -> None:
    ran: list[str] = []
    events = Events(stack)
    with SchedulerClient(stack, timeout_s=60) as client:
        canceled = client.create(TENANT, once_in(2), key="cancel-enqueued").schedule_id
        updated = client.create(TENANT, once_in(2), key="update-enqueued").schedule_id
        time.sleep(5)  # both dispatched, no worker running: enqueued
        client.cancel(TENANT, canceled)
        client.update(TENANT, updated, once_in(3600))
    w = worker(stack, {"h": lambda ctx: ran.append(ctx.schedule_id)})
    try:
        events.wait(
            lambda ev: {e.schedule_id for e in ev if e.state == "CANCELED"} >= {canceled, updated}, 60
        )
        assert canceled not in ran and updated not in ran
    finally:
        w.stop()
        events.close()


CRASH_HANDLERS = """
import os, sqlite3
from scheduler.idempotency import PostgresStore, SQLiteStore
from scheduler.worker import Handlers

handlers = Handlers()
dsn = os.environ["TEST_STORE"]
pg = os.environ["TEST_BACKEND"] == "postgres"
store = PostgresStore(dsn) if pg else SQLiteStore(dsn)

@handlers.register("h")
def h(ctx):
    def effect(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS effects (occurrence_id TEXT)")
        conn.execute("INSERT INTO effects VALUES (%s)" % ("%s" if pg else "?"), (ctx.occurrence_id,))
    store.run_once(ctx.occurrence_id, effect)
    marker = os.environ["TEST_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(137)  # after the effect, before the report and the offset commit
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_worker_killed_after_its_effect_redelivers_without_a_second_effect(
    stack: Settings, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "crash_handlers.py").write_text(CRASH_HANDLERS)
    store = request.getfixturevalue("pg_dsn") if backend == "postgres" else str(tmp_path / "effects.db")
    env = {
        **os.environ,
        "TEST_STORE": store,
        "TEST_BACKEND": backend,
        "TEST_MARKER": str(tmp_path / "crashed"),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    cmd = [
        sys.executable,
        "-m",
        "scheduler",
        "worker",
        "--tenant",
        TENANT,
        "--handlers",
        "crash_handlers",
        "--no-metrics",
        "--log-level",
        "WARNING",
    ]
    events = Events(stack)
    first = subprocess.Popen(cmd, env=env)
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            sid = client.create(TENANT, once_in(4), key=f"crash-{backend}").schedule_id
        assert first.wait(60) == 137  # it crashed right after the effect
        second = subprocess.Popen(cmd, env=env)
        try:
            events.wait(lambda ev: any(e.schedule_id == sid and e.state == "SUCCEEDED" for e in ev), 90)
        finally:
            second.terminate()
            second.wait(30)
        (oid,) = {e.occurrence_id for e in events.seen if e.schedule_id == sid}
        rows = _effects(backend, store, oid)
        assert rows == 1, f"{rows} effects for one occurrence"
    finally:
        if first.poll() is None:
            first.kill()
        events.close()


def _effects(backend: str, store: str, oid: str) -> int:
    if backend == "postgres":
        import psycopg

        with psycopg.connect(store) as conn:
            row = conn.execute("SELECT count(*) FROM effects WHERE occurrence_id = %s", (oid,)).fetchone()
    else:
        import sqlite3

        with sqlite3.connect(store) as conn:
            row = conn.execute("SELECT count(*) FROM effects WHERE occurrence_id = ?", (oid,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_skip_if_running_with_a_90s_job_every_minute(stack: Settings) -> None:
    running, peak, started = [0], [0], []
    lock = threading.Lock()

    def slow(ctx: Context) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            started.append(ctx.scheduled_for_ms // 1000)
        try:
            ctx.wait_cancelled(90)
        finally:
            with lock:
                running[0] -= 1

    events = Events(stack)
    w = worker(stack, {"h": slow}, concurrency=4)
    try:
        with SchedulerClient(stack, timeout_s=60) as client:
            spec = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h",
                                overlap="SKIP_IF_RUNNING")
            sid = client.create(TENANT, spec, key="skip-if-running").schedule_id

        def two_each(ev: list[OccurrenceEvent]) -> bool:
            mine = [e for e in ev if e.schedule_id == sid]
            return sum(e.state == "SKIPPED_OVERLAP" for e in mine) >= 2 and len(started) >= 2

        events.wait(two_each, 300)
        skipped = sorted(e.scheduled_for_ms // 1000 for e in events.seen
                         if e.schedule_id == sid and e.state == "SKIPPED_OVERLAP")
        ran = sorted(started)
        assert peak[0] == 1, "two occurrences ran at once"
        assert ran[1] - ran[0] == 120  # every other minute runs ...
        assert skipped[:2] == [ran[0] + 60, ran[1] + 60]  # ... and the ones between are skipped
    finally:
        w.stop()
        events.close()
