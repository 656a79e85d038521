"""``ksched bench workers`` end to end on the session broker, at a small N (the figures are the
benchmark's job; here: the load is applied before the instant, the CPU is counted on a short run,
and the second burst is measured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings import Settings


def _bench(tmp_path: Path, *options: str) -> dict[str, Any]:
    """``ksched bench workers`` at 300 occurrences, one worker, in-memory store, none killed: its JSON."""
    out = tmp_path / "workers.json"
    cmd = [
        sys.executable, "-m", "scheduler", "bench", "workers", "--occurrences", "300", "--processes", "1",
        "--store", "memory", "--no-kill", *options, "--json", str(out),
    ]
    done = subprocess.run(cmd, env=os.environ.copy(), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stdout.decode()[-2000:] + done.stderr.decode()[-2000:]
    assert out.with_suffix(".png").stat().st_size > 0
    r: dict[str, Any] = json.loads(out.read_text())
    return r


@pytest.mark.slow
@pytest.mark.parametrize("drain", [False, True], ids=["live", "drain"])
def test_bench_workers_loads_before_the_instant_and_measures_a_second_burst(
    kafka_settings: Settings, tmp_path: Path, drain: bool
) -> None:
    r = _bench(tmp_path, "--second-burst", "4", *(["--drain"] if drain else []))
    assert r["succeeded"] == r["occurrences"] == 600 and r["duplicate_effects"] == 0
    assert r["applied_ahead_s"] > 0  # every create applied before the first instant
    assert r["load_s"] > 0 and r["calibrated_rate_per_s"] > 0
    if not drain:  # (with --drain it is net of an estimated start-up: within a few ms at 600)
        assert r["worker_cpu_s_per_occurrence"] > 0  # counted on a run shorter than the 1 s sampling
    for key in ("lag_p99_s", "e2e_p99_s", "second_lag_p99_s", "second_e2e_p99_s", "rate_per_s"):
        assert r[key] is not None and r[key] >= 0, key
    assert r["second_lag_p99_s"] < 5  # the second burst on time behind the first one's reports
    if drain:  # the workers start once both bursts are dispatched: the reports' cost alone
        assert r["processor_cpu_us_per_report"] > 0


@pytest.mark.slow
def test_bench_workers_with_daily_schedules_measures_the_reports_alone(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    """``--kind cron``: daily schedules due at a whole minute; their reports complete nothing, so
    no version record is written while they are applied. Its worker runs niced (``--worker-nice``),
    and its processor writes an event a record (``--single-events``)."""
    r = _bench(tmp_path, "--drain", "--kind", "cron", "--worker-nice", "3", "--single-events")
    assert r["worker_nice"] == 3 and r["single_events"] is True
    assert r["kind"] == "cron" and r["succeeded"] == r["occurrences"] == 300 and r["duplicate_effects"] == 0
    assert r["applied_ahead_s"] > 0
    assert r["broker_bytes_per_occurrence_reported"].get("versions", 0) == 0
    assert r["processor_cpu_us_per_report"] > 0


@pytest.mark.slow
def test_bench_workers_held_times_the_processor_applying_queued_reports(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    """``--held``: the processor is stopped while the worker drains, then resumed with every
    report queued; it applies them all (no rebalance on the way) and nothing runs twice."""
    r = _bench(tmp_path, "--drain", "--held")
    assert r["succeeded"] == r["occurrences"] == 300 and r["duplicate_effects"] == 0
    assert r["held_reports_applied"] >= 300  # every final report waited for the processor
    assert r["held_reports_queued"] == r["held_reports_applied"]
    # the worker's fast finals go a batch to a record; no transactional writer: no markers
    assert 0 < r["held_records_applied"] == r["held_records_queued"] < 300
    assert 0 < r["held_pause_s"] < 25  # well within the processor's 30 s transaction timeout
    assert r["held_reports_per_s"] > 0
    # CPU is read in 10 ms ticks; 300 reports take ~2 ms: None when it read no tick (CI once did)
    assert r["held_processor_cpu_us_per_report"] is None or r["held_processor_cpu_us_per_report"] > 0
    assert 0 <= r["held_first_move_s"] <= r["held_apply_s"]  # 300 reports: often one move, no steady rate
    assert r["held_steady_reports_per_s"] is None or r["held_steady_reports_per_s"] > 0
    # timed by the events records written after the SIGCONT (300 reports: maybe one record)
    assert r["held_resumed_at_ms"] > 0
    assert r["held_events_span_s"] is None or r["held_events_span_s"] <= r["held_apply_s"] + 1
    bad = [sys.executable, "-m", "scheduler", "bench", "workers", "--held", "--json", str(tmp_path / "x")]
    refused = subprocess.run(bad, env=os.environ.copy(), capture_output=True, timeout=120)
    assert refused.returncode != 0 and b"give --drain too" in refused.stderr
