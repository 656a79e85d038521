"""``ksched bench workers``: loading its schedules and reading when they fired.

The due instant is written into every CREATE, so it must be chosen before the load; a guessed
load rate put it too early at 500,000 (the processor still had ~170,000 creates to apply when
they fell due, and those fired late on the catch-up lane). Here the instant follows the load the
processor shows in this run: a calibration slice (schedules due half a day later, never fired in the
bench) measures its apply rate, the instant is placed past the whole load at that rate (with a
margin), and the bench then waits for every create's result, so the figures say how far ahead of
the instant the load really finished (``applied_ahead_s``) and how long it took (``load_s``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from confluent_kafka import Message

TENANT = "bw"
# The apply rate falls as the processor's state grows, and other jobs share this machine's 2 cores.
# The calibration is timed from its first CREATE (its start-up and a commit's latency in it), so it
# reads low already: 1,045/s for a load that then ran at 1,532/s (load average 15).
SAFETY = 1.3
MARGIN_S = 5.0  # past the estimated end of the load: the workers are idle and sampled before the instant


@dataclass
class Load:
    due: int  # epoch seconds of the first burst
    calibrated_rate_per_s: float  # creates applied per second on the calibration slice
    load_s: float  # first CREATE produced -> last one's result read
    applied_ahead_s: float  # due instant - the moment every create was applied (negative: late)


def _produce_creates(prod: Any, topic: str, count: int, at_epoch: int, kind: str) -> None:
    from scheduler.domain import ScheduleSpec
    from scheduler.kafka.clients import produce_waiting
    from scheduler.records import ScheduleCommand, ScheduleSpecRecord, encode

    if kind == "cron":  # daily at the instant's minute (a whole minute: see load)
        hm = time.gmtime(at_epoch)
        cron = f"{hm.tm_min} {hm.tm_hour} * * *"
        domain = ScheduleSpec(kind="cron", cron=cron, timezone="UTC", handler="noop")
    else:
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_epoch))
        domain = ScheduleSpec(kind="once", at=at, timezone="UTC", handler="noop")
    spec = ScheduleSpecRecord.from_domain(domain)
    for _ in range(count):
        sid = uuid.uuid4().hex
        cmd = ScheduleCommand(
            request_id=sid, tenant=TENANT, schedule_id=sid, kind="CREATE", spec=spec,
            issued_at_ms=int(time.time() * 1000),
        )
        produce_waiting(prod, topic, encode(cmd), sid.encode())


def _wait_results(results: Any, count: int, timeout_s: float) -> int:
    """Read ``count`` command results (or until ``timeout_s``); returns how many were read."""
    seen = 0
    deadline = time.monotonic() + timeout_s
    while seen < count and time.monotonic() < deadline:
        seen += sum(1 for m in results.consume(10_000, 0.2) if m.error() is None)
    return seen


def load(settings: Any, bursts: Iterable[tuple[int, float]], calibration: int, kind: str = "once") -> Load:
    """Create the schedules of ``bursts`` ((count, seconds after the first instant) each) and wait
    until the processor (restored: see :func:`wait_restored`) has applied them all; the first
    instant follows the measured apply rate. ``kind`` ``cron``: daily schedules, the instants
    rounded up to a whole minute (a cron's resolution), so the bursts' offsets must be whole
    minutes too."""
    from confluent_kafka import TopicPartition

    from scheduler.kafka.clients import consumer, producer
    from scheduler.topology import topic_name

    bursts = list(bursts)
    if kind == "cron" and any(after % 60 for _, after in bursts):
        raise SystemExit("with --kind cron the bursts are whole minutes apart (a cron's resolution): "
                         "give --second-burst a multiple of 60")
    total = sum(c for c, _ in bursts)
    t_commands = topic_name(settings, "commands", TENANT)
    results = consumer(settings.kafka())
    t_results = topic_name(settings, "results", TENANT)
    results.assign([TopicPartition(t_results, p, 0) for p in range(settings.partitions)])
    prod = producer(settings.kafka())
    try:
        t = time.monotonic()
        # half a day away: a daily cron at that time of day does not fire in the bench either
        _produce_creates(prod, t_commands, calibration, int(time.time()) + 43_200, kind)
        prod.flush(60)
        if _wait_results(results, calibration, 300) < calibration:
            raise SystemExit(f"calibration: the processor did not apply {calibration:,} creates in 300 s")
        # From the first CREATE produced, as the load below is timed: timing from the first result
        # read 2,610/s where the load then ran at 1,194/s (results come in a few transactions).
        rate = calibration / (time.monotonic() - t)
        due = int(time.time() + SAFETY * total / rate + MARGIN_S) + 1
        if kind == "cron":
            due = -(-due // 60) * 60
        print(f"calibration: {calibration:,} creates applied at {rate:,.0f}/s; "
              f"{total:,} schedules due from {time.strftime('%H:%M:%S', time.gmtime(due))}Z")
        t = time.monotonic()
        for count, after_s in bursts:
            _produce_creates(prod, t_commands, count, due + int(after_s), kind)
        prod.flush(300)
        seen = _wait_results(results, total, max(600.0, total / 100))
        load_s = time.monotonic() - t
        ahead = due - time.time()
    finally:
        results.close()
    if seen < total:
        raise SystemExit(f"load: {seen:,}/{total:,} creates applied in {load_s:.0f} s")
    print(f"{total:,} creates applied in {load_s:.1f}s ({total / load_s:,.0f}/s), "
          f"{ahead:.1f}s before the instant")
    if ahead < 0:
        print(f"warning: the load ended {-ahead:.1f}s after the due instant: the first ones fired late")
    return Load(due, rate, load_s, ahead)


def read_topic(settings: Any, name: str, take: Callable[[Message], None]) -> None:
    """Every committed record of the bench tenant's topic ``name``, all partitions from their start,
    each to ``take`` (errors skipped). Read after the run (decoding during it would take CPU from
    the processor on this 2-core machine)."""
    from confluent_kafka import TopicPartition

    from scheduler.kafka.clients import consumer
    from scheduler.topology import topic_name

    c = consumer(settings.kafka())
    topic = topic_name(settings, name, TENANT)
    tps = [TopicPartition(topic, p, 0) for p in range(settings.partitions)]
    ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.assign(tps)
    try:
        # Positions, not the last record's offset: a transaction's commit marker ends each partition.
        while any(ends[tp.partition] > 0 and tp.offset < ends[tp.partition] for tp in c.position(tps)):
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    take(m)
    finally:
        c.close()


def dispatch_lags(settings: Any, instants_ms: list[int]) -> dict[int, list[float]]:
    """Per scheduled instant: each occurrence's lag on the dispatch topic (the broker's append time
    - ``available_at``), first record per occurrence, sorted."""
    from scheduler.records import Occurrence, decode_fields

    lags: dict[int, dict[str, float]] = {ms: {} for ms in instants_ms}

    def take(m: Message) -> None:
        r = decode_fields(m.value() or b"", Occurrence)
        per = lags.get(r["scheduled_for_ms"])
        if per is not None:
            per.setdefault(r["occurrence_id"], (m.timestamp()[1] - r["available_at_ms"]) / 1000)

    read_topic(settings, "dispatch", take)
    return {ms: sorted(per.values()) for ms, per in lags.items()}


def events_rate(settings: Any, since_ms: int) -> dict[str, Any]:
    """The processor's own pace through a held backlog, timed by its events records: each record's
    timestamp is its ``produce()`` on the processor's clock, to the millisecond (the group offsets
    the bench polls answer 50-500 ms late on a loaded broker: a fifth of a 2.5 s span). Of the
    records written at or after ``since_ms``: :func:`pace`."""
    from scheduler.records import occurrence_events

    stamped: list[tuple[int, int]] = []  # (timestamp ms, events in the record)

    def take(m: Message) -> None:
        ts = m.timestamp()[1]
        if ts >= since_ms:
            stamped.append((ts, len(occurrence_events(m.value() or b""))))

    read_topic(settings, "occurrence-events", take)
    rate, span_s = pace(stamped)
    return {"held_events_reports_per_s": rate, "held_events_span_s": span_s}


def pace(stamped: list[tuple[int, int]]) -> tuple[float | None, float | None]:
    """Events a second and the span in seconds, from ``(timestamp ms, events)`` per record: the
    events of the records stamped after the first millisecond, over the seconds from it to the last
    record's. Every record of the first millisecond is left out: a tick's events are written
    together, in records of the same timestamp, after the work they count. (None, None) when the
    records span no time."""
    if not stamped:
        return None, None
    first = min(ts for ts, _ in stamped)
    span_s = (max(ts for ts, _ in stamped) - first) / 1000
    if span_s <= 0:
        return None, None
    return sum(n for ts, n in stamped if ts > first) / span_s, span_s


def pct(sorted_vals: list[float], q: float) -> float | None:
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))] if sorted_vals else None
