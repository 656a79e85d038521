"""The dispatch fast path writes exactly what fastavro writes for the same Occurrence."""

from __future__ import annotations

import io
import itertools
from unittest.mock import patch

import pytest
from fastavro import schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from scheduler.records import Occurrence, current_schema, decode, encode
from scheduler.records.dispatch import avro_long, dispatch_head, dispatch_record, dispatch_run, lane_index
from scheduler.vocabulary import Lane

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
text = st.text(min_size=1, max_size=40)


@given(longs)
def test_avro_long_matches_fastavro(n: int) -> None:
    buf = io.BytesIO()
    schemaless_writer(buf, "long", n)
    assert avro_long(n) == buf.getvalue()


@given(
    oid=text,
    sid=text,
    tenant=text,
    version=st.integers(min_value=1, max_value=2**40),
    sf=st.integers(min_value=0, max_value=2**45),
    jitter=st.integers(min_value=0, max_value=86_400_000),
    enq=longs,
    attempt=st.integers(min_value=1, max_value=2**31 - 1),
    lane=st.sampled_from(["STRICT", "FLEXIBLE", "CATCH_UP", "RETRY"]),
    handler=text,
    payload=st.binary(max_size=300),
    deadline=st.none() | longs,
)
def test_header_ids_run_stamp_tail_equal_the_encoded_record(
    oid: str, sid: str, tenant: str, version: int, sf: int, jitter: int, enq: int, attempt: int,
    lane: str, handler: str, payload: bytes, deadline: int | None,
) -> None:
    rec = Occurrence(
        occurrence_id=oid, schedule_id=sid, tenant=tenant, version=version, scheduled_for_ms=sf,
        available_at_ms=sf + jitter, enqueued_at_ms=enq, attempt=attempt, lane=lane,  # type: ignore[arg-type]
        handler=handler, payload=payload, deadline_ms=deadline,
    )
    header = current_schema(Occurrence).header
    head, run = dispatch_head(oid, sid), dispatch_run(tenant, version, sf, sf + jitter)
    value = dispatch_record(header, head, sid.encode(), run, avro_long(enq), attempt, lane_index(lane),
                            handler, payload, deadline)
    assert value == encode(rec)
    assert decode(value, Occurrence) == rec


@given(st.lists(st.tuples(st.floats(min_value=0, max_value=5000, allow_nan=False), st.integers(1, 50)),
                max_size=20))
def test_observe_many_equals_repeated_observe(obs: list[tuple[float, int]]) -> None:
    from prometheus_client import CollectorRegistry, Histogram

    from scheduler.processor.metrics import LAG_BUCKETS, observe_many

    def samples(fast: bool) -> list[tuple[str, dict[str, str], float]]:
        reg = CollectorRegistry()
        h = Histogram("lag", "lag", ["t"], buckets=LAG_BUCKETS, registry=reg).labels(t="a")
        for value, n in obs:
            if fast:
                observe_many(h, value, n)
            else:
                for _ in range(n):
                    h.observe(value)
        return [(s.name, s.labels, s.value) for m in reg.collect() for s in m.samples
                if not s.name.endswith("_created")]

    fast, slow = samples(True), samples(False)
    assert [(n, labels) for n, labels, _ in fast] == [(n, labels) for n, labels, _ in slow]
    # Counts are exact; the sum is one multiplication against n additions: equal up to float rounding.
    assert [v for *_, v in fast] == pytest.approx([v for *_, v in slow], rel=1e-9, abs=1e-9)


