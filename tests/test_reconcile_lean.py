"""The reconciler's lean record readers agree with the complete ones on every record they read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.history.readers import dispatch_fields, events_fields
from scheduler.reconcile.lean import dispatch_head, event_heads
from scheduler.records import Occurrence, OccurrenceEvent, OccurrenceEvents, encode
from scheduler.records.report_scan import STATE_INDEX

texts = st.text(min_size=0, max_size=80)
longs = st.integers(-(2**62), 2**62)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(oid=texts, sid=texts, ten=texts, ver=longs, sf=longs, av=longs, enq=longs,
       att=st.integers(-(2**31), 2**31 - 1), deadline=st.none() | longs)
def test_reconcile_lean_dispatch_head_matches_the_complete_reader(
    oid: str, sid: str, ten: str, ver: int, sf: int, av: int, enq: int, att: int, deadline: int | None
) -> None:
    v = encode(Occurrence(occurrence_id=oid, schedule_id=sid, tenant=ten, version=ver, scheduled_for_ms=sf,
                          available_at_ms=av, enqueued_at_ms=enq, attempt=att, lane="STRICT", handler="h",
                          payload=b"p" * 70, deadline_ms=deadline))
    f = dispatch_fields(v)
    assert dispatch_head(v) == (f[0], f[1], f[2], f[3], f[4], f[6])


events = st.builds(
    OccurrenceEvent, occurrence_id=texts, schedule_id=texts, tenant=texts, version=longs,
    scheduled_for_ms=longs,
    state=st.sampled_from(list(STATE_INDEX)),  # every symbol of OccurrenceState
    attempt=st.none() | st.integers(-(2**31), 2**31 - 1), reason=st.none() | texts, at_ms=longs,
)


def _fields(e: OccurrenceEvent) -> tuple[object, ...]:
    """What the readers return, from the record's own fields (the codec decoded them)."""
    return (e.occurrence_id, e.schedule_id, e.tenant, e.version, e.scheduled_for_ms, str(e.state),
            e.attempt or 0, e.reason, e.at_ms)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(events)
def test_reconcile_lean_event_head_matches_the_complete_reader(e: OccurrenceEvent) -> None:
    v = encode(e)
    assert events_fields(v) == [_fields(e)]
    assert event_heads(v) == [_fields(e)[:7]]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(events, max_size=5))
def test_the_readers_take_each_event_of_a_batch_in_order(evs: list[OccurrenceEvent]) -> None:
    v = encode(OccurrenceEvents(events=tuple(evs)))
    assert events_fields(v) == [_fields(e) for e in evs]
    assert event_heads(v) == [_fields(e)[:7] for e in evs]


def test_a_state_out_of_the_enum_is_an_error_not_another_state() -> None:
    """A state index past the symbols (a hostile record): ValueError, never a wrapped index."""
    import pytest

    e = OccurrenceEvent(occurrence_id="o", schedule_id="s", tenant="t", version=1, scheduled_for_ms=0,
                        state="SUCCEEDED", attempt=None, reason=None, at_ms=0)  # type: ignore[arg-type]
    v = encode(e)
    i = len(v) - 4  # state, attempt's branch, reason's branch, at_ms (0): the state's byte
    assert v[i] == 2 * 3  # SUCCEEDED is the fourth symbol
    for bad in (2 * 20, 1):  # index 20; index -1 (zigzag)
        forged = v[:i] + bytes([bad]) + v[i + 1:]
        with pytest.raises(ValueError):
            events_fields(forged)
        with pytest.raises(ValueError):
            event_heads(forged)
        batch = encode(OccurrenceEvents(events=(e,)))  # header, count 1, the body, the array's end
        assert batch[:11] + v[10:] + b"\x00" == batch
        with pytest.raises(ValueError):  # the same event in a batch
            events_fields(batch[:11] + forged[10:] + b"\x00")


def test_trailing_bytes_after_an_event_are_an_error_for_both_readers() -> None:
    e = OccurrenceEvent(occurrence_id="o", schedule_id="s", tenant="t", version=1, scheduled_for_ms=0,
                        state="SUCCEEDED", attempt=1, reason=None, at_ms=0)  # type: ignore[arg-type]
    import pytest

    for junk in (b"\x00", b"junk"):
        with pytest.raises(ValueError):
            events_fields(encode(e) + junk)
        with pytest.raises(ValueError):
            event_heads(encode(e) + junk)
