"""``KSCHED_TEST_BROKER`` (tests/conftest.py): its failure paths, checked here where Docker is absent.

A pytest run of its own on a probe test that needs ``kafka_bootstrap``: with ``testcontainers`` and no
reachable Docker the fixture fails with one line naming the fix (no traceback, no chained error);
an unknown choice is named (conftest's ``broker_choice``). The slow test runs the container's
generated files on this host with the local Kafka jars; Docker itself is untested here
(docker/README.md).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def probe(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(
        "def test_probe(kafka_bootstrap: str) -> None:\n    assert kafka_bootstrap\n")
    clean = {k: v for k, v in os.environ.items() if k != "KSCHED_BOOTSTRAP"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
         str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env={**clean, "PYTHONPATH": str(TESTS), **env}, capture_output=True, text=True,
        timeout=300, check=False,
    )


def test_without_docker_the_testcontainers_choice_fails_with_one_clear_line(tmp_path: Path) -> None:
    r = probe(tmp_path, KSCHED_TEST_BROKER="testcontainers",
              DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")  # no Docker, even on a machine with one
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    [line] = [ln for ln in out.splitlines() if ln.startswith("KSCHED_TEST_BROKER=testcontainers: ")]
    assert "Docker is not reachable" in line and "unset KSCHED_TEST_BROKER" in line
    assert "Traceback" not in out and "During handling" not in out, out


def test_the_choice_defaults_to_the_embedded_broker_and_names_an_unknown_one() -> None:
    from conftest import broker_choice

    assert broker_choice({}) == "embedded"
    assert broker_choice({"KSCHED_TEST_BROKER": "testcontainers"}) == "testcontainers"
    unknown = "KSCHED_TEST_BROKER='docker': not one of embedded, testcontainers"
    with pytest.raises(pytest.fail.Exception, match=unknown):
        broker_choice({"KSCHED_TEST_BROKER": "docker"})


def _storage_args(script: str) -> list[str]:
    """The ``kafka-storage.sh`` arguments of the generated start.sh."""
    joined = script.replace("\\\n", " ")
    [line] = [ln for ln in joined.splitlines() if "kafka-storage.sh" in ln]
    return shlex.split(line)[1:]


@pytest.mark.kafka
@pytest.mark.slow
def test_the_container_files_run_an_authenticated_broker_on_this_host(tmp_path: Path) -> None:
    """What the apache/kafka container runs, run here by the local Kafka jars: start.sh's format
    (twice: --ignore-formatted keeps a formatted storage) and server.properties, with the container's
    mount point mapped to the folder and 0.0.0.0 to 127.0.0.1 (this host binds loopback only). The
    admin logs in with the folder's credentials file; a wrong password is refused."""
    from container_broker import _wait_ready
    from test_contract_e2e import free_port

    from scheduler.kafka.admin import admin_client
    from scheduler.kafka.credentials import CredentialsError
    from scheduler.kafka.errors import AccessError
    from scheduler.localbroker import BrokerConfig, LocalBroker
    from scheduler.localbroker.container import MOUNT, write_container_files
    from scheduler.localbroker.java import find_java
    from scheduler.settings import load_settings

    base = load_settings(env={})
    port, controller = free_port(), free_port()
    folder = tmp_path / "kafka"
    credentials = write_container_files(folder, version=base.kafka_version, advertised_host="127.0.0.1",
                                        port=port, controller_port=controller)
    for name in ("server.properties", "start.sh"):
        f = folder / name
        f.write_text(f.read_text().replace(MOUNT, str(folder)).replace("0.0.0.0", "127.0.0.1"))
    java, _ = find_java()
    cache = Path(os.environ.get("KSCHED_KAFKA_CACHE_DIR", base.kafka_cache_dir))
    libs = LocalBroker(BrokerConfig(version=base.kafka_version, cache_dir=cache, data_dir=tmp_path / "x"))
    classpath = f"{libs.ensure_artifacts()}/*"
    storage = _storage_args((folder / "start.sh").read_text())
    assert storage[0] == "format" and "--ignore-formatted" in storage
    for _ in range(2):
        subprocess.run([str(java), "-cp", classpath, "kafka.tools.StorageTool", *storage],
                       check=True, capture_output=True, timeout=180)
    with (folder / "logs" / "kafka.out").open("wb") as out:
        broker = subprocess.Popen([str(java), "-Xmx512m", "-cp", classpath, "kafka.Kafka",
                                   str(folder / "server.properties")], stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_ready(f"127.0.0.1:{port}", credentials, 180, folder)
        wrong = load_settings(env={"KSCHED_BOOTSTRAP": f"127.0.0.1:{port}", "KSCHED_SASL_USERNAME": "admin",
                                   "KSCHED_SASL_PASSWORD": "not-the-password"})
        with pytest.raises((AccessError, CredentialsError)):
            admin_client(wrong.kafka(), log_level=0).list_topics(timeout=10)
    finally:
        broker.terminate()
        broker.wait(60)
