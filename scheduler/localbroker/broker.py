"""The local broker's process: start (and reuse), status, stop and logs of one KRaft JVM.

One combined broker+controller JVM bound to 127.0.0.1, owned by a data dir whose
``broker.pid`` names it and whose ``logs/`` hold its output (layout: the package docstring).
A pid counts as the broker only when its command line runs ``kafka.Kafka`` with this
data dir's ``server.properties``: ``stop`` never signals a stranger.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.kafka.connection import KafkaConnection, resolve
from scheduler.kafka.credentials import CredentialsError
from scheduler.localbroker.config import ADMIN_USER, HOST, MAIN_CLASS, MECHANISM, BrokerConfig
from scheduler.localbroker.errors import LocalBrokerError
from scheduler.localbroker.java import find_java
from scheduler.localbroker.maven import JarCache
from scheduler.localbroker.storage import DataDir
from scheduler.localbroker.system import alive, locked, port_in_use, port_owner, read_cmdline, tail


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    version: str | None
    listener: str
    data_dir: Path
    topics: list[str]
    healthy: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "pid": self.pid,
            "version": self.version,
            "listener": self.listener,
            "data_dir": str(self.data_dir),
            "topics": list(self.topics),
            "healthy": self.healthy,
            "detail": self.detail,
        }


# How long a started broker may refuse the admin's password before start-up gives up: the broker
# fills its SCRAM cache from the metadata log, so a refusal right after the listener opens is normal.
REFUSED_GRACE_S = 20.0
_REFUSED = "the broker refuses the admin's password"


def quiet_admin(conn: KafkaConnection, refused: list[str] | None = None) -> Any:
    """An AdminClient that says nothing while the broker boots (connection-refused noise is
    expected, not news); a refused login is appended to ``refused`` (librdkafka reports it only
    to the error callback and otherwise retries quietly)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    def on_error(err: KafkaError) -> None:
        if refused is not None and err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())

    return AdminClient(conn.config(log_level=0, error_cb=on_error, **{"socket.timeout.ms": 3000}))


