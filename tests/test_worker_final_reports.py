"""A final report's delivery callback (no Kafka): done once acknowledged, produced again when not;
and ``ksched worker`` asks its worker to take what is alive at start-up out of the cyclic GC."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from scheduler.worker.reports import FinalReports, Reporter

Callback = Callable[[KafkaError | None, Any], None]


class SentReports:
    """A :class:`Reporter`'s ``send``: keeps each report and its delivery callback."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, Callback]] = []

    def send(self, schedule_id: str, value: bytes, on_delivery: Callback | None = None, *,
             polling: bool = False) -> None:
        assert on_delivery is not None and polling
        self.sent.append((schedule_id, value, on_delivery))


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
        metrics_port=None, no_metrics=True, log_level="WARNING",
    )
    assert worker_cmd._run(args) == 0
    assert seen["tenant"] == "t1" and seen["freeze_gc"] is True and seen["ran"]
