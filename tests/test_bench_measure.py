"""The capacity model's measuring helpers (scheduler/bench/common.py) against the session broker."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from scheduler.bench.common import cpu_seconds, per_unit, speed_probe_us, topic_bytes
from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import producer
from scheduler.principals import as_admin
from scheduler.settings import Settings, load_settings


def _broker_files() -> Path:
    """Where the session's local broker keeps its files (tests/conftest.py's kafka_bootstrap)."""
    default = load_settings(env={}).kafka_data_dir.parent / "test-kafka"
    return Path(os.environ.get("KSCHED_TEST_KAFKA_DATA", default))


def test_topic_bytes_counts_a_topics_log_on_every_partition(kafka_settings: Settings) -> None:
    settings = kafka_settings.replace(kafka_data_dir=_broker_files())
    topic = f"{settings.namespace}.capbytes"
    admin = admin_client(as_admin(settings))
    for f in admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=30).values():
        f.result(60)
    prod = producer(settings.kafka())
    n, size = 300, 1000
    for i in range(n):  # random bytes: compression cannot shrink them below n * size
        prod.produce(topic, secrets.token_bytes(size), str(i).encode())
    assert prod.flush(30) == 0
    deadline = time.monotonic() + 10
    while (got := topic_bytes(settings).get("capbytes", 0)) < n * size and time.monotonic() < deadline:
        time.sleep(0.2)
    assert n * size <= got < 2 * n * size  # the records plus batch and record headers
    assert "capbytes" not in topic_bytes(settings.replace(namespace=settings.namespace + "x"))


def test_cpu_seconds_grows_with_work_and_ignores_gone_processes() -> None:
    before = cpu_seconds([os.getpid()])
    t = time.process_time()
    while time.process_time() - t < 0.2:
        pass
    assert cpu_seconds([os.getpid()]) - before >= 0.15
    assert cpu_seconds([2**22 + 7]) == 0.0  # above pid_max's default: no such process


def test_speed_probe_times_the_encoding_of_one_command() -> None:
    # best of its rounds: a second probe agrees within a factor (not a speed target: a yardstick)
    a, b = speed_probe_us(rounds=3, n=500), speed_probe_us(rounds=3, n=500)
    assert 0 < a < 1000 and 0 < b < 1000 and max(a, b) / min(a, b) < 5


def test_per_unit_adds_a_kinds_tenant_topics_and_keeps_only_growth() -> None:
    sizes = {"dispatch.t0": 300, "dispatch.t1": 100, "state": 0, "commands.t0": -5, "schedules": 50}
    assert per_unit(sizes, 4) == {"dispatch": 100.0, "schedules": 12.5}
    assert per_unit(sizes, 4, ("schedules",)) == {"schedules": 12.5}


def test_bench_fire_fires_every_schedule_once_and_reports_its_figures(tmp_path: Path) -> None:
    import argparse
    import json

    from scheduler.bench import fire

    out = tmp_path / "fire.json"
    args = argparse.Namespace(schedules=3000, budget=700, kind="cron", json_file=str(out))
    assert fire._run(args) == 0  # non-zero when a schedule did not fire exactly once
    figures = json.loads(out.read_text())
    assert figures["fired"] == 3000 and figures["ticks"] == 5 and figures["completed"] == 0
    assert figures["cpu_us_per_occurrence"] > 0
    once = argparse.Namespace(schedules=3000, budget=700, kind="once", json_file=str(out))
    assert fire._run(once) == 0  # and unless each one-time schedule's completion was written once
    figures = json.loads(out.read_text())
    assert figures["fired"] == figures["completed"] == 3000 and figures["ticks"] == 5
    assert figures["complete_cpu_us_per_occurrence"] > 0
    # RSS deltas are measurements: over 3,000 schedules the allocator may hand pages back, so
    # only their presence is checked here, not their sign.
    assert isinstance(figures["prepared_head_bytes_per_schedule"], float)
    assert isinstance(figures["rss_bytes_per_schedule"], float)


def test_bench_reports_applies_every_report_once_and_splits_its_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse
    import json

    from scheduler.bench import reports
    from scheduler.processor import runtime

    monkeypatch.setattr(runtime, "POLL_BATCH", 300)  # several polls a run, the last one short

    cases = ((False, 2000, 1, True), (True, 4000, 1, False), (False, 2000, 100, False),
             (True, 4000, 64, True))
    for started, sent, batch, single in cases:
        out = tmp_path / f"reports-{started}-{batch}.json"
        args = argparse.Namespace(reports=2000, started=started, batch=batch, rounds=2, json_file=str(out),
                                  single_events=single)
        assert reports._run(args) == 0  # non-zero unless every report was applied exactly once
        figures = json.loads(out.read_text())
        assert figures["reports"] == figures["applied"] == sent and figures["ignored"] == 0
        assert figures["records"] == -(-sent // batch) and figures["batch"] == batch
        assert figures["succeeded_events"] == figures["events_produced"] == 2000
        assert figures["single_events"] is single
        assert (figures["event_records"] == 2000) if single else (figures["event_records"] < 2000)
        assert len(figures["cpu_us_per_report_rounds"]) == 2 and figures["speed_probe_us_before"] > 0
        for stage in ("scan", "apply", "event_write"):
            assert figures[f"{stage}_cpu_us_per_report"] > 0


def test_the_events_pace_leaves_out_every_record_of_the_first_millisecond() -> None:
    """A tick writes its events in several records of one timestamp, after the work they count:
    the first tick's records all mark the span's start, none of them counts inside it."""
    from scheduler.bench.workers_load import pace

    first_tick = [(1_000, 3_000), (1_000, 2_600)]  # one tick's events, split into two records
    later = [(1_100, 3_000), (1_100, 2_600), (1_200, 5_600)]
    rate, span_s = pace([*later, *first_tick])  # in any order
    assert span_s == 0.2 and rate == 11_200 / 0.2
    assert pace([]) == (None, None) and pace(first_tick) == (None, None)
