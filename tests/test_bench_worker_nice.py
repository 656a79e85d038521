"""``ksched bench workers --worker-nice N``: the worker processes start N nicer than the bench (their
threads inherit it), so on one machine the processor and the broker get the cores first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scheduler.bench.workers import niced


def test_a_niced_child_and_its_threads_run_n_nicer_and_zero_changes_nothing() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    ask = min(5, 19 - base)
    if ask == 0:
        pytest.skip("this process already runs at niceness 19: nothing to raise")
    code = ("import os, threading; t = threading.Thread(target=lambda: print(os.getpid(), os.nice(0)));"
            "t.start(); t.join()")
    child = subprocess.Popen(niced(ask, [sys.executable, "-c", code]), stdout=subprocess.PIPE)
    out, _ = child.communicate(timeout=30)
    pid, nice = map(int, out.split())
    assert nice == base + ask  # a thread the child starts, too
    assert pid == child.pid  # nice(1) execs the command: the bench's signals reach the worker
    assert niced(0, ["x"]) == ["x"]
