"""Headless Chromium (Debian's package, `make chromium`) and a real HTTP server for an app, for the
web console's test. Artefacts (screenshots) go to ``artefacts/`` at the repository's root
(git-ignored), or to ``$KSCHED_TEST_ARTEFACTS``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ARTEFACTS = Path(os.environ.get("KSCHED_TEST_ARTEFACTS") or Path(__file__).resolve().parents[1] / "artefacts")
# This machine's network is closed: without these Chromium keeps trying Google's hosts at each start.
_FLAGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The browser's path (``$KSCHED_TEST_CHROMIUM`` or ``chromium`` on PATH); fails the test loudly
    when there is none: a skipped browser test would pass CI without testing the console."""
    found = os.environ.get("KSCHED_TEST_CHROMIUM") or shutil.which("chromium")
    if not found or not os.access(found, os.X_OK):
        pytest.fail(
            f"chromium not found ({found or 'not on PATH'}): run `make chromium` (Debian's chromium "
            "package) or set KSCHED_TEST_CHROMIUM to a Chromium binary",
            pytrace=False,
        )
    return found


def render(url: str, screenshot: Path, *, budget_ms: int = 15_000, size: str = "1400,2200") -> str:
    """Load ``url`` in a fresh headless Chromium, run its scripts (virtual time waits for pending
    fetches), save a PNG of the page and return the DOM as serialised after the budget."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ksched-chromium-") as profile:
        done = subprocess.run(
            [
                chromium(),
                *_FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                f"--window-size={size}",
                f"--screenshot={screenshot}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    assert screenshot.is_file() and screenshot.stat().st_size > 0, f"no screenshot: {done.stderr[-2000:]}"
    return done.stdout


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="console-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
