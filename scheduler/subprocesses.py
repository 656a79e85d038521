"""Stopping the child processes a command started (the demo, the benchmarks)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable


def stop_all(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 30) -> None:
    """SIGTERM every running one, then wait for all within one shared ``timeout_s``; whatever is
    still running after it is killed. Post: none of ``procs`` is running."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
