"""What the Kafka benchmarks share: a throw-away namespace, a processor process, the report."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.settings import Settings
from scheduler.tenants import Tenant


@dataclass
class BenchNamespace:
    """A fresh topic namespace with its own tenant registry and a temp folder; :meth:`close`
    deletes its topics."""

    name: str
    folder: Path
    env: dict[str, str]
    settings: Settings
    admin: Any

    def close(self) -> None:
        doomed = [t for t in self.admin.list_topics(timeout=10).topics if t.startswith(self.name + ".")]
        if doomed:
            self.admin.delete_topics(doomed)


def bench_namespace(tenants: list[Tenant], **env: str) -> BenchNamespace:
    """Create ``bench-<random>``: apply every topic and register ``tenants`` (``env`` is added to
    the environment handed to the processes the benchmark starts)."""
    from scheduler.kafka.admin import admin_client
    from scheduler.settings import load_settings
    from scheduler.tenant_admin import apply_all
    from scheduler.tenants import add_tenant

    name = f"bench-{secrets.token_hex(3)}"
    folder = Path(tempfile.mkdtemp(prefix="ksched-bench-"))
    registry = folder / "tenants.toml"
    full_env = {**os.environ, "KSCHED_NAMESPACE": name, "KSCHED_TENANTS_FILE": str(registry), **env}
    settings = load_settings(env=full_env)
    for t in tenants:
        add_tenant(registry, t)
    admin = admin_client(settings.kafka())
    apply_all(settings)  # the topics, then the registry seeded from the namespace's seed file
    return BenchNamespace(name, folder, full_env, settings, admin)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process's metrics while other benches run)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def speed_probe_us(rounds: int = 5, n: int = 2_000) -> float:
    """This machine's speed now: the CPU µs of encoding one schedule command (pure Python, the
    API's and the processor's kind of work), the best of ``rounds`` runs of ``n``.

    Not a figure of ksched: a yardstick. The same code's benches swing with it on a shared host
    (docs/api.md), so a bench prints it and runs are compared at like speeds."""
    from scheduler.domain import ScheduleSpec
    from scheduler.records import ScheduleCommand, ScheduleSpecRecord, encode
    from scheduler.vocabulary import CommandKind

    spec = ScheduleSpec(kind="cron", cron="0 3 * * *", timezone="Europe/Paris", handler="probe")  # type: ignore[arg-type]
    cmd = ScheduleCommand(
        request_id="probe-request", tenant="probe", kind=CommandKind.CREATE, schedule_id="s-probe",
        idempotency_key=None, expected_version=None, spec=ScheduleSpecRecord.from_domain(spec),
        issued_at_ms=1_800_000_000_000,
    )
    best = float("inf")
    for _ in range(rounds):
        t0 = time.thread_time()
        for _ in range(n):
            encode(cmd)
        best = min(best, time.thread_time() - t0)
    return round(1e6 * best / n, 3)


def start_processor(env: dict[str, str], metrics_port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "scheduler", "processor", "--log-level", "WARNING"]
    return subprocess.Popen([*cmd, "--metrics-port", str(metrics_port)], env=env)


def rss(pid: int) -> int:
    """The resident memory of process ``pid``; 0 once it is gone (a benchmark killed it)."""
    import psutil

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return 0


def _restore_seconds(port: int, shards: int) -> float | None:
    """Wall time a processor spent restoring, from its /metrics; None until all ``shards``
    have reported ready."""
    lines = _metrics_lines(port)
    if lines is None:
        return None
    ready = sum(1 for line in lines if line.startswith("ksched_restore_seconds{"))
    wall = [
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("ksched_restore_wall_seconds_total")
    ]
    return wall[0] if ready >= shards and wall else None


def counter_total(port: int, name: str) -> float | None:
    """The sum of counter ``name`` over its labels in the /metrics of the process on ``port``;
    None when it did not answer."""
    lines = _metrics_lines(port)
    if lines is None:
        return None
    head = (f"{name}{{", f"{name} ")
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(head))


def _metrics_lines(port: int) -> list[str] | None:
    """The lines of the /metrics of the process on ``port``; None when it did not answer."""
    try:
        text: str = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return text.splitlines()


def wait_restored(port: int, shards: int, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        restore_s = _restore_seconds(port, shards)
        if restore_s is not None:
            return restore_s
        time.sleep(0.5)
    return None


def report(out: dict[str, Any], json_file: str) -> Path:
    """Print the figures aligned and write them to ``json_file`` (folders created)."""
    path = Path(json_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    width = max(len(k) for k in out) + 2
    for k, v in out.items():
        # Four significant digits below 1: CPU seconds per occurrence are tens of microseconds.
        shown = (f"{v:,.3f}" if abs(v) >= 1 else f"{v:.4g}") if isinstance(v, float) else v
        print(f"{k:{width}} {shown}")
    print(f"wrote {path}")
    return path


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None (said once) when matplotlib is missing:
    a benchmark's figures do not depend on its plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib is not installed: no PNG (pip install -e '.[dev]')")
        return None
    return plt


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (gone ones count 0)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def main_thread_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``'s main thread: a Python process's critical path
    (librdkafka's own threads run beside it on the other cores); 0 once it is gone."""
    import psutil

    try:
        threads = psutil.Process(pid).threads()
    except psutil.Error:
        return 0.0
    return float(sum(t.user_time + t.system_time for t in threads if t.id == pid))


def topic_bytes(settings: Settings) -> dict[str, int]:
    """Bytes of the namespace's topic logs per topic (without the ``<namespace>.`` prefix), summed
    over partitions and replicas, read from the local broker's ``log.dirs`` (every node's under
    ``kafka_data_dir``). Empty for a broker this machine does not run: the figure is the on-disk
    log, segments and batch headers included, which only the broker's own files show."""
    root = Path(settings.kafka_data_dir).expanduser()
    prefix = settings.namespace + "."
    out: dict[str, int] = {}
    if not root.is_dir():
        return out
    for log_dir in [root / "kraft", *root.glob("node-*/kraft")]:  # one node, or `--nodes 3`
        for d in log_dir.glob(prefix + "*") if log_dir.is_dir() else ():
            if d.name.endswith("-delete"):
                continue  # a deleted topic's partition, being removed by the broker
            topic = d.name[len(prefix):].rsplit("-", 1)[0]
            try:
                size = sum(f.stat().st_size for f in d.glob("*.log"))
            except FileNotFoundError:  # deleted (retention, compaction, topic) while we read
                continue
            out[topic] = out.get(topic, 0) + size
    return out


def per_unit(sizes: dict[str, int], n: int, only: tuple[str, ...] | None = None) -> dict[str, float]:
    """:func:`topic_bytes` figures per schedule or occurrence, by topic kind (``dispatch.t0`` and
    ``dispatch.t1`` add up under ``dispatch``), limited to the kinds in ``only`` when given."""
    out: dict[str, float] = {}
    for topic, size in sizes.items():
        kind = topic.split(".", 1)[0]
        if size > 0 and (only is None or kind in only):
            out[kind] = out.get(kind, 0.0) + size / max(1, n)
    return {k: round(v, 1) for k, v in sorted(out.items())}
