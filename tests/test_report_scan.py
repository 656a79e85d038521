"""The report scanner reads, and the event writer writes, exactly what fastavro does."""

from __future__ import annotations

from collections import Counter
from dataclasses import astuple
from functools import partial
from itertools import groupby, pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.records import (
    AttemptReport,
    AttemptReports,
    OccurrenceEvent,
    decode,
    decode_command_topic,
    encode,
)
from scheduler.records.avro_fast import avro_long
from scheduler.records.report import batch_value
from scheduler.records.report_scan import KINDS, REPORTS_HEADER, event, reports_of, scan, scan_batch

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
text = st.text(max_size=80)
optional_text = st.none() | text
# Equality checks, not timings: a loaded machine must not fail them on hypothesis's deadline.
exact = settings(deadline=None)

reports = st.builds(
    AttemptReport,
    occurrence_id=text, schedule_id=text, tenant=text, version=longs, scheduled_for_ms=longs,
    attempt=ints, token=text, kind=st.sampled_from(KINDS), retryable=st.none() | st.booleans(),
    error_class=optional_text, error_message=optional_text, worker_id=text, reported_at_ms=longs,
    started_at_ms=st.none() | longs,
)


@exact
@given(reports)
def test_scan_reads_what_the_codec_reads(rep: AttemptReport) -> None:
    raw = encode(rep)
    scanned = scan(raw)
    assert scanned is not None
    assert tuple(scanned) == astuple(decode_command_topic(raw))


@exact
@given(reports, st.data())
def test_a_record_that_does_not_scan_is_left_to_the_codec(rep: AttemptReport, data: st.DataObject) -> None:
    """A truncated record, trailing bytes, or any other record type: None, never a wrong report."""
    raw = encode(rep)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    assert scan(raw[:cut]) is None
    assert scan(raw + data.draw(st.binary(min_size=1, max_size=4))) is None


def test_other_records_and_bad_bytes_are_not_scanned() -> None:
    rep = AttemptReport(occurrence_id="o", schedule_id="s", tenant="t", version=1, scheduled_for_ms=0,
                        attempt=1, token="k", kind="SUCCEEDED", worker_id="w", reported_at_ms=0)
    raw = encode(rep)
    # header (10 bytes), "o", "s", "t" (2 each), version, scheduled_for, attempt (1 each), "k" (2)
    kind_at = 10 + 6 + 3 + 2
    assert raw[kind_at] == 2 * KINDS.index("SUCCEEDED")
    body = bytearray(raw)
    body[kind_at] = 2 * len(KINDS)  # an index past the symbols
    assert scan(bytes(body)) is None
    bad_utf8 = raw.replace(b"\x02o", b"\x02\xff", 1)
    assert scan(bad_utf8) is None
    ev = event(b"", "o", "s", "t", 1, 0, "SUCCEEDED", 1, None, 0)
    assert scan(ev) is None


@exact
@given(
    oid=text, sid=text, tenant=text, version=longs, sf=longs,
    state=st.sampled_from(["SCHEDULED", "ENQUEUED", "RUNNING", "SUCCEEDED", "RETRY_WAIT", "DEAD",
                           "MISSED", "CANCELED", "SKIPPED_OVERLAP"]),
    attempt=st.none() | ints, reason=optional_text, at=longs,
)
def test_event_writes_what_the_codec_writes(
    oid: str, sid: str, tenant: str, version: int, sf: int, state: str, attempt: int | None,
    reason: str | None, at: int,
) -> None:
    rec = OccurrenceEvent(occurrence_id=oid, schedule_id=sid, tenant=tenant, version=version,
                          scheduled_for_ms=sf, state=state, attempt=attempt, reason=reason,  # type: ignore[arg-type]
                          at_ms=at)
    header = encode(rec)[:10]
    value = event(header, oid, sid, tenant, version, sf, state, attempt, reason, at)
    assert value == encode(rec)
    assert decode(value, OccurrenceEvent) == rec


@exact
@given(
    oid=text, sid=text, tenant=text, version=longs, sf=st.integers(min_value=-(2**52), max_value=2**52),
    state=st.sampled_from(["SUCCEEDED", "RETRY_WAIT", "DEAD", "MISSED", "CANCELED"]),
    attempt=st.none() | ints, reason=optional_text, now=st.integers(min_value=0, max_value=2**40),
)
def test_the_processors_event_writes_what_the_codec_writes(
    oid: str, sid: str, tenant: str, version: int, sf: int, state: str, attempt: int | None,
    reason: str | None, now: int,
) -> None:
    """``wire.encode_event`` (a processor ``Event``, epoch seconds) through the compiled unpacking."""
    from scheduler.processor.model import Event
    from scheduler.processor.wire import encode_event

    rec = OccurrenceEvent(occurrence_id=oid, schedule_id=sid, tenant=tenant, version=version,
                          scheduled_for_ms=sf * 1000, state=state, attempt=attempt, reason=reason,  # type: ignore[arg-type]
                          at_ms=now * 1000)
    assert encode_event(Event(oid, sid, tenant, version, sf, state, reason, attempt), now) == encode(rec)


