"""The worker's flow control and offsets against the real broker: concurrency, heartbeats,
commit at the lowest unfinished offset, redelivery after a stop beyond grace, the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_worker_support import (
    Concurrency,
    close_producer,
    committed,
    dispatch,
    occ,
    reports,
    running,
    wait_for,
)

from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.worker import Context

pytestmark = pytest.mark.kafka

TENANTS = ("wk-conc", "wk-fast", "wk-grace", "wk-order", "wk-rebal", "wk-cli")


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    for t in TENANTS:
        add_tenant(kafka_settings.tenants_file, Tenant(name=t, max_running=3))
    apply_all()
    yield kafka_settings
    close_producer()


def test_concurrency_limit_holds_while_long_handlers_heartbeat(cluster: Settings) -> None:
    tenant = "wk-conc"
    slow = Concurrency(hold_s=1.0)
    n = 9
    with reports(cluster, tenant) as rep, running(cluster, tenant, {"slow": slow}, heartbeat_s=0.3) as w:
        assert w.concurrency == 3  # the tenant's max_running
        dispatch(cluster, tenant, *(occ(tenant, f"s-{i}", handler="slow") for i in range(n)))
        rep.until(lambda _: len(rep.finals()) == n, timeout=60)
        assert slow.peak == 3, f"peak concurrency {slow.peak}, limit 3"
        for i in range(n):
            kinds = [r.kind for r in rep.of(f"s-{i}")]
            assert kinds[0] == "STARTED" and kinds[-1] == "SUCCEEDED"
            assert kinds.count("HEARTBEAT") >= 2, kinds  # 1 s of work, a beat every 0.3 s
            assert len({r.token for r in rep.of(f"s-{i}")}) == 1


def test_fast_handlers_are_not_held_back_by_pausing(cluster: Settings) -> None:
    """Many short jobs through 2 slots: every pause/resume cycle must cost milliseconds, not
    the fetcher's 1 s idle wake-up (about 2 jobs/s without the prefetch and the seek)."""
    tenant, n = "wk-fast", 3000
    count, lock, all_done = [0], threading.Lock(), threading.Event()

    def tick(ctx: Context) -> None:
        with lock:
            count[0] += 1
            if count[0] == n:
                all_done.set()

    dispatch(cluster, tenant, *(occ(tenant, f"s-{i}", handler="tick") for i in range(n)))
    with running(cluster, tenant, {"tick": tick}, concurrency=2) as w:
        started = time.monotonic()
        assert all_done.wait(30), f"{count[0]} of {n} ran in 30 s"
        elapsed = time.monotonic() - started
        assert elapsed < 10, f"{n} no-op jobs took {elapsed:.1f}s"
        assert w.metrics.value("ksched_worker_paused_total") >= 2  # it did pause and resume
        wait_for(lambda: sum(committed(cluster, tenant, p) for p in range(cluster.partitions)) == n, 10,
                 "every offset committed")


def test_commit_stays_at_the_lowest_unfinished_offset(cluster: Settings) -> None:
    tenant = "wk-order"
    release = threading.Event()

    def slow(ctx: Context) -> None:
        assert release.wait(60)

    handlers = {"slow": slow, "fast": lambda ctx: None}
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers, concurrency=2):
        slow_then_fast = occ(tenant, "s-slow", handler="slow"), occ(tenant, "s-fast", handler="fast")
        dispatch(cluster, tenant, *slow_then_fast, partition=0)  # offsets 0 and 1
        rep.until(lambda _: "s-fast" in rep.finals() and rep.of("s-slow", "STARTED") != [])
        time.sleep(0.6)  # several commit passes
        assert committed(cluster, tenant, 0) <= 0, "committed past the unfinished offset 0"
        release.set()
        wait_for(lambda: committed(cluster, tenant, 0) == 2, 10, "the commit past both records")


