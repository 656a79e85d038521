"""``ksched bench api``: creates and describes through the HTTP API at N concurrent clients.

In a fresh namespace: a processor, a history indexer and one ``ksched api`` process, with
``--api-workers`` worker processes (the tenant's request rate unlimited: the limiter is not what
is measured; the API's CPU is its processes' together). An asyncio client (one keep-alive
connection per client) first sends ``--creates`` creates (``POST /v1/schedules``, each timed from
the request to its 201: the processor's round trip included), then, once the history store has
indexed them, ``--describes`` describes (``GET /v1/schedules/{id}``) of random created ones, then
``--changes`` pauses (``POST /v1/schedules/{id}:pause``, each timed to its 200: the processor's round
trip included) of the created ones in order, a second pass resuming them, and so on. The
client (scheduler/bench/http_client.py: a small one, httpx cost more CPU than the server) runs on
the same machine: its CPU is counted in the load average reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from scheduler.bench.http_client import Connection

BODY = {"kind": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "handler": "report"}
BODY_BYTES = json.dumps(BODY).encode()
TENANT = "ba"


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "api", help="creates/s and create/describe latency through the HTTP API"
    )
    p.add_argument("--creates", type=int, default=5000)
    p.add_argument("--describes", type=int, default=2000)
    p.add_argument("--changes", type=int, default=0,
                   help="pauses, then resumes, of the created schedules (default 0: none)")
    p.add_argument("--clients", type=int, default=64, help="concurrent HTTP clients (default 64)")
    p.add_argument("--api-workers", type=int, default=1, metavar="N",
                   help="`ksched api --workers N` (default 1)")
    p.add_argument("--json", dest="json_file", default="bench-out/api.json")
    p.set_defaults(handler=_run)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def _drive(
    clients: int, n: int, call: Callable[[Connection, int], Awaitable[int]], base: str, key: str
) -> tuple[list[float], dict[int, int], float]:
    """``n`` calls spread over ``clients`` connections: (sorted latencies of the successes,
    count by status, wall seconds)."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    todo = iter(range(n))
    headers = {"Authorization": f"Bearer {key}"}

    async def client() -> None:
        async with _connect(base, headers) as c:
            for i in todo:
                t0 = time.perf_counter()
                status = await call(c, i)
                dt = time.perf_counter() - t0
                statuses[status] = statuses.get(status, 0) + 1
                if status < 300:
                    latencies.append(dt)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return sorted(latencies), statuses, time.perf_counter() - t0


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "scheduler", *args], env=env)


