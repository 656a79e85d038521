"""Building and running ``examples/java`` (the Java client written from docs/contract.md).

Maven resolves the example's dependencies into ksched's own Maven repository,
``<kafka_cache_dir>/m2`` -- the one the broker's jars come from
(:mod:`scheduler.localbroker.maven`): a cold cache downloads from Maven Central
once, later builds are offline. The build runs on every test session (the
sources may have changed); Maven itself skips what is up to date.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from scheduler.localbroker.errors import LocalBrokerError
from scheduler.localbroker.java import find_java
from scheduler.localbroker.maven import last_maven_error
from scheduler.localbroker.system import locked

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "java"
JAR = PROJECT / "target" / "ksched-java-example.jar"


class JavaExampleError(RuntimeError):
    """The example cannot be built or run here; the message is one line naming the fix."""


@dataclass(frozen=True, kw_only=True)
class Built:
    jar: Path
    seconds: float


def build(cache_dir: Path, env: dict[str, str] | None = None) -> Built:
    """``mvn package`` of the example with ``cache_dir/m2`` as the local repository."""
    env = dict(os.environ if env is None else env)
    mvn = shutil.which("mvn", path=env.get("PATH"))
    if not mvn:
        raise JavaExampleError("mvn not found: install Maven (apt-get install maven) to build examples/java")
    java_home = env.get("JAVA_HOME", "")
    path = env.get("PATH")
    javac = str(Path(java_home) / "bin" / "javac") if java_home else shutil.which("javac", path=path)
    if not javac or not os.access(javac, os.X_OK):
        raise JavaExampleError("javac not found: install a JDK 17+ (apt-get install openjdk-17-jdk-headless) "
                               "or point JAVA_HOME at one")
    cache_dir.mkdir(parents=True, exist_ok=True)
    repo = cache_dir / "m2"
    cmd = [mvn, "-B", "-q", "-f", str(PROJECT / "pom.xml"), f"-Dmaven.repo.local={repo}", "package"]
    started = time.monotonic()
    with locked(cache_dir / ".java-example.lock"):  # one Maven at a time writes the shared repository
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise JavaExampleError("Maven took over 15 minutes building examples/java; check network access "
                                   "to Maven Central and retry") from None
    if out.returncode != 0 or not JAR.is_file():
        why = last_maven_error(out.stdout + out.stderr)
        raise JavaExampleError(f"Maven could not build examples/java: {why}")
    return Built(jar=JAR, seconds=time.monotonic() - started)


def java_env(**changes: str) -> dict[str, str]:
    """The environment of a Java run: this process's, with the schemas folder and ``changes``."""
    return {**os.environ, "KSCHED_SCHEMAS_DIR": str(ROOT / "schemas"), **changes}


def java(env: dict[str, str]) -> str:
    """The ``java`` that runs the example: the broker's (``JAVA_HOME`` or ``PATH``, 17+)."""
    try:
        return str(find_java(env)[0])
    except LocalBrokerError as exc:
        raise JavaExampleError(str(exc)) from None


def run(jar: Path, *args: str, env: dict[str, str], stdin: str = "", timeout_s: float = 120
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([java(env), "-jar", str(jar), *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=timeout_s, check=False)


def start(jar: Path, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A long-running Java command; stdout and stderr go to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen([java(env), "-jar", str(jar), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, stdin=subprocess.DEVNULL)
