"""``ksched demo``: topics, two tenants, a processor, a worker per tenant, a history indexer, the
HTTP API (with a fresh key for the tenant ``demo``), a Prometheus, sample schedules, live view.

Everything the demo registers lives under ``<data dir>/demo`` (its tenant
registry, logs and the handlers' SQLite database), so the demo never edits
``config/``. Schedules are created with idempotency keys: running the demo
again reuses them (the one-time job gets a new key per run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from scheduler.client import SchedulerClient
from scheduler.demo.api import api_url, demo_api_key, wait_ready
from scheduler.domain import ScheduleSpec
from scheduler.prometheus_server import LocalPrometheus, PrometheusError
from scheduler.settings import Settings, load_settings
from scheduler.subprocesses import stop_all
from scheduler.tenants import Tenant, add_tenant, load_tenants

TENANTS = ("demo", "demo-b")


def demo_dir(settings: Settings) -> Path:
    return settings.kafka_data_dir.parent / "demo"


def sample_specs(now: float) -> dict[str, tuple[str, ScheduleSpec]]:
    """name -> (tenant, spec): every minute (flaky), a flexible window, a local-time daily job in a
    DST zone, a one-time job a minute ahead, a 90-second job every minute that skips if running."""
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now + 60))
    return {
        "every-minute": (
            "demo",
            ScheduleSpec(
                kind="cron",
                cron="* * * * *",
                timezone="UTC",
                handler="flaky",
                retry_max_attempts=3,
                retry_backoff_base_s=2.0,
                retry_backoff_cap_s=10.0,
            ),
        ),
        "flexible-2min": (
            "demo",
            ScheduleSpec(kind="cron", cron="*/2 * * * *", timezone="UTC", handler="report", window_minutes=1),
        ),
        "berlin-daily-09:30": (
            "demo",
            ScheduleSpec(kind="cron", cron="30 9 * * *", timezone="Europe/Berlin", handler="report"),
        ),
        f"one-time-{at[11:16]}": ("demo", ScheduleSpec(kind="once", at=at, timezone="UTC", handler="report")),
        "slow-skip-if-running": (
            "demo",
            ScheduleSpec(
                kind="cron", cron="* * * * *", timezone="UTC", handler="slow", overlap="SKIP_IF_RUNNING"
            ),
        ),
        "b-every-minute": (
            "demo-b",
            ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="report"),
        ),
    }


def run_demo(duration_s: float | None = None, live: bool = True) -> int:
    """Run until Ctrl-C (or ``duration_s``); returns 0, or 1 if a child process died."""
    from scheduler.cli.topics_cmd import apply_all

    base = load_settings()
    folder = demo_dir(base)
    folder.mkdir(parents=True, exist_ok=True)
    registry = folder / "tenants.toml"
    env = {**os.environ, "KSCHED_TENANTS_FILE": str(registry), "KSCHED_DEMO_DB": str(folder / "effects.db")}
    os.environ.update({"KSCHED_TENANTS_FILE": str(registry)})
    settings = load_settings()
    known = load_tenants(registry)
    for t in TENANTS:
        if t not in known:
            add_tenant(registry, Tenant(name=t, max_running=8))
    apply_all()
    key = demo_api_key(settings, TENANTS[0])
    prometheus = _start_prometheus(settings, folder)
    children = _start(folder, env, settings.api_port)
    try:
        names = _create_schedules(settings)
        not_ready = wait_ready(api_url(settings), children["api"], 60)
        if not_ready:
            print(f"demo: the API does not answer yet ({not_ready}); see {folder / 'api.log'}")
        print(f"demo: HTTP API at {api_url(settings)} (docs: {api_url(settings)}/docs)")
        print(f"demo: API key of tenant {TENANTS[0]} (shown once, only its hash is kept): {key}")
        print(f"demo: web console at {api_url(settings)}/console (paste the key)")
        if prometheus is not None:
            print(f"demo: Prometheus at {prometheus.url} (alerts: {prometheus.url}/alerts), scraping "
                  f"{prometheus.targets_dir}")
        print(f"demo: try it: curl -H 'Authorization: Bearer {key}' {api_url(settings)}/v1/schedules",
              flush=True)
        return _watch(settings, names, children, duration_s, live, folder)
    finally:
        stop_all(children.values(), 20)
        if prometheus is not None:
            prometheus.stop()


def _start_prometheus(settings: Settings, folder: Path) -> LocalPrometheus | None:
    """A Prometheus on 127.0.0.1:prometheus_port scraping every registered process, the alert
    rules loaded; the demo goes on without it (one line says why) when it cannot start."""
    prom = LocalPrometheus(folder / "prometheus", settings.prometheus_port, settings.prometheus_targets_dir)
    try:
        prom.start()
    except PrometheusError as exc:
        print(f"demo: no Prometheus: {exc}")
        return None
    return prom


def _start(folder: Path, env: dict[str, str], api_port: int) -> dict[str, subprocess.Popen[bytes]]:
    ksched = [sys.executable, "-m", "scheduler"]
    cmds = {
        # --metrics-port 0: any free port, registered for the demo's Prometheus (metrics_endpoint.py)
        "processor": [*ksched, "processor", "--metrics-port", "0", "--log-level", "INFO"],
        "history": [*ksched, "history", "--metrics-port", "0", "--log-level", "INFO"],  # store: history_dsn
        **{
            f"worker-{t}": [
                *ksched,
                "worker",
                "--tenant",
                t,
                "--handlers",
                "scheduler.demo.handlers",
                "--grace-s",
                "5",
                "--metrics-port",
                "0",
                "--log-level",
                "INFO",
            ]
            for t in TENANTS
        },
        "api": [*ksched, "api", "--port", str(api_port)],  # its /metrics registers as ksched-api
    }
    children = {}
    for name, cmd in cmds.items():
        log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        children[name] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return children


def _create_schedules(settings: Settings) -> dict[str, str]:
    names: dict[str, str] = {}
    with SchedulerClient(settings, timeout_s=90) as client:
        for name, (tenant, spec) in sample_specs(time.time()).items():
            acc = client.create(tenant, spec, key=name)
            names[acc.schedule_id] = name
    return names


def _watch(
    settings: Settings,
    names: dict[str, str],
    children: dict[str, subprocess.Popen[bytes]],
    duration_s: float | None,
    live: bool,
    folder: Path,
) -> int:
    from rich.console import Console
    from rich.live import Live

    from scheduler.demo.view import LiveView

    view = LiveView(settings, list(TENANTS), names, int((time.time() - 300) * 1000))
    console = Console()
    console.print(f"demo: logs and the effects database in {folder}")
    end = None if duration_s is None else time.monotonic() + duration_s
    last_print = 0.0
    interrupted = []

    def on_interrupt(signum: int, frame: object) -> None:
        # noted before raising: a C call of the view (a Kafka poll) may swallow the exception, and
        # the children, stopped by the same Ctrl-C, must not then be reported as dying early
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        if live and console.is_terminal:
            with Live(view.render(), console=console, refresh_per_second=2) as screen:
                while end is None or time.monotonic() < end:
                    view.poll()
                    screen.update(view.render())
                    if _dead(children):
                        break
        else:
            while end is None or time.monotonic() < end:
                view.poll()
                if time.monotonic() - last_print > 10:
                    console.print(f"demo: {view.summary()}")
                    last_print = time.monotonic()
                if _dead(children):
                    break
    except KeyboardInterrupt:  # a terminal's Ctrl-C reaches the children too: they stop on their own
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
        console.print(f"demo: {view.summary()}")
        view.close()
    dead = _dead(children)
    if dead and not interrupted:
        console.print(f"demo: {', '.join(dead)} exited early; see its log in {folder}")
        return 1
    return 0


def _dead(children: dict[str, subprocess.Popen[bytes]]) -> list[str]:
    return [name for name, p in children.items() if p.poll() is not None]


