"""``KSCHED_TEST_BROKER`` (tests/conftest.py): its failure paths, checked here where Docker is absent.

A pytest run of its own on a probe test that needs ``kafka_bootstrap``: with ``testcontainers`` and no
reachable Docker the fixture fails with one line naming the fix (no traceback, no chained error);
an unknown choice is named. The container broker itself needs Docker: docker/README.md says what
is untested here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_an_unknown_choice_is_named(tmp_path: Path) -> None:
    r = probe(tmp_path, KSCHED_TEST_BROKER="docker")
    assert r.returncode == 1
    assert "KSCHED_TEST_BROKER='docker': not one of embedded, testcontainers" in r.stdout
