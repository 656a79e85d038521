"""Apicurio Registry for the schema-registry tests (issue 17, item 3), started like the broker.

The runnable ``io.apicurio:apicurio-registry-app:<v>:tar.gz:all`` (a Quarkus app, ~160 MB) is
resolved with Maven into ksched's Maven repository ``<kafka_cache_dir>/m2`` and unpacked once into
``<kafka_cache_dir>/apicurio-<v>/`` (trusted once its ``.complete`` marker exists). It needs Java
21+: ``KSCHED_REGISTRY_JAVA_HOME``, else ``JAVA_HOME`` or ``java`` when 21+, else the newest JDK
under ``/usr/lib/jvm``. In-memory storage, HTTP and management interfaces on free 127.0.0.1 ports
(the management interface binds 0.0.0.0:9000 by default). The Confluent-compatible API is at
``/apis/ccompat/v7``. Anything missing fails the tests with one line naming the fix.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.localbroker.errors import LocalBrokerError
from scheduler.localbroker.java import find_java
from scheduler.localbroker.maven import last_maven_error
from scheduler.localbroker.system import locked
from scheduler.settings import load_settings

APICURIO_VERSION = "3.3.3"
MIN_JAVA = 21


class RegistryUnavailable(RuntimeError):
    """The registry cannot be fetched or started here; the message is one line naming the fix."""


def registry_java(env: dict[str, str]) -> Path:
    """A ``java`` of version 21 or newer."""
    candidates: list[str] = []
    if env.get("KSCHED_REGISTRY_JAVA_HOME"):
        candidates.append(env["KSCHED_REGISTRY_JAVA_HOME"])
    candidates.append(env.get("JAVA_HOME", ""))  # "": java on PATH
    candidates += [str(p) for p in sorted(Path("/usr/lib/jvm").glob("*"), reverse=True) if p.is_dir()]
    found: list[str] = []
    for home in candidates:
        try:
            java, major = find_java({**env, "JAVA_HOME": home})
        except LocalBrokerError:
            continue
        if major >= MIN_JAVA:
            return java
        found.append(f"{major} at {java}")
    raise RegistryUnavailable(
        f"Apicurio Registry needs Java {MIN_JAVA}+ and only {', '.join(found) or 'no Java'} was found: "
        f"install a JDK {MIN_JAVA}+ (e.g. Temurin) and set KSCHED_REGISTRY_JAVA_HOME to it"
    )


def ensure_app(cache_dir: Path) -> Path:
    """The unpacked app folder (holding ``quarkus-run.jar``), fetched with Maven on first use."""
    app = cache_dir / f"apicurio-{APICURIO_VERSION}"
    marker = app / ".complete"
    if marker.exists():
        return app
    with locked(cache_dir / f".apicurio-{APICURIO_VERSION}.lock"):
        if marker.exists():
            return app
        mvn = shutil.which("mvn")
        if not mvn:
            raise RegistryUnavailable(
                "mvn not found: install Maven (apt-get install maven) to fetch Apicurio Registry"
            )
        artifact = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
        repo = cache_dir / "m2"
        out = subprocess.run(
            [mvn, "-B", "-q", f"-Dmaven.repo.local={repo}", "dependency:get", f"-Dartifact={artifact}",
             "-Dtransitive=false"],
            capture_output=True, text=True, timeout=900, check=False, stdin=subprocess.DEVNULL,
        )
        tgz = repo / "io/apicurio/apicurio-registry-app" / APICURIO_VERSION / (
            f"apicurio-registry-app-{APICURIO_VERSION}-all.tar.gz")
        if out.returncode != 0 or not tgz.is_file():
            why = last_maven_error(out.stdout + out.stderr)
            raise RegistryUnavailable(f"Maven could not fetch {artifact}: {why}")
        shutil.rmtree(app, ignore_errors=True)
        staging = cache_dir / f".apicurio-{APICURIO_VERSION}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(staging, filter="data")
        staging.rename(app)
        marker.write_text(APICURIO_VERSION)
    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible base URL of a registry this session started."""
    try:
        java = registry_java(dict(os.environ))
        app = ensure_app(load_settings().kafka_cache_dir)
    except RegistryUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    http, management = _free_port(), _free_port()
    log = tmp_path_factory.mktemp("registry") / "apicurio.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(java), "-Xmx512m", "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={http}",
             "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={management}",
             "-jar", str(app / "quarkus-run.jar")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=app,
        )
    try:
        deadline = time.monotonic() + 180
        while not _ready(f"http://127.0.0.1:{management}/health/ready"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                why = f"Apicurio Registry did not become ready (log {log}): {tail[0][:300]}"
                pytest.fail(why, pytrace=False)
            time.sleep(0.5)
        yield f"http://127.0.0.1:{http}/apis/ccompat/v7"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
