"""Finding the ``java`` that runs the broker (and Maven): ``JAVA_HOME`` or ``PATH``, 17 or newer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from scheduler.localbroker.errors import LocalBrokerError

MIN_JAVA = 17


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