def _run(args: argparse.Namespace) -> int:
    from scheduler.bench.common import (
        bench_namespace,
        free_port,
        report,
        speed_probe_us,
        start_processor,
        wait_restored,
    )
    from scheduler.demo.api import wait_ready
    from scheduler.subprocesses import stop_all
    from scheduler.tenant_admin import create_api_key, current
    from scheduler.tenants import Tenant

    api_port, metrics_port = free_port(), free_port()
    probe_before = speed_probe_us()
    space = bench_namespace(
        [Tenant(name=TENANT, max_schedules=2 * args.creates + 1000)], KSCHED_API_RATE_PER_S="0"
    )
    env = {**space.env, "KSCHED_HISTORY_DSN": f"sqlite:///{space.folder / 'history.db'}"}
    table = current(space.settings)
    key, _ = create_api_key(space.settings, table, table.target[TENANT], "bench")
    procs = [
        start_processor(env, metrics_port),
        _start(env, "history", "--no-metrics", "--log-level", "WARNING"),
        api := _start(env, "api", "--port", str(api_port), "--workers", str(args.api_workers)),
    ]
    base = f"http://127.0.0.1:{api_port}"
    try:
        if wait_restored(metrics_port, space.settings.partitions, 120) is None:
            print("bench api: the processor did not restore within 120 s", file=sys.stderr)
            return 1
        # /healthz: /readyz waits for the history store to hold something of the namespace
        not_ready = wait_ready(base, api, 120, "/healthz") or _workers_up(api.pid, args.api_workers, 120)
        if not_ready:
            print(f"bench api: {not_ready}", file=sys.stderr)
            return 1
        pids = {"api": api.pid, "processor": procs[0].pid, "history": procs[1].pid, "client": os.getpid()}
        if (broker := _local_broker_pid(space.settings)) is not None:
            pids["broker"] = broker  # the embedded broker's share: a create is a processor transaction's
        cpu = _CpuMeter(pids, f"http://127.0.0.1:{metrics_port}/metrics")
        out = asyncio.run(_measure(base, key, args, cpu))
        out.update(_stage_means(base, metrics_port))
    finally:
        stop_all(procs)
        space.close()
    out["api_workers"] = args.api_workers
    # This machine's speed swings by a fifth within a day: the same probe before and after says
    # which speed a run had (docs/api.md); compare runs of like speed, or alternate versions.
    out["speed_probe_us_before"] = probe_before
    out["speed_probe_us_after"] = speed_probe_us()
    out["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    report(out, args.json_file)
    return 0 if out["create_non_2xx"] == 0 and out["describe_non_2xx"] == 0 else 1


def _local_broker_pid(settings: Any) -> int | None:
    """The pid of the embedded one-node broker the bench runs on, or None (another cluster)."""
    from scheduler.localbroker import LocalBroker, for_settings

    if settings.bootstrap:
        return None
    broker = for_settings(settings)
    return broker.pid() if isinstance(broker, LocalBroker) else None


def _workers_up(pid: int, workers: int, timeout_s: float) -> str | None:
    """None once ``ksched api --workers N`` (pid) has its N worker processes, else why not: one
    answering /healthz may be the first of them."""
    import psutil

    if workers == 1:
        return None
    deadline = time.monotonic() + timeout_s
    while len(api_workers(psutil.Process(pid))) < workers:
        if time.monotonic() > deadline:
            return f"ksched api --workers {workers}: not every worker started within {timeout_s} s"
        time.sleep(0.2)
    return None


def api_workers(parent: Any) -> list[Any]:
    """The uvicorn workers of a ``ksched api`` process (its children but multiprocessing's tracker)."""
    return [c for c in parent.children() if "resource_tracker" not in " ".join(c.cmdline())]


class _CpuMeter:
    """CPU seconds (user + system) each process spent between :meth:`mark` and :meth:`per`: on a
    shared machine the figure that does not depend on the other tenants of the CPUs. A process's
    figure includes its children's (the API's workers), those alive at :meth:`mark`. Also the
    processor's transactions (its ``/metrics``): a create's broker CPU is their share."""

    def __init__(self, pids: dict[str, int], processor_metrics: str) -> None:
        import psutil

        self._procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._at: dict[str, float] = {}
        self._family = {name: [p] for name, p in self._procs.items()}
        self._metrics = processor_metrics
        self._transactions = 0.0

    def _now(self) -> dict[str, float]:
        return {name: sum(sum(p.cpu_times()[:2]) for p in family) for name, family in self._family.items()}

    def mark(self) -> None:
        self._family = {name: [p, *p.children(recursive=True)] if name == "api" else [p]
                        for name, p in self._procs.items()}
        self._at = self._now()
        self._transactions = _transactions(self._metrics)

    def per(self, n: int, what: str) -> dict[str, float]:
        """CPU milliseconds per ``what`` (``n`` of them) of each process since :meth:`mark`, and
        the processor's transactions per ``what``."""
        now = self._now()
        txns = (_transactions(self._metrics) - self._transactions) / max(1, n)
        return {**{f"{name}_cpu_ms_per_{what}": round(1000 * (now[name] - self._at[name]) / max(1, n), 3)
                   for name in now}, f"processor_transactions_per_{what}": round(txns, 4)}


def _transactions(url: str) -> float:
    """The processor's committed transactions so far (``ksched_transaction_seconds_count``)."""
    return _histogram_totals(url, "ksched_transaction_seconds").get("all", (0.0, 0.0))[1]


def _histogram_totals(url: str, metric: str) -> dict[str, tuple[float, float]]:
    """``metric``'s (sum, count) at the /metrics ``url``, by its ``stage`` label ("all" without one)."""
    import urllib.request

    text = urllib.request.urlopen(url, timeout=5).read().decode()
    got: dict[str, list[float]] = {}
    for line in text.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith(metric + part):
                label = line.split('stage="')[1].split('"')[0] if 'stage="' in line else "all"
                got.setdefault(label, [0.0, 0.0])[part == "_count"] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in got.items()}


def _connect(base: str, headers: dict[str, str]) -> Connection:
    url = urlsplit(base)
    return Connection(url.hostname or "127.0.0.1", url.port or 80, headers)


