"""The embedded local Apache Kafka 4.x broker behind ``ksched kafka start``.

One combined broker+controller JVM (KRaft) bound to 127.0.0.1, its jars
resolved once with Maven into a per-user cache and reused offline afterwards.

Layout::

    cache_dir/m2/                 ksched's own Maven local repository (so "cold" is reproducible)
    cache_dir/<version>/pom.xml   the generated resolver pom
    cache_dir/<version>/libs/     the broker's classpath (``libs/*``)
    cache_dir/<version>/.complete marker: written last, lists every jar; no marker = not reused
    data_dir/server.properties    generated on every start
    data_dir/log4j2.properties    generated on every start
    data_dir/kraft/               KRaft metadata + topic data (``log.dirs``)
    data_dir/broker.pid           pid of the broker JVM
    data_dir/broker.json          ports and cluster id the storage was formatted with
    data_dir/logs/server.log      log4j2 output (rolled at 10 MB, 3 kept)
    data_dir/logs/kafka.out       the JVM's stdout/stderr of the latest start (crashes, JVM warnings)

Every error is a :class:`LocalBrokerError` whose ``str()`` is one line naming the fix.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_JAVA = 17
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
HOST = "127.0.0.1"
MAIN_CLASS = "kafka.Kafka"


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    version: str = "4.1.1"
    port: int = 9092
    controller_port: int = 9093
    heap_mb: int = 768
    cache_dir: Path  # per-user jar cache root; jars go under cache_dir/<version>/libs
    data_dir: Path  # KRaft log dir + pid file + logs + generated config


class LocalBrokerError(RuntimeError):
    """The local broker cannot be set up, started or reached; ``str()`` is one line naming the fix."""


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


# --------------------------------------------------------------------------- Java / Maven


def find_java(env: dict[str, str] | None = None) -> tuple[Path, int]:
    """The ``java`` to run and its major version; honours ``JAVA_HOME``.

    Raises :class:`LocalBrokerError` when there is none or it is older than 17.
    """
    env = dict(os.environ if env is None else env)
    java_home = env.get("JAVA_HOME", "")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise LocalBrokerError(
                f"JAVA_HOME={java_home} has no bin/java; point JAVA_HOME at a Java {MIN_JAVA}+ install "
                "or unset it"
            )
    else:
        found = shutil.which("java", path=env.get("PATH"))
        if not found:
            raise LocalBrokerError(
                f"Java {MIN_JAVA}+ is required and no java is on PATH; install openjdk-17-jre-headless "
                "or set JAVA_HOME"
            )
        java = Path(found)
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalBrokerError(
            f"cannot run {java} -version ({exc}); install openjdk-17-jre-headless or set JAVA_HOME"
        ) from None
    text = out.stderr + out.stdout
    m = re.search(r'version "([^"]+)"', text)
    major = parse_java_major(m.group(1)) if m else None
    if major is None:
        first = text.strip().splitlines()[0] if text.strip() else "no output"
        raise LocalBrokerError(
            f"cannot tell the Java version of {java} ({first}); install openjdk-17-jre-headless "
            "or set JAVA_HOME"
        )
    if major < MIN_JAVA:
        raise LocalBrokerError(
            f"Java {MIN_JAVA}+ is required: found {major} at {java}; install openjdk-17-jre or set JAVA_HOME"
        )
    return java, major


def parse_java_major(version: str) -> int | None:
    """``"1.8.0_292"`` → 8, ``"17.0.15"`` → 17, ``"25"`` → 25."""
    parts = re.split(r"[._+-]", version)
    try:
        if parts[0] == "1" and len(parts) > 1:
            return int(parts[1])
        return int(parts[0])
    except ValueError:
        return None


_MVN_BOILERPLATE = (
    "to see the full stack trace",
    "re-run maven using",
    "for more information about the errors",
    "[help ",
    "after correcting the problems",
)


def last_maven_error(output: str) -> str:
    """The last meaningful line of a failed Maven run (boilerplate and ``[ERROR]`` prefix removed)."""
    best = ""
    for raw in output.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip().replace(" -> [Help 1]", "")
        if line.startswith("[ERROR]"):
            line = line[len("[ERROR]") :].strip()
        elif line.startswith("[WARNING]"):
            continue
        if not line or any(b in line.lower() for b in _MVN_BOILERPLATE):
            continue
        best = line
    best = best.split(" This failure was cached")[0]
    return best[:400] if best else "no output"


# --------------------------------------------------------------------------- processes and ports


def _read_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (reaps it if it is our own child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
    return state not in ("Z", "X")


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when something listens on or holds ``host:port`` (so Kafka could not bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Kafka binds with SO_REUSEADDR too, so TIME_WAIT leftovers do not count as taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_owner(port: int) -> tuple[int, str] | None:
    """Best effort: the pid and command line of the process listening on ``port`` (Linux /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in targets:
                        pid = int(entry.name)
                        return pid, " ".join(_read_cmdline(pid))
        except OSError:
            continue
    return None


# --------------------------------------------------------------------------- templates


def kafka_uuid() -> str:
    """A random Kafka cluster id, the same form as ``StorageTool random-uuid`` prints.

    Kafka's ``Uuid.randomUuid`` is 16 random bytes in URL-safe base64 without padding,
    never starting with ``-`` and never the reserved all-zero / metadata-topic ids.
    """
    while True:
        raw = secrets.token_bytes(16)
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(config: BrokerConfig, log_dir: Path) -> str:
    p, c = config.port, config.controller_port
    return f"""\
# Generated by ksched (scheduler/kafka/local_broker.py) on every start; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={HOST}:{c}
listeners=PLAINTEXT://{HOST}:{p},CONTROLLER://{HOST}:{c}
advertised.listeners=PLAINTEXT://{HOST}:{p},CONTROLLER://{HOST}:{c}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={log_dir}

# Sized for a 2-core machine.
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=33554432

# One node: every internal topic has one replica; few partitions so they are created fast.
default.replication.factor=1
min.insync.replicas=1
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
offsets.topic.segment.bytes=16777216
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
transaction.state.log.segment.bytes=16777216
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=4

# Local development.
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.segment.bytes=16777216
"""


def log4j2_properties(log_dir: Path) -> str:
    return f"""\
# Generated by ksched on every start.
status = warn
name = ksched-local-kafka
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {log_dir}/server.log
appender.file.filePattern = {log_dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""


TOOLS_LOG4J2 = """\
# Generated by ksched: the storage tool logs warnings to stderr only.
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def resolver_pom(version: str) -> str:
    def dep(group: str, artifact: str, ver: str) -> str:
        return (
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{ver}</version></dependency>\n"
        )

    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<!-- Generated by ksched: resolves the local Kafka broker's runtime classpath. -->\n"
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>dev.ksched.local</groupId>\n"
        "  <artifactId>ksched-local-kafka</artifactId>\n"
        f"  <version>{version}</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n"
        + dep("org.apache.kafka", "kafka_2.13", version)
        # Kafka's pom brings slf4j-api 1.7; the slf4j2 binding needs the 2.x API (backward compatible).
        + dep("org.slf4j", "slf4j-api", SLF4J_VERSION)
        + dep("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION)
        + dep("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION)
        + "  </dependencies>\n"
        "  <build><pluginManagement><plugins><plugin>\n"
        "    <groupId>org.apache.maven.plugins</groupId><artifactId>maven-dependency-plugin</artifactId>\n"
        f"    <version>{DEPENDENCY_PLUGIN_VERSION}</version>\n"
        "  </plugin></plugins></pluginManagement></build>\n"
        "</project>\n"
    )


# --------------------------------------------------------------------------- the broker


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _quiet_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    # log_level 0: connection-refused noise while the broker boots is expected, not news.
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 3000})


