"""Serve a process's /metrics on 127.0.0.1 and register it for Prometheus' file-based discovery.

Every ksched process that serves metrics writes ``<prometheus_targets_dir>/<job>-<pid>.json`` (a
``file_sd_configs`` target group: its address and its job) once it listens, and removes the file
when it exits. The Prometheus of ``ksched demo`` (and any other pointed at that folder) scrapes
whatever is registered, so several workers or processors on one machine need no port plan: port 0
lets the OS pick. A process killed without cleanup leaves its file: the next registration sweeps
files whose pid is gone (docs/decisions.md, "Prometheus discovery").
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from scheduler.settings import Settings

#: The job label of each process kind (the alert rules and the dashboard select on it).
JOBS = ("ksched-processor", "ksched-worker", "ksched-history", "ksched-reconcile", "ksched-api")
#: 1, labelled with the process's namespace and role (its job): a reader of the discovery folder
#: (``ksched status``) keeps the endpoints of its own namespace (several share one machine).
PROCESS_INFO = "ksched_process_info"


class MetricsPortError(OSError):
    """The metrics port cannot be listened on; the message names the port and the fix."""


@dataclass(frozen=True)
class Endpoint:
    port: int
    target_file: Path | None  # None: not registered (no folder could be written)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


def serve_metrics(settings: Settings, registry: CollectorRegistry, *, job: str, port: int) -> Endpoint:
    """Listen on ``bind_host``:``port`` (0: any free port) and register the endpoint under ``job``."""
    if job not in JOBS:
        raise ValueError(f"job {job!r}: not one of {', '.join(JOBS)}")
    info = Gauge(PROCESS_INFO, "1 for this process: its namespace and role", ["namespace", "role"],
                 registry=registry)
    info.labels(namespace=settings.namespace, role=job).set(1)
    try:
        server, _ = start_http_server(port, addr=settings.bind_host, registry=registry)
    except OSError as exc:
        raise MetricsPortError(
            f"--metrics-port {port}: cannot listen ({exc.strerror}); "
            "pass another --metrics-port (0: any free port) or --no-metrics"
        ) from None
    bound = int(server.server_port)
    return Endpoint(bound, register(settings.prometheus_targets_dir, job, bound))


def register(folder: Path, job: str, port: int, pid: int | None = None) -> Path | None:
    """Write the target file of ``job`` at ``port`` for this process (removed at exit); None when
    the folder cannot be written (metrics are still served, just not discovered)."""
    pid = os.getpid() if pid is None else pid
    try:
        folder.mkdir(parents=True, exist_ok=True)
        sweep(folder)
        path = folder / f"{job}-{pid}.json"
        tmp = path.with_suffix(".tmp")  # Prometheus reads *.json only: never a half-written file
        group = [{"targets": [f"127.0.0.1:{port}"], "labels": {"job": job}}]
        tmp.write_text(json.dumps(group))
        tmp.replace(path)
    except OSError:
        return None
    if pid == os.getpid():
        atexit.register(unregister, path)
    return path


def unregister(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def sweep(folder: Path) -> list[Path]:
    """Remove the target files of processes that no longer run (killed without cleanup)."""
    removed = []
    for path in folder.glob("*-*.json"):
        pid = path.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            unregister(path)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
