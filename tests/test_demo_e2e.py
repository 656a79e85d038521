"""``ksched demo`` (what ``make run`` starts) end to end: every child comes up, the API answers
with the key the demo printed, Prometheus scrapes every process, and an interrupt stops them all.

The demo runs in a namespace of its own on the test broker, on free ports, with its folders in a
temp dir (``demo_dir`` and the Prometheus targets derive from ``kafka_data_dir``).
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import psutil
import pytest
from test_contract_e2e import free_port

from scheduler.settings import Settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
JOBS = {"ksched-processor", "ksched-worker", "ksched-history", "ksched-api"}


def _lines(proc: subprocess.Popen[str], out: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.put(line)


def _wait_for(lines: queue.Queue[str], pattern: str, seen: list[str], timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if m := re.search(pattern, line):
            return m
    raise AssertionError(f"no line matching {pattern!r} within {timeout_s}s:\n{''.join(seen)}")


def _targets(prometheus: str) -> list[dict[str, str]]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as r:
        return [
            {"job": t["labels"]["job"], "health": t["health"]}
            for t in json.load(r)["data"]["activeTargets"]
        ]


def test_demo_serves_the_api_with_its_printed_key_and_stops_every_child(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    api_port, prom_port = free_port(), free_port()
    env = {
        **os.environ,
        "KSCHED_NAMESPACE": f"demo-{secrets.token_hex(3)}",
        "KSCHED_KAFKA_DATA_DIR": str(tmp_path / "kafka-data"),
        "KSCHED_HISTORY_DSN": f"sqlite:///{tmp_path / 'history.db'}",
        "KSCHED_API_PORT": str(api_port),
        "KSCHED_PROMETHEUS_PORT": str(prom_port),
    }
    demo = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "demo", "--no-live", "--duration", "400"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(demo, lines), daemon=True).start()
    seen: list[str] = []
    try:
        api = _wait_for(lines, r"HTTP API at (http://127\.0\.0\.1:\d+)", seen, 240).group(1)
        key = _wait_for(lines, r"API key of tenant demo .*: (ksk_\S+)", seen, 5).group(1)
        console = _wait_for(lines, r"web console at (http://\S+/console)", seen, 5).group(1)
        prometheus = _wait_for(lines, r"Prometheus at (http://\S+)", seen, 5).group(1)
        assert api == f"http://127.0.0.1:{api_port}"
        children = psutil.Process(demo.pid).children()
        assert len(children) == 6, children  # processor, history, 2 workers, API, Prometheus

        assert httpx.get(f"{api}/readyz", timeout=10).status_code == 200
        auth = {"Authorization": f"Bearer {key}"}
        body = {"kind": "cron", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "handler": "report"}
        created = httpx.post(f"{api}/v1/schedules", json=body, headers=auth, timeout=30)
        assert created.status_code == 201, created.text
        sid = created.json()["schedule_id"]
        described = httpx.get(f"{api}/v1/schedules/{sid}", headers=auth, timeout=30)
        assert described.status_code == 200 and described.json()["state"] == "ACTIVE", described.text
        assert httpx.post(f"{api}/v1/schedules", json=body, timeout=10).status_code == 401
        page = httpx.get(console, timeout=10)
        assert console == f"{api}/console" and page.status_code == 200 and "ksched console" in page.text

        deadline = time.monotonic() + 60
        while {t["job"] for t in _targets(prometheus) if t["health"] == "up"} != JOBS:
            assert time.monotonic() < deadline, _targets(prometheus)
            time.sleep(1)
    finally:
        demo.send_signal(signal.SIGINT)  # what Ctrl-C does to the demo (the children: SIGTERM)
        code = demo.wait(60)
    assert code == 0, "".join(seen)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not list((tmp_path / "prometheus" / "targets").glob("*.json"))
