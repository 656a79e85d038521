"""``ksched bench workers --worker-nice N``: the worker processes start at niceness N (their threads
inherit it), so on one machine the processor and the broker get the cores first."""

from __future__ import annotations

import os
import subprocess
import sys

from scheduler.bench.workers import niced


def test_a_niced_child_runs_at_the_niceness_asked_and_zero_changes_nothing() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    ask = min(5, 19 - base)
    code = "import os, threading; t = threading.Thread(target=lambda: print(os.nice(0))); t.start(); t.join()"
    probe = [sys.executable, "-c", code]
    niced_out = subprocess.run(probe, preexec_fn=niced(ask), capture_output=True, check=True)
    assert int(niced_out.stdout) == base + ask  # a thread it starts too
    assert niced(0) is None