def test_stop_beyond_grace_leaves_the_offset_to_the_next_worker(cluster: Settings) -> None:
    tenant = "wk-grace"
    entered, release = threading.Event(), threading.Event()

    def stuck(ctx: Context) -> None:  # ignores cancellation on purpose
        entered.set()
        release.wait(60)

    second: list[str] = []
    try:
        with reports(cluster, tenant) as rep:
            with running(cluster, tenant, {"job": stuck}, worker_id="w-first", grace_s=0.5):
                dispatch(cluster, tenant, occ(tenant, "s-job", handler="job"), partition=0)
                assert entered.wait(30)
                started = time.monotonic()
            assert time.monotonic() - started < 10  # the stop waited about grace_s, not for the handler
            assert committed(cluster, tenant, 0) <= 0
            with running(cluster, tenant, {"job": lambda ctx: second.append(ctx.occurrence_id)},
                         worker_id="w-second"):
                rep.until(lambda _: "s-job" in rep.finals())
                wait_for(lambda: committed(cluster, tenant, 0) == 1, 10, "the second worker's commit")
            assert second == [occ(tenant, "s-job").occurrence_id]
            release.set()
            rep.poll(0.5)
            assert [(r.worker_id, r.kind) for r in rep.of("s-job") if r.kind != "HEARTBEAT"] == [
                ("w-first", "STARTED"), ("w-second", "STARTED"), ("w-second", "SUCCEEDED"),
            ]  # the abandoned attempt is never reported after the stop
    finally:
        release.set()


def test_a_second_worker_takes_over_partitions_without_running_anything_twice(cluster: Settings) -> None:
    tenant = "wk-rebal"
    by_worker: dict[str, list[str]] = {"w-a": [], "w-b": []}
    lock = threading.Lock()

    def job(ctx: Context) -> None:
        time.sleep(0.2)
        with lock:
            by_worker[ctx.worker_id].append(ctx.schedule_id)

    n = 24
    first = running(cluster, tenant, {"job": job}, worker_id="w-a", concurrency=2)
    with reports(cluster, tenant) as rep, first:
        dispatch(cluster, tenant, *(occ(tenant, f"s-{i}", handler="job") for i in range(n)))
        rep.until(lambda _: len(rep.finals()) >= 2)
        # Joining revokes some of w-a's partitions while its handlers run on them: w-a lets them
        # finish and commits before w-b reads those partitions, so nothing runs twice.
        with running(cluster, tenant, {"job": job}, worker_id="w-b", concurrency=2) as b:
            rep.until(lambda _: len(rep.finals()) == n, timeout=60)
            assert b.assigned, "the second worker got no partition"
        rep.poll(0.5)
    ran = by_worker["w-a"] + by_worker["w-b"]
    assert sorted(ran) == sorted(f"s-{i}" for i in range(n)), "an occurrence ran twice or never"
    assert len([r for r in rep.all if r.kind == "SUCCEEDED"]) == n


def test_cli_runs_a_handlers_module_until_sigterm(cluster: Settings, tmp_path: Path) -> None:
    tenant = "wk-cli"
    out = tmp_path / "ran.txt"
    (tmp_path / "jobs.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from scheduler.worker import Handlers

        registry = Handlers()

        @registry.register("touch")
        def touch(ctx):
            with Path({str(out)!r}).open("a") as fh:
                fh.write(ctx.schedule_id + "\\n")
    """))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "scheduler", "worker", "--tenant", tenant, "--handlers", "jobs:registry",
           "--metrics-port", str(port), "--log-level", "warning", "--grace-s", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        dispatch(cluster, tenant, occ(tenant, "s-cli", handler="touch"))
        wait_for(lambda: out.exists() and out.read_text() == "s-cli\n", 30, "the CLI worker to run the job")
        wait_for(lambda: 'outcome="succeeded",tenant="wk-cli"} 1.0' in _metrics(port), 10, "the metric")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())