class LocalBroker:
    """Start, stop and inspect one local Kafka broker owned by ``config.data_dir``."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir).expanduser().absolute()
        self.cache_dir = Path(config.cache_dir).expanduser().absolute()
        self.version_dir = self.cache_dir / config.version
        self.libs_dir = self.version_dir / "libs"
        self.marker = self.version_dir / ".complete"
        self.maven_repo = self.cache_dir / "m2"
        self.kraft_dir = self.data_dir / "kraft"
        self.logs_dir = self.data_dir / "logs"
        self.server_properties = self.data_dir / "server.properties"
        self.log4j_properties = self.data_dir / "log4j2.properties"
        self.pid_file = self.data_dir / "broker.pid"
        self.meta_file = self.data_dir / "broker.json"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.config.port}"

    # ----------------------------------------------------------------- artifacts

    def artifacts_ready(self) -> bool:
        """True when a complete jar set for this version is cached (no Maven needed)."""
        try:
            listed = json.loads(self.marker.read_text())["jars"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return bool(listed) and all((self.libs_dir / name).is_file() for name in listed)

    def ensure_artifacts(self) -> Path:
        """The broker's jar folder, resolved with Maven on first use and reused offline later."""
        if self.artifacts_ready():
            return self.libs_dir
        with _locked(self.cache_dir / f".{self.config.version}.lock"):
            if self.artifacts_ready():  # another process finished it while we waited
                return self.libs_dir
            mvn = shutil.which("mvn")
            if not mvn:
                raise LocalBrokerError(
                    f"Maven is required once to fetch Kafka {self.config.version} into {self.version_dir}; "
                    "install maven (apt-get install maven) and retry"
                )
            find_java()  # Maven needs a JVM too; fail with the Java message, not Maven's
            self.version_dir.mkdir(parents=True, exist_ok=True)
            pom = self.version_dir / "pom.xml"
            pom.write_text(resolver_pom(self.config.version))
            staging = self.version_dir / f"libs.partial-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            cmd = [
                mvn, "-q", "-B", "-U", "-f", str(pom),
                f"-Dmaven.repo.local={self.maven_repo}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging}",
            ]  # fmt: skip
            try:
                out = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=900, check=False, stdin=subprocess.DEVNULL
                )
            except subprocess.TimeoutExpired:
                shutil.rmtree(staging, ignore_errors=True)
                raise LocalBrokerError(
                    f"Maven took over 15 minutes fetching Kafka {self.config.version}; check network "
                    "access to Maven Central and retry"
                ) from None
            jars = sorted(p.name for p in staging.glob("*.jar")) if staging.is_dir() else []
            if out.returncode != 0 or not any(j.startswith("kafka_2.13-") for j in jars):
                shutil.rmtree(staging, ignore_errors=True)
                why = last_maven_error(out.stdout + "\n" + out.stderr)
                raise LocalBrokerError(
                    f"Maven could not fetch Kafka {self.config.version}: {why}; check the version and "
                    "network access to Maven Central, then retry"
                )
            shutil.rmtree(self.libs_dir, ignore_errors=True)
            self.marker.unlink(missing_ok=True)
            staging.rename(self.libs_dir)
            tmp = self.marker.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": self.config.version, "jars": jars}, indent=1))
            tmp.rename(self.marker)
        return self.libs_dir

    # ----------------------------------------------------------------- process discovery

    def _is_ours(self, pid: int) -> bool:
        args = _read_cmdline(pid)
        return MAIN_CLASS in args and str(self.server_properties) in args

    def _pid(self) -> int | None:
        """The live pid of this data dir's broker: from the pid file, else found in /proc."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None and _alive(pid) and self._is_ours(pid):
            return pid
        if pid is not None:
            self.pid_file.unlink(missing_ok=True)  # stale
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._is_ours(int(entry.name)) and _alive(int(entry.name)):
                found = int(entry.name)
                self.pid_file.write_text(f"{found}\n")
                return found
        return None

    @staticmethod
    def _version_of(pid: int) -> str | None:
        """Kafka's version as named by the ``kafka_2.13-<v>.jar`` on the running JVM's classpath."""
        args = _read_cmdline(pid)
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

        try:
            md = _quiet_admin(self.bootstrap).list_topics(timeout=timeout_s)
        except KafkaException as exc:
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

    def _formatted(self) -> bool:
        return (self.kraft_dir / "meta.properties").is_file()

    def _check_ports(self) -> None:
        for port, role in ((self.config.port, "listener"), (self.config.controller_port, "controller")):
            if not port_in_use(port):
                continue
            owner = port_owner(port)
            knob = "KSCHED_KAFKA_PORT" if role == "listener" else "KSCHED_KAFKA_CONTROLLER_PORT"
            if owner is None:
                who = "another process"
            else:
                args = _read_cmdline(owner[0])
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

    def _run_tool(self, java: Path, libs: Path, *args: str) -> str:
        tools_log4j = self.data_dir / "tools-log4j2.properties"
        tools_log4j.write_text(TOOLS_LOG4J2)
        cmd = [
            str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={tools_log4j}",
            "-cp", f"{libs}/*", "kafka.tools.StorageTool", *args,
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            lines = [ln for ln in (out.stderr + "\n" + out.stdout).splitlines() if ln.strip()]
            raise LocalBrokerError(
                f"kafka-storage {args[0]} failed: {lines[-1] if lines else out.returncode}; "
                "run `ksched kafka start --fresh` to re-create the data dir"
            )
        return out.stdout

    def _format(self, java: Path, libs: Path) -> None:
        cluster_id = kafka_uuid()
        self._run_tool(
            java, libs, "format", "--standalone", "-t", cluster_id, "-c", str(self.server_properties)
        )
        self.meta_file.write_text(
            json.dumps(
                {
                    "cluster_id": cluster_id,
                    "version": self.config.version,
                    "port": self.config.port,
                    "controller_port": self.config.controller_port,
                },
                indent=1,
            )
        )

    def _wipe(self) -> None:
        shutil.rmtree(self.kraft_dir, ignore_errors=True)
        shutil.rmtree(self.logs_dir, ignore_errors=True)
        self.meta_file.unlink(missing_ok=True)

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
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with _locked(self.data_dir / ".lock"):
            pid = self._pid()
            if pid is not None and fresh:
                self.stop()
                pid = None
            if pid is not None:
                return self._wait_healthy(pid, deadline)
            self._check_ports()
            java, _ = find_java()
            libs = self.ensure_artifacts()
            if fresh:
                self._wipe()
            self._check_formatted_ports()
            self.kraft_dir.mkdir(parents=True, exist_ok=True)
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            self.server_properties.write_text(server_properties(self.config, self.kraft_dir))
            self.log4j_properties.write_text(log4j2_properties(self.logs_dir))
            if not self._formatted():
                self._format(java, libs)
            cmd = [
                str(java),
                f"-Xmx{self.config.heap_mb}m", f"-Xms{min(256, self.config.heap_mb)}m",
                "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.log4j_properties}",
                f"-Dkafka.logs.dir={self.logs_dir}",
                "-cp", f"{libs}/*", MAIN_CLASS, str(self.server_properties),
            ]  # fmt: skip
            with (self.logs_dir / "kafka.out").open("wb") as out:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    cwd=self.data_dir, start_new_session=True, close_fds=True,
                )  # fmt: skip
            self.pid_file.write_text(f"{proc.pid}\n")
            return self._wait_healthy(proc.pid, deadline)

    def _check_formatted_ports(self) -> None:
        if not self._formatted():
            return
        try:
            meta = json.loads(self.meta_file.read_text())
        except (OSError, ValueError):
            return
        was = meta.get("controller_port")
        if isinstance(was, int) and was != self.config.controller_port:
            raise LocalBrokerError(
                f"{self.data_dir} was formatted for controller port {was}, not "
                f"{self.config.controller_port}; set the controller port back or run "
                "`ksched kafka start --fresh` (wipes its data)"
            )

    def _wait_healthy(self, pid: int, deadline: float) -> BrokerStatus:
        while True:
            if not _alive(pid):
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
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"the Kafka broker (pid {pid}) did not answer metadata on {self.bootstrap} in time "
                    f"({err or 'unhealthy'}); see `ksched kafka logs`, or retry with a longer --timeout"
                )
            time.sleep(0.25)

    # ----------------------------------------------------------------- stop / logs

    def stop(self, *, timeout_s: float = 30) -> bool:
        """Stop this data dir's broker: SIGTERM, then SIGKILL after ``timeout_s``. True if one was stopped."""
        pid = self._pid()
        if pid is None:
            return False
        if not self._is_ours(pid):  # re-checked right before signalling: never a stranger's pid
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid):
            if time.monotonic() > deadline:
                if self._is_ours(pid):
                    os.kill(pid, signal.SIGKILL)
                kill_deadline = time.monotonic() + 10
                while _alive(pid) and time.monotonic() < kill_deadline:
                    time.sleep(0.1)
                break
            time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def logs(self, lines: int = 100) -> str:
        """The last ``lines`` lines of the broker log, then of the JVM's stdout/stderr when it has any."""
        parts = []
        for name in ("server.log", "kafka.out"):
            path = self.logs_dir / name
            tail = _tail(path, lines)
            if tail:
                parts.append(f"--- {path} ---\n{tail}")
        return "\n".join(parts)


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            block = min(size, max(64 * 1024, lines * 400))
            fh.seek(size - block)
            data = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:]) if lines > 0 else ""
