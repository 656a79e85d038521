"""An ``AttemptReports`` record is taken exactly as its reports sent one record each (no Kafka):
the same occurrence events in the same order, the same attempts tracked and finished, the same
reports counted and ignored; and one that does not scan goes to the general decoder, whole."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition

import scheduler.processor.inbox as inbox_module
from scheduler.bench.fire import _TENANT
from scheduler.bench.reports import _fired_shard, _reports
from scheduler.processor.checkpoint import Checkpoints
from scheduler.processor.inbox import Inbox
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.ownership import OwnedShard
from scheduler.processor.shard import Shard
from scheduler.records import (
    AttemptReport,
    AttemptReports,
    CommandResult,
    OccurrenceEvent,
    decode,
    encode,
    occurrence_events,
)
from scheduler.records.report import batch_value
from scheduler.settings import load_settings
from scheduler.topology import topic_name

DUE = 1_800_000_000 - (1_800_000_000 % 3600)


class Recorded:
    """A transactional producer that keeps what a checkpoint produces, in order."""

    def __init__(self) -> None:
        self.out: list[tuple[str, bytes | None]] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, **_: Any) -> None:
        self.out.append((topic, value))

    def produce_batch(self, topic: str, messages: list[dict[str, bytes]], partition: int = -1) -> int:
        self.out += [(topic, m["value"]) for m in messages]
        return len(messages)

    def poll(self, _timeout: float = 0) -> int:
        return 0


def _events(out: list[tuple[str, bytes | None]]) -> list[OccurrenceEvent]:
    """The occurrence events among ``out``, each of a batch record in order."""
    return [e for topic, v in out if ".occurrence-events." in topic for e in occurrence_events(v or b"")]


def _take(shard: Shard, values: list[bytes]) -> tuple[Recorded, dict[str, float], bool]:
    settings = load_settings(env={})
    checkpoints = Checkpoints(settings, 1)
    topic = topic_name(settings, "commands", _TENANT)
    msgs = [Message(topic=topic, partition=0, offset=i, value=v) for i, v in enumerate(values)]
    producer = Recorded()
    owned = OwnedShard(shard=shard, producer=producer, partition=TopicPartition(topic, 0))  # type: ignore[arg-type]
    cp = checkpoints.open(owned, msgs, float(DUE + 1), lambda _name: None)  # type: ignore[arg-type]
    cp.begin()
    metrics = ProcessorMetrics()
    inbox = Inbox({_TENANT: shard.tenants[_TENANT]}, metrics, checkpoints.topics)
    bug = inbox.take_all(shard, cp, msgs, DUE + 1)
    counts = {f"{s.name}{s.labels}": s.value for m in metrics.registry.collect() for s in m.samples
              if "attempt_reports" in s.name and s.name.endswith("_total")}
    return producer, counts, bug


def _forged(value: bytes) -> bytes:
    """``value``'s report claimed by another tenant: ignored and counted, never applied."""
    rep = decode(value, AttemptReport)
    return encode(AttemptReport(**{f: getattr(rep, f) for f in rep.__slots__} | {"tenant": "other"}))


@pytest.mark.parametrize("started", [False, True], ids=["fast-intake", "tracked"])
def test_a_batch_is_taken_as_its_reports_one_record_each(started: bool) -> None:
    """Final reports alone (the fast intake's path, as fast handlers send them) or after STARTED
    (the tracked attempt's path); a forgery and a duplicate among them."""
    shard, dispatched = _fired_shard(40, DUE)
    reports = _reports(dispatched, started=started)
    reports[5:5] = [_forged(reports[7]), reports[9]]  # a forgery, and a report sent twice
    twin, _ = _fired_shard(len(dispatched), DUE)  # the same schedules and ids (the payloads differ)
    alone, counted_alone, bug_alone = _take(shard, reports)
    batched, counted_batched, bug_batched = _take(twin, [batch_value(reports[:30]),
                                                         batch_value(reports[30:])])
    assert not bug_alone and not bug_batched
    assert batched.out == alone.out and len(_events(alone.out)) >= 40
    assert counted_batched == counted_alone
    oids = {decode(v, AttemptReport).occurrence_id for v in reports}
    assert len(oids) == 40
    assert all(twin.attempts.last_finished(o) == shard.attempts.last_finished(o) == 1 for o in oids)


def test_a_batch_that_does_not_scan_is_decoded_whole_or_answered_undecodable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The general decoder applies a batch the scanner leaves to it (framed for a registry, say)
    exactly as the scanner's path does; a corrupt one is answered UNDECODABLE, no report of it
    applied, and the records after it are taken as usual."""
    shard, dispatched = _fired_shard(10, DUE)
    reports = _reports(dispatched, started=True)
    decoded = tuple(decode(v, AttemptReport) for v in reports)
    assert encode(AttemptReports(reports=decoded)) == batch_value(reports)
    fast, counted_fast, _ = _take(shard, [batch_value(reports)])
    twin, _ = _fired_shard(len(dispatched), DUE)
    monkeypatch.setattr(inbox_module, "scan_batch", lambda _raw: None)  # every batch the general way
    general, counted_general, bug = _take(twin, [batch_value(reports[:-3])[:-5], batch_value(reports)])
    assert not bug
    assert general.out[0][0] == topic_name(load_settings(env={}), "results", _TENANT)
    assert decode(general.out[0][1] or b"", CommandResult).code == "UNDECODABLE"
    assert general.out[1:] == fast.out and counted_general == counted_fast