@given(st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.integers(0, 3), st.integers(0, 5)), max_size=60))
def test_observe_tick_counts_each_occurrence_by_tenant_and_lane(fired: list[tuple[str, int, int]]) -> None:
    """The tick's lag and emitted metrics, grouped in C, against one observe / inc per occurrence."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from scheduler.processor.metrics import LAG_BUCKETS, ProcessorMetrics
    from scheduler.processor.model import DueOccurrence
    from scheduler.processor.outputs import TickOutput
    from scheduler.processor.shard import Shard
    from scheduler.vocabulary import Lane

    clock = 1_800_000_010.5
    out = TickOutput()
    out.dispatch = [DueOccurrence(f"s{i}", t, 1, 1_800_000_000 + sf, 1_800_000_000 + sf, lane, "h", b"")
                    for i, (t, lane, sf) in enumerate(fired)]
    metrics = ProcessorMetrics()
    metrics.observe_tick(Shard(0, {}, partitions=1), out, clock)
    reg = CollectorRegistry()
    lag = Histogram("ksched_schedule_lag_seconds", "", ["tenant", "lane"], buckets=LAG_BUCKETS, registry=reg)
    emitted = Counter("ksched_emitted_total", "", ["tenant", "lane"], registry=reg)
    for t, lane, sf in fired:
        lag.labels(tenant=t, lane=Lane(lane).name).observe(clock - (1_800_000_000 + sf))
        emitted.labels(tenant=t, lane=Lane(lane).name).inc()

    def samples(r: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted((s.name, tuple(sorted(s.labels.items())), round(s.value, 6)) for m in r.collect()
                      for s in m.samples if m.name in ("ksched_schedule_lag_seconds", "ksched_emitted")
                      and not s.name.endswith("_created"))

    assert samples(metrics.registry) == samples(reg)


@given(st.lists(st.tuples(st.sampled_from(["t0", "t1", "t2"]), st.booleans(), st.sampled_from(list(Lane)),
                          st.integers(1, 2**31 - 1), st.binary(max_size=40)), max_size=30),
       st.integers(1, 7))
def test_produce_dispatch_writes_each_occurrence_as_encode_dispatch_does(
    cases: list[tuple[str, bool, Lane, int, bytes]], run_max: int
) -> None:
    """One record per occurrence, in order, on its tenant's topic and partition, keyed by its
    schedule id, byte-equal to ``encode_dispatch`` (prepared ids or not; occurrences that share
    their run's piece or not), sent in runs of one tenant of at most ``DISPATCH_RUN_MAX``."""
    from scheduler.processor import wire
    from scheduler.processor.model import DueOccurrence

    stamp = avro_long(1_800_000_000_123)
    occs = []
    for i, (tenant, prepared, lane, attempt, payload) in enumerate(cases):
        sid, f, version = f"s-{i}", 1_800_000_000 + i // 4, 4 if i % 5 == 0 else 3  # runs of equal f
        avail = f + (i % 2) * (i % 7)
        o = DueOccurrence(sid, tenant, version, f, avail, int(lane), f"h{i}", payload, attempt)
        occs.append(o._replace(prepared=dispatch_head(o.occurrence_id, sid)) if prepared else o)
    sent: list[tuple[str, list[dict[str, bytes]], int]] = []

    def send(topic: str, messages: list[dict[str, bytes]], partition: int) -> None:
        sent.append((topic, list(messages), partition))

    def topic(t: str) -> str:
        return f"ksched.dispatch.{t}"

    def header(t: str) -> bytes:  # a framing of each tenant's own (Confluent ids differ per topic)
        return b"\x00" + t.encode().rjust(4, b"-")

    with patch.object(wire, "DISPATCH_RUN_MAX", run_max):
        wire.produce_dispatch(occs, stamp, topic, header, send, 5)
    written = [(t, m["value"], m["key"], p) for t, run, p in sent for m in run]
    expected = [(topic(o.tenant), wire.encode_dispatch(o, stamp, header), o.schedule_id.encode(), 5)
                for o in occs]
    assert all(w[1].startswith(header(o.tenant)) for w, o in zip(written, occs, strict=True))
    assert written == expected
    assert all(0 < len(run) <= run_max and all(m["key"] for m in run) for _, run, _ in sent)
    # a run ends only at a tenant change or when full: as few calls as the tenants' runs allow
    tenant_runs = [len(list(g)) for _, g in itertools.groupby(o.tenant for o in occs)]
    assert len(sent) == sum(-(-n // run_max) for n in tenant_runs)