IDLE_S = 3.0  # measured idle before the creates


async def _measure(base: str, key: str, args: argparse.Namespace, cpu: _CpuMeter) -> dict[str, Any]:
    ids: list[str] = []

    async def create(c: Connection, i: int) -> int:
        status, body = await asyncio.wait_for(c.request("POST", "/v1/schedules", BODY_BYTES), 30)
        if status == 201:
            ids.append(json.loads(body)["schedule_id"])
        return status

    async def describe(c: Connection, i: int) -> int:
        return (await asyncio.wait_for(c.get(f"/v1/schedules/{random.choice(ids)}"), 30))[0]

    async def change(c: Connection, i: int) -> int:  # never two clients on one schedule at once
        round_, at = divmod(i, len(ids))
        verb = "resume" if round_ % 2 else "pause"
        return (await asyncio.wait_for(c.request("POST", f"/v1/schedules/{ids[at]}:{verb}", b""), 30))[0]

    await _drive(args.clients, args.clients, create, base, key)  # warm-up: connections, topics
    # What each process burns with nothing to do (polls, long fetches, ticks): part of every
    # per-create figure below, which is CPU over the creates' wall time divided by their count.
    cpu.mark()
    await asyncio.sleep(IDLE_S)
    cpu_idle = cpu.per(round(IDLE_S * 1000), "idle_ms")
    load_before = os.getloadavg()[0]
    cpu.mark()
    created, c_status, c_wall = await _drive(args.clients, args.creates, create, base, key)
    cpu_creates = cpu.per(args.creates, "create")
    await _indexed(base, key, ids[-1])
    cpu.mark()
    described, d_status, d_wall = await _drive(args.clients, args.describes, describe, base, key)
    cpu_describes = cpu.per(args.describes, "describe")
    cpu.mark()
    changed, ch_status, ch_wall = await _drive(args.clients, args.changes, change, base, key)
    cpu_changes = cpu.per(args.changes, "change") if args.changes else {}
    return {
        "clients": args.clients,
        "creates": args.creates,
        "rate_per_s": round(len(created) / c_wall, 1),
        "p50_s": _pct(created, 0.5),
        "p99_s": _pct(created, 0.99),
        "max_s": created[-1] if created else float("nan"),
        "create_non_2xx": sum(n for s, n in c_status.items() if s >= 300),
        "create_statuses": {str(s): n for s, n in sorted(c_status.items())},
        "describes": args.describes,
        "describe_rate_per_s": round(len(described) / d_wall, 1),
        "describe_p50_s": _pct(described, 0.5),
        "describe_p99_s": _pct(described, 0.99),
        "describe_non_2xx": sum(n for s, n in d_status.items() if s >= 300),
        "changes": args.changes,
        "change_rate_per_s": round(len(changed) / ch_wall, 1) if args.changes else float("nan"),
        "change_p50_s": _pct(changed, 0.5),
        "change_p99_s": _pct(changed, 0.99),
        "change_non_2xx": sum(n for s, n in ch_status.items() if s >= 300),
        **cpu_creates,
        **cpu_describes,
        **cpu_changes,
        **cpu_idle,
        "load_average_1m_before": round(load_before, 2),
        "cpus": os.cpu_count() or 0,
    }


async def _indexed(base: str, key: str, sid: str, timeout_s: float = 120) -> None:
    """Until the history store answers for ``sid`` (the describes measure reads, not lag)."""
    deadline = time.monotonic() + timeout_s
    async with _connect(base, {"Authorization": f"Bearer {key}"}) as c:
        while (await c.get(f"/v1/schedules/{sid}"))[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"schedule {sid} not in the history store after {timeout_s}s")
            await asyncio.sleep(0.5)


def _stage_means(base: str, processor_metrics_port: int) -> dict[str, float]:
    """Mean seconds of each stage of a command's round trip (the API's
    ``ksched_api_command_stage_seconds``, warm-up included) and of the processor's transactions."""
    stages = _histogram_totals(f"{base}/metrics", "ksched_api_command_stage_seconds")
    processor = f"http://127.0.0.1:{processor_metrics_port}/metrics"
    stages["transaction"] = _histogram_totals(processor, "ksched_transaction_seconds").get("all", (0.0, 0.0))
    return {f"stage_{k}_mean_s": round(total / n, 4) for k, (total, n) in stages.items() if n}
