"""``ksched bench api`` end to end on the session broker, at a small N (the figures are the
benchmark's job; here: every create, describe and change is answered 2xx and measured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.settings import Settings


@pytest.mark.slow
def test_bench_api_answers_and_times_creates_describes_and_changes(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "api.json"
    cmd = [
        sys.executable, "-m", "scheduler", "bench", "api", "--creates", "100", "--describes", "20",
        "--changes", "100", "--clients", "8", "--json", str(out),
    ]
    done = subprocess.run(cmd, env=os.environ.copy(), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stdout.decode()[-2000:] + done.stderr.decode()[-2000:]
    r = json.loads(out.read_text())
    assert r["create_statuses"] == {"201": 100} and r["describe_non_2xx"] == 0
    # 100 pauses of the 108 created (the 8 clients' warm-up creates too): each answered 200
    assert r["changes"] == 100 and r["change_non_2xx"] == 0
    assert 0 < r["change_p50_s"] <= r["change_p99_s"] and r["change_rate_per_s"] > 0
    assert r["api_cpu_ms_per_change"] > 0 and r["processor_transactions_per_change"] > 0
    # the machine's speed before and after (a yardstick for comparing runs: docs/api.md)
    assert 0 < r["speed_probe_us_before"] < 1000 and 0 < r["speed_probe_us_after"] < 1000