@exact
@given(
    fields=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "ü"]),  # the tenant
            st.sampled_from(["SUCCEEDED", "MISSED", "CANCELED", "DEAD"]),  # the state
            st.sampled_from([None, 0, 1, 2, 300]),  # the attempt (None and 0 are written apart)
            st.sampled_from([None, "", "stale", "ü" * 70]),  # the reason
            st.sampled_from([1, 2, 2**31 - 1]),  # the version
        ),
        min_size=1, max_size=30,
    ),
    sid=text, now=st.integers(min_value=0, max_value=2**40),
)
def test_a_batchs_events_go_out_in_tenant_runs_each_record_the_codecs(
    fields: list[tuple[str, str, int | None, str | None, int]], sid: str, now: int
) -> None:
    """``wire.event_runs`` with batches off: every event once, in order, in maximal runs of one
    tenant, each to its tenant's topic with its header, each record what ``encode_event`` writes, keyed by its
    schedule, each counted by (tenant, state). Runs mix states, attempts, reasons and versions:
    the run's writer encodes the fields they share once."""
    from scheduler.processor.model import Event
    from scheduler.processor.wire import encode_event, event_runs
    from scheduler.records.codec import schema_header

    header = schema_header(OccurrenceEvent)
    tenants = [f[0] for f in fields]
    events = [Event(f"o{i}", f"{sid}{i}", t, version, 60 * i, state, reason, attempt)
              for i, (t, state, attempt, reason, version) in enumerate(fields)]
    counts: dict[tuple[str, str], int] = {("a", "SUCCEEDED"): 2}  # added to, not replaced
    runs = list(event_runs(events, now, lambda t: (f"events.{t}", header, b""), counts))
    assert [topic for topic, _ in runs] == [f"events.{t}" for i, t in enumerate(tenants)
                                            if i == 0 or tenants[i - 1] != t]
    written = [m for _, run in runs for m in run]
    assert written == [{"value": encode_event(ev, now), "key": ev.schedule_id.encode()} for ev in events]
    assert [len(run) for _, run in runs] == [len(list(g)) for _, g in groupby(tenants)]  # maximal runs
    expected = Counter((f[0], f[1]) for f in fields)
    expected[("a", "SUCCEEDED")] += 2
    assert counts == dict(expected)


@exact
@given(
    fields=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),  # the tenant
            st.sampled_from(["SUCCEEDED", "MISSED", "DEAD"]),  # the state
            st.sampled_from([None, 1, 300]),  # the attempt
            st.sampled_from([None, "stale", "ü" * 70]),  # the reason
        ),
        min_size=1, max_size=40,
    ),
    sid=text, now=st.integers(min_value=0, max_value=2**40),
    batch_bytes=st.sampled_from([1, 150, 400, 10**6]),
)
def test_a_runs_events_go_out_as_batches_each_the_codecs(
    fields: list[tuple[str, str, int | None, str | None]], sid: str, now: int, batch_bytes: int
) -> None:
    """``event_run`` with a batch header: each tenant run's events, in order, as ``OccurrenceEvents``
    records (unkeyed) of at most ``batch_bytes`` of events, or one event when it alone is larger;
    a run of one event as its keyed ``OccurrenceEvent`` record. The oracle is the codec's decoding
    of each record and its encoding of each event."""
    from scheduler.processor.model import Event
    from scheduler.records import OccurrenceEvents, occurrence_events, record_type
    from scheduler.records.codec import schema_header
    from scheduler.records.report_scan import EVENTS_HEADER, STATE_INDEX, event_run

    header = schema_header(OccurrenceEvent)
    events = [Event(f"o{i}", f"{sid}{i}", t, 1, 60 * i, state, reason, attempt)
              for i, (t, state, attempt, reason) in enumerate(fields)]
    start, got, counts = 0, [], {}  # type: ignore[var-annotated]
    while start < len(events):
        run, end = event_run(STATE_INDEX, now * 1000, header, events, start, counts,  # type: ignore[arg-type]
                             EVENTS_HEADER, batch_bytes)
        assert {e.tenant for e in events[start:end]} == {events[start].tenant}
        assert end == len(events) or events[end].tenant != events[start].tenant  # maximal
        if end - start == 1:
            alone = {"value": occurrence_events_record(events[start], now), "key": events[start][1].encode()}
            assert run == [alone]
        else:
            for m in run:
                assert "key" not in m and record_type(m["value"]) is OccurrenceEvents
                n = len(occurrence_events(m["value"]))
                assert n == 1 or len(m["value"]) - len(EVENTS_HEADER) - 2 <= batch_bytes
        got += [e for m in run for e in occurrence_events(m["value"])]
        # each record as full as allowed: the next record's first event would not have fit
        batches = [m["value"] for m in run if "key" not in m]
        for this, after in pairwise(batches):
            first_after = len(encode(occurrence_events(after)[0])) - 10  # its body
            items = len(this) - len(EVENTS_HEADER) - len(avro_long(len(occurrence_events(this)))) - 1
            assert items + first_after > batch_bytes
        if batch_bytes == 10**6:
            assert len(run) == 1  # a run's events in one record
        start = end
    assert [encode(e) for e in got] == [occurrence_events_record(ev, now) for ev in events]
    assert counts == dict(Counter(f[1] for f in fields))