class LocalBroker:
    """Start, stop and inspect one local Kafka broker owned by ``config.data_dir``."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir).expanduser().absolute()
        self.cache_dir = Path(config.cache_dir).expanduser().absolute()
        self.jars = JarCache(self.cache_dir, config.version)
        self.storage = DataDir(self.data_dir, config)
        # Shorthands the CLI and tests use.
        self.version_dir = self.jars.version_dir
        self.libs_dir = self.jars.libs_dir
        self.marker = self.jars.marker
        self.logs_dir = self.storage.logs_dir
        self.server_properties = self.storage.server_properties
        self.pid_file = self.data_dir / "broker.pid"
        self.credentials_file = self.storage.credentials_file
        # Set by start() when it had to do something the user should hear about (a reformat).
        self.notice = ""

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.config.port}"

    def connection(self, principal: str = ADMIN_USER) -> KafkaConnection:
        """How a client connects to this broker as ``principal`` (default: the super user),
        its password read from the credentials file. Raises ``CredentialsError`` without one."""
        return resolve(
            self.bootstrap, protocol="SASL_PLAINTEXT", mechanism=MECHANISM, username="", password="",
            ssl_ca_location="", credentials_file=self.credentials_file, principal=principal,
        )  # fmt: skip

    # ----------------------------------------------------------------- artifacts

    def artifacts_ready(self) -> bool:
        """True when a complete jar set for this version is cached (no Maven needed)."""
        return self.jars.ready()

    def ensure_artifacts(self) -> Path:
        """The broker's jar folder, resolved with Maven on first use and reused offline later."""
        return self.jars.ensure()

    # ----------------------------------------------------------------- process discovery

    def _is_ours(self, pid: int) -> bool:
        args = read_cmdline(pid)
        return MAIN_CLASS in args and str(self.server_properties) in args

    def pid(self) -> int | None:
        """The live pid of this data dir's broker, or None: what :meth:`status` reports, without
        its metadata request."""
        return self._pid()

    def _pid(self) -> int | None:
        """The live pid of this data dir's broker: from the pid file, else found in /proc."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and alive(pid) and self._is_ours(pid):
            return pid
        if pid is not None:
            self.pid_file.unlink(missing_ok=True)  # stale
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._is_ours(int(entry.name)) and alive(int(entry.name)):
                found = int(entry.name)
                self.pid_file.write_text(f"{found}\n")
                return found
        return None

    @staticmethod
    def _version_of(pid: int) -> str | None:
        """Kafka's version as named by the ``kafka_2.13-<v>.jar`` on the running JVM's classpath."""
        args = read_cmdline(pid)
        for i, a in enumerate(args):
            if a in ("-cp", "-classpath") and i + 1 < len(args):
                for entry in args[i + 1].split(os.pathsep):
                    folder = Path(entry[:-1] if entry.endswith("*") else entry)
                    for jar in folder.glob("kafka_2.13-*.jar") if folder.is_dir() else []:
                        m = re.fullmatch(r"kafka_2\.13-(.+)\.jar", jar.name)
                        if m:
                            return m.group(1)
        return None

    def _metadata(self, timeout_s: float) -> tuple[list[str], str]:
        """Topic names and an empty error, or ([], error) when the broker does not answer."""
        from confluent_kafka import KafkaException

        refused: list[str] = []
        try:
            admin = quiet_admin(self.connection(), refused)
            md = admin.list_topics(timeout=timeout_s)
        except CredentialsError as exc:
            return [], str(exc)
        except KafkaException as exc:
            admin.poll(0.1)  # serves the error callback
            if refused:
                return [], f"{_REFUSED} ({refused[-1]})"
            return [], str(exc.args[0] if exc.args else exc)
        if not md.brokers:
            return [], "metadata lists no broker yet"
        return sorted(md.topics), ""

    # ----------------------------------------------------------------- status

    def status(self) -> BrokerStatus:
        pid = self._pid()
        if pid is None:
            detail = "not running"
            if port_in_use(self.config.port):
                owner = port_owner(self.config.port)
                who = f" by pid {owner[0]}" if owner else ""
                detail += f"; port {self.config.port} is held{who} by another process"
            return BrokerStatus(
                running=False, pid=None, version=None, listener=self.bootstrap,
                data_dir=self.data_dir, topics=[], healthy=False, detail=detail,
            )  # fmt: skip
        version = self._version_of(pid)
        topics, err = self._metadata(3.0)
        healthy = not err
        detail = (
            f"Kafka {version or '?'} pid {pid} on {self.bootstrap}, {len(topics)} topics"
            if healthy
            else f"process {pid} runs but does not answer metadata on {self.bootstrap}: {err}"
        )
        return BrokerStatus(
            running=True, pid=pid, version=version, listener=self.bootstrap,
            data_dir=self.data_dir, topics=topics, healthy=healthy, detail=detail,
        )  # fmt: skip

    # ----------------------------------------------------------------- start

    def _check_ports(self) -> None:
        for port, role in ((self.config.port, "listener"), (self.config.controller_port, "controller")):
            if not port_in_use(port):
                continue
            owner = port_owner(port)
            knob = "KSCHED_KAFKA_PORT" if role == "listener" else "KSCHED_KAFKA_CONTROLLER_PORT"
            if owner is None:
                who = "another process"
            else:
                args = read_cmdline(owner[0])
                if MAIN_CLASS in args:
                    i = args.index(MAIN_CLASS)
                    cfg = args[i + 1] if i + 1 < len(args) else "?"
                    raise LocalBrokerError(
                        f"port {port} ({role}) is held by another Kafka broker (pid {owner[0]}, "
                        f"config {cfg}), "
                        f"not the one of {self.data_dir}; stop it or pick another port with {knob}"
                    )
                who = f"pid {owner[0]} ({' '.join(owner[1].split())[:80]})"
            raise LocalBrokerError(
                f"port {port} ({role}) on {HOST} is already in use by {who}; stop it or pick another "
                f"port with {knob}"
            )

    def _last_log_problem(self) -> str:
        text = self.logs(200)
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("---")]
        for ln in reversed(lines):
            if " ERROR " in ln or "Exception" in ln or ln.startswith("Error"):
                return ln.strip()[:300]
        return lines[-1].strip()[:300] if lines else "no log output"

    def start(self, *, fresh: bool = False, timeout_s: float = 120) -> BrokerStatus:
        """Start the broker (or reuse the healthy one of this data dir) and wait until it serves metadata."""
        deadline = time.monotonic() + timeout_s
        return self.wait_healthy(self.launch(fresh=fresh), deadline)

    def launch(self, *, fresh: bool = False, cluster_id: str | None = None) -> int:
        """Start the JVM without waiting for it (or find the one running): its pid. A cluster's
        nodes are all launched before any is waited for: none serves before a quorum is up.
        ``cluster_id``: the one to format with when the storage is not formatted yet."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with locked(self.data_dir / ".lock"):
            pid = self._pid()
            legacy = self.storage.unauthenticated()
            if legacy and not fresh:
                self.notice = self.storage.legacy_notice(pid)  # raises while its old broker runs
            if pid is not None and fresh:
                self.stop()
                pid = None
            if pid is not None:
                return pid
            self._check_ports()
            java, _ = find_java()
            libs = self.ensure_artifacts()
            if fresh or legacy:
                self.storage.wipe()
            self.storage.check_formatted_ports()
            self.storage.write_config()
            if not self.storage.formatted():
                self.storage.format(java, libs, cluster_id)
            cmd = [
                str(java),
                f"-Xmx{self.config.heap_mb}m", f"-Xms{min(256, self.config.heap_mb)}m",
                "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.storage.log4j_properties}",
                f"-Dkafka.logs.dir={self.logs_dir}",
                "-cp", f"{libs}/*", MAIN_CLASS, str(self.server_properties),
            ]  # fmt: skip
            with (self.logs_dir / "kafka.out").open("wb") as out:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=self.data_dir, start_new_session=True, close_fds=True,
                )  # fmt: skip
            self.pid_file.write_text(f"{proc.pid}\n")
            return proc.pid

    def wait_healthy(self, pid: int, deadline: float) -> BrokerStatus:
        """Wait until the broker ``pid`` serves metadata (by the ``time.monotonic()`` ``deadline``)."""
        refused_since: float | None = None
        while True:
            if not alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise LocalBrokerError(
                    f"the Kafka broker exited during start-up: {self._last_log_problem()}; see "
                    f"`ksched kafka logs` ({self.logs_dir}), or `ksched kafka start --fresh` wipes its data"
                )
            _topics, err = self._metadata(2.0)
            if not err:
                st = self.status()
                if st.healthy:
                    return st
            if err.startswith(_REFUSED):
                refused_since = refused_since or time.monotonic()
                if time.monotonic() - refused_since > REFUSED_GRACE_S:
                    raise LocalBrokerError(self._refused_message(pid))
            else:
                refused_since = None
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"the Kafka broker (pid {pid}) did not answer metadata on {self.bootstrap} in time "
                    f"({err or 'unhealthy'}); see `ksched kafka logs`, or retry with a longer --timeout"
                )
            time.sleep(0.25)

    def _refused_message(self, pid: int) -> str:
        return (
            f"the Kafka broker (pid {pid}, still running) refuses the admin's password from "
            f"{self.credentials_file}: its metadata has lost the SCRAM users — Kafka 4.1-4.4 do that "
            "when a restart replays a metadata log in which a SCRAM user was deleted and no snapshot "
            "holds the others (docs/decisions.md); ksched no longer deletes users, so only data dirs "
            "used by older versions or by hand are hit. `ksched kafka start --fresh` starts over with "
            "empty storage (topics and data are lost); `ksched kafka stop` stops it as it is"
        )

    # ----------------------------------------------------------------- stop / logs

    def stop(self, *, timeout_s: float = 30) -> bool:
        """Stop this data dir's broker: SIGTERM, then SIGKILL after ``timeout_s``. True if one was stopped."""
        pid = self.terminate()
        if pid is None:
            return False
        self.reap(pid, time.monotonic() + timeout_s)
        return True

    def terminate(self) -> int | None:
        """Send SIGTERM to this data dir's broker without waiting: its pid, or None if none runs."""
        pid = self._pid()
        if pid is None or not self._is_ours(pid):  # re-checked right before signalling: never a stranger
            return None
        os.kill(pid, signal.SIGTERM)
        return pid

    def reap(self, pid: int, deadline: float) -> None:
        """Wait for the terminated ``pid`` to exit; SIGKILL it at ``deadline`` (``time.monotonic()``)."""
        while alive(pid):
            if time.monotonic() > deadline:
                if self._is_ours(pid):
                    os.kill(pid, signal.SIGKILL)
                kill_deadline = time.monotonic() + 10
                while alive(pid) and time.monotonic() < kill_deadline:
                    time.sleep(0.1)
                break
            time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

    def logs(self, lines: int = 100) -> str:
        """The last ``lines`` lines of the broker log, then of the JVM's stdout/stderr when it has any."""
        parts = []
        for name in ("server.log", "kafka.out"):
            path = self.logs_dir / name
            text = tail(path, lines)
            if text:
                parts.append(f"--- {path} ---\n{text}")
        return "\n".join(parts)
