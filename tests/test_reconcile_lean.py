"""The reconciler's lean record readers agree with the complete ones on every record they read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.history.readers import dispatch_fields, event_fields
from scheduler.reconcile.lean import dispatch_head, event_head
from scheduler.records import Occurrence, OccurrenceEvent, encode

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


@settings(max_examples=200, deadline=None, derandomize=True)
@given(oid=texts, sid=texts, ten=texts, ver=longs, sf=longs, att=st.none() | st.integers(-(2**31), 2**31 - 1),
       state=st.sampled_from(["ENQUEUED", "SUCCEEDED", "DEAD", "MISSED", "SKIPPED_OVERLAP", "RETRY_WAIT"]),
       reason=st.none() | texts)
def test_reconcile_lean_event_head_matches_the_complete_reader(
    oid: str, sid: str, ten: str, ver: int, sf: int, att: int | None, state: str, reason: str | None
) -> None:
    v = encode(OccurrenceEvent(occurrence_id=oid, schedule_id=sid, tenant=ten, version=ver,
                               scheduled_for_ms=sf, state=state, attempt=att, reason=reason,  # type: ignore[arg-type]
                               at_ms=sf))
    f = event_fields(v)
    assert event_head(v) == f[:7]