def occurrence_events_record(ev: object, now: int) -> bytes:
    """The codec's ``OccurrenceEvent`` record of a processor ``Event`` stamped ``now``."""
    oid, sid, tenant, version, sf, state, reason, attempt = ev  # type: ignore[misc]
    return encode(OccurrenceEvent(occurrence_id=oid, schedule_id=sid, tenant=tenant, version=version,
                                  scheduled_for_ms=sf * 1000, state=state, attempt=attempt, reason=reason,
                                  at_ms=now * 1000))


@exact
@given(st.lists(reports, max_size=6))
def test_scan_batch_reads_what_the_codec_reads(reps: list[AttemptReport]) -> None:
    raw = encode(AttemptReports(reports=tuple(reps)))
    assert batch_value([encode(r) for r in reps]) == raw  # the worker's writer, byte for byte
    assert scan_batch(raw) == [astuple(r) for r in reps]
    assert reports_of(raw) == [astuple(r) for r in reps]
    assert scan(raw) is None  # another header: the inbox tries the batch only after the report


def two_blocks(header: bytes, first: list[bytes], second: list[bytes]) -> bytes:
    """``header``, then an array of the bodies of single-object records ``first`` as one block of
    -count and its size in bytes, and ``second`` as a plain block."""
    a, b = b"".join(r[10:] for r in first), b"".join(r[10:] for r in second)
    return b"".join((header, avro_long(-len(first)), avro_long(len(a)), a,
                     avro_long(len(second)), b, b"\x00"))


events = st.builds(
    OccurrenceEvent, occurrence_id=text, schedule_id=text, tenant=text, version=longs, scheduled_for_ms=longs,
    state=st.sampled_from(["SUCCEEDED", "DEAD", "CANCELED"]), attempt=st.none() | ints, reason=optional_text,
    at_ms=longs,
)
some = partial(st.lists, min_size=1, max_size=4)


@exact
@given(some(reports), some(reports), some(events), some(events))
def test_batches_are_read_in_blocks_with_a_negative_count_and_their_size(
    r1: list[AttemptReport], r2: list[AttemptReport], e1: list[OccurrenceEvent], e2: list[OccurrenceEvent]
) -> None:
    """The Avro specification lets a writer send a block as -count and its size in bytes: the
    compiled readers of ``AttemptReports`` and ``OccurrenceEvents`` read it as the codec does."""
    from scheduler.history.readers import events_fields
    from scheduler.records import OccurrenceEvents, occurrence_events
    from scheduler.records.report_scan import EVENTS_HEADER

    raw = two_blocks(REPORTS_HEADER, [encode(r) for r in r1], [encode(r) for r in r2])
    assert scan_batch(raw) == [astuple(r) for r in r1 + r2]
    assert decode_command_topic(raw) == AttemptReports(reports=tuple(r1 + r2))
    raw = two_blocks(EVENTS_HEADER, [encode(e) for e in e1], [encode(e) for e in e2])
    assert occurrence_events(raw) == e1 + e2
    assert [f[:5] for f in events_fields(raw)] == [
        (e.occurrence_id, e.schedule_id, e.tenant, e.version, e.scheduled_for_ms) for e in e1 + e2]
    assert raw != encode(OccurrenceEvents(events=tuple(e1 + e2)))  # not the writer's one block


@exact
@given(st.lists(reports, min_size=1, max_size=4), st.data())
def test_a_batch_that_does_not_scan_is_left_to_the_codec(
    reps: list[AttemptReport], data: st.DataObject
) -> None:
    """A truncated batch, trailing bytes, a bad item or a single report: None, never some of its reports."""
    raw = encode(AttemptReports(reports=tuple(reps)))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    assert scan_batch(raw[:cut]) is None
    assert scan_batch(raw + data.draw(st.binary(min_size=1, max_size=4))) is None
    assert scan_batch(encode(reps[0])) is None
