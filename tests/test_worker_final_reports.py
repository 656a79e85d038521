"""A final report's delivery callback (no Kafka): done once acknowledged, produced again when not;
and ``ksched worker`` asks its worker to take what is alive at start-up out of the cyclic GC."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from scheduler.records import AttemptReport, AttemptReports, decode, encode
from scheduler.worker.reports import BATCH_BYTES, FinalReports, Reporter

Callback = Callable[[KafkaError | None, Any], None]


class SentReports:
    """A :class:`Reporter`'s ``send``: keeps each report and its delivery callback (and the
    partition of each unkeyed record)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, Callback]] = []
        self.partitions: list[int] = []

    def send(self, schedule_id: str | None, value: bytes, on_delivery: Callback | None = None, *,
             partition: int = -1, polling: bool = False) -> None:
        assert on_delivery is not None and polling
        assert (schedule_id is None) == (partition >= 0)  # keyed, or unkeyed to a partition
        self.sent.append((schedule_id or "", value, on_delivery))
        self.partitions.append(partition)


def _finals() -> tuple[FinalReports[str], SentReports, list[str]]:
    sent, done = SentReports(), []
    reporter: Reporter = sent  # type: ignore[assignment]  # only send is used
    return FinalReports(reporter, done.append), sent, done


def test_a_job_is_done_once_its_report_is_acknowledged_and_not_before() -> None:
    finals, sent, done = _finals()
    finals.send("job-1", "s1", b"r1", polling=True)
    finals.send("job-2", "s2", b"r2", polling=True)
    assert done == [] and [(sid, v) for sid, v, _ in sent.sent] == [("s1", b"r1"), ("s2", b"r2")]
    sent.sent[1][2](None, object())
    sent.sent[0][2](None, object())
    assert done == ["job-2", "job-1"]
    finals.resend_failed()
    assert len(sent.sent) == 2  # nothing failed: nothing produced again


def test_a_report_not_delivered_is_produced_again_with_its_job_and_only_then_done() -> None:
    finals, sent, done = _finals()
    finals.send("job-1", "s1", b"r1", polling=True)
    sent.sent[0][2](KafkaError(KafkaError._MSG_TIMED_OUT), object())
    assert done == []
    finals.resend_failed()
    assert [(sid, v) for sid, v, _ in sent.sent] == [("s1", b"r1"), ("s1", b"r1")]
    sent.sent[1][2](None, object())
    assert done == ["job-1"]
    finals.resend_failed()
    assert len(sent.sent) == 2


def _report(i: int, error: str | None = None) -> AttemptReport:
    return AttemptReport(occurrence_id=f"o{i}", schedule_id=f"s{i}", tenant="t", version=1,
                         scheduled_for_ms=60_000 * i, attempt=1, token=f"k{i}", kind="FAILED" if error else
                         "SUCCEEDED", error_class=error and "E", error_message=error, worker_id="w",
                         reported_at_ms=1)


def test_a_batch_of_finals_is_one_record_to_its_partition_and_its_jobs_done_together() -> None:
    finals, sent, done = _finals()
    reps = [_report(i) for i in range(5)]
    finals.send_batch([f"job-{i}" for i in range(5)], 3, [encode(r) for r in reps], polling=True)
    assert sent.partitions == [3] and len(sent.sent) == 1
    assert decode(sent.sent[0][1], AttemptReports) == AttemptReports(reports=tuple(reps))
    assert done == []
    sent.sent[0][2](None, object())
    assert done == [f"job-{i}" for i in range(5)]


def test_a_batch_is_cut_into_records_under_the_byte_limit_in_order() -> None:
    """Reports with long error messages: no record over BATCH_BYTES but one that holds one report
    alone; every report once, in order, each record's jobs done when it is acknowledged."""
    finals, sent, done = _finals()
    reps = [_report(i, "x" * (BATCH_BYTES // 3 if i % 4 else BATCH_BYTES + 10)) for i in range(9)]
    finals.send_batch([f"job-{i}" for i in range(9)], 0, [encode(r) for r in reps], polling=True)
    records = [decode(v, AttemptReports).reports for _, v, _ in sent.sent]
    assert [r for rec in records for r in rec] == reps
    assert all(len(v) <= BATCH_BYTES + 100 or len(rec) == 1
               for (_, v, _), rec in zip(sent.sent, records, strict=True))
    assert len(records) > 3
    sent.sent[1][2](None, object())
    assert done == [f"job-{i}" for i in range(len(records[0]), len(records[0]) + len(records[1]))]


def test_a_batch_not_delivered_is_produced_again_whole_and_only_then_done() -> None:
    finals, sent, done = _finals()
    values = [encode(_report(i)) for i in range(3)]
    finals.send_batch(["a", "b", "c"], 2, values, polling=True)
    sent.sent[0][2](KafkaError(KafkaError._MSG_TIMED_OUT), object())
    finals.resend_failed()
    assert done == [] and sent.partitions == [2, 2] and sent.sent[1][1] == sent.sent[0][1]
    sent.sent[1][2](None, object())
    assert done == ["a", "b", "c"]


def test_the_worker_command_runs_its_worker_with_freeze_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ksched worker`` runs the worker alone in its process: it asks it to freeze what is alive once
    its view caught up (tests/test_worker_e2e.py checks what that freezes)."""
    import scheduler.worker as worker_pkg
    from scheduler.cli import worker_cmd

    seen: dict[str, Any] = {}

    class RecordingWorker:
        def __init__(self, *_: Any, **kw: Any) -> None:
            seen.update(kw)

        def run(self) -> None:
            seen["ran"] = True

    monkeypatch.setattr(worker_pkg, "Worker", RecordingWorker)
    monkeypatch.setattr(worker_cmd, "load_handlers", lambda _spec: {"h": lambda ctx: None})
    args = argparse.Namespace(
        tenant="t1", handlers="x", concurrency=None, worker_id=None, grace_s=1.0, heartbeat_s=1.0,
        metrics_port=None, no_metrics=True, log_level="WARNING", single_reports=False,
    )
    assert worker_cmd._run(args) == 0
    assert seen["tenant"] == "t1" and seen["freeze_gc"] is True and seen["ran"]
    assert seen["batch_reports"] is True  # a fast batch's final reports: one record a partition
    args.single_reports = True
    assert worker_cmd._run(args) == 0 and seen["batch_reports"] is False
