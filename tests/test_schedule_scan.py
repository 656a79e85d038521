"""The hand-read ``Schedule`` of restore (records/schedule_scan.py) against fastavro's decode.

An independent expectation: every field :func:`scan` reads equals what fastavro decodes
from the same bytes, the spec key decodes to the spec without its payload, a corrupt
record is refused as fastavro refuses it, and a record of a released schema is left to
the general decoder (which restore then uses: :func:`wire_state.decode_schedule_entry`).
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.processor import wire_state
from scheduler.processor.model import Entry
from scheduler.records import RecordDecodeError, Schedule, ScheduleSpecRecord, decode_fields, encode
from scheduler.records.codec import current_schema
from scheduler.records.schedule_scan import scan, spec_of_key
from scheduler.records.schemas import MAGIC, load_history
from tests.test_records import record_strategy

T_MS = 1_800_000_000_123
_FIELD_ORDER = [f["name"] for f in current_schema(Schedule).expanded["fields"]]


def _expected(value: bytes) -> dict[str, Any]:
    return decode_fields(value, Schedule)


def _as_fields(value: bytes) -> dict[str, Any]:
    s = scan(value)
    assert s is not None
    out = s._asdict()
    spec = spec_of_key(out.pop("spec_key"))
    spec["payload"] = out.pop("payload")
    out["spec"] = spec
    return {k: out[k] for k in _FIELD_ORDER}  # the schema's order, like fastavro


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rec=record_strategy(Schedule))
def test_scan_reads_what_fastavro_decodes(rec: Schedule) -> None:
    value = encode(rec)
    assert _as_fields(value) == _expected(value)
    assert _as_fields(value) == _expected(value)  # the second time the spec key is a known one


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rec=record_strategy(Schedule), data=st.data())
def test_a_corrupt_record_is_refused_or_read_as_fastavro_reads_it(rec: Schedule, data: st.DataObject) -> None:
    value = bytearray(encode(rec))
    scan(bytes(value))  # its spec key is now a known one: the fast path meets the corruption
    cut = data.draw(st.integers(11, len(value)))
    pos = data.draw(st.integers(10, len(value) - 1))
    value[pos] = data.draw(st.integers(0, 255))
    for bad in (bytes(value), bytes(value[:cut - 1])):
        try:
            expected = _expected(bad)
        except RecordDecodeError:
            with pytest.raises(RecordDecodeError):
                _as_fields(bad)
            continue
        try:
            got = _as_fields(bad)
        except RecordDecodeError:  # stricter than fastavro (an odd enum or union index): restore
            got = _expected(bad)  # then takes the general decoder's reading (decode_schedule_entry)
        assert repr(got) == repr(expected)  # repr: a corrupted double may be a NaN


def _released(version: int, rec: dict[str, Any]) -> bytes:
    old = next(s for s in load_history("ksched.v1.Schedule") if s.version == version)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old.parsed, rec)
    return MAGIC + old.fingerprint + buf.getvalue()


SPEC = ScheduleSpecRecord(
    kind="cron", cron="*/5 * * * *", timezone="Europe/Paris", handler="h", payload=b"p1"
)


def _schedule(**kw: Any) -> Schedule:
    base: dict[str, Any] = dict(
        tenant="tënant", schedule_id="s-ü-1", version=3, state="ACTIVE", spec=SPEC, created_at_ms=T_MS,
        updated_at_ms=T_MS + 5000, effective_from_ms=T_MS + 4000, idempotency_key=None,
    )
    return Schedule(**{**base, **kw})


def _slots(e: Entry) -> dict[str, Any]:
    return {k: getattr(e, k) for k in Entry.FIELDS}


@pytest.mark.parametrize(
    "rec",
    [
        _schedule(),
        _schedule(state="PAUSED", paused_at_ms=T_MS + 7000, idempotency_key="k-1"),
        _schedule(state="CANCELED", resumed_at_ms=T_MS + 9000, last_request_id="r-9"),
        _schedule(state="COMPLETED", spec=ScheduleSpecRecord(
            kind="once", at="2027-03-28T05:30:00", timezone="Europe/Paris", handler="h", payload=b"",
            window_minutes=5, overlap="SKIP_IF_RUNNING",
        )),
        _schedule(version=2**40, spec=ScheduleSpecRecord(
            kind="cron", cron="0 9 * * 1-5", timezone="UTC", handler="h", payload=b"x" * 300,
            retry_deadline_s=600, max_runs=7, start_ms=T_MS, end_ms=T_MS * 2,
        )),
    ],
    ids=["active", "paused", "canceled", "completed-once", "wide"],
)
def test_scanned_entry_equals_the_general_decoders(rec: Schedule) -> None:
    value = encode(rec)
    fast, general = wire_state.decode_schedule_entry(value), wire_state._decode_resolved(value)
    assert _slots(fast) == _slots(general)
    assert fast.spec() == general.spec() == rec.spec.to_domain()


_OLDER = [
    s.version for s in load_history("ksched.v1.Schedule")
    if s.fingerprint != current_schema(Schedule).fingerprint  # the last release may be the current schema
]


@pytest.mark.parametrize("version", _OLDER)
def test_a_record_of_a_released_schema_takes_the_general_decoder(version: int) -> None:
    fields = _expected(encode(_schedule(state="PAUSED", paused_at_ms=T_MS)))  # fastavro drops what v<N> lacks
    value = _released(version, fields)
    assert scan(value) is None
    fast, general = wire_state.decode_schedule_entry(value), wire_state._decode_resolved(value)
    assert _slots(fast) == _slots(general)
    assert (fast.schedule_id, fast.version, fast.state, fast.payload) == ("s-ü-1", 3, "PAUSED", b"p1")


def test_an_invalid_spec_is_a_decode_error_naming_the_schedule() -> None:
    value = encode(_schedule(schedule_id="bad-1", spec=ScheduleSpecRecord(
        kind="cron", cron="61 * * * *", timezone="UTC", handler="h", payload=b"",
    )))
    with pytest.raises(RecordDecodeError, match="bad-1"):
        wire_state.decode_schedule_entry(value)


def test_restore_through_the_scan_arms_what_the_records_say_last() -> None:
    """Superseded versions, a tombstone, paused and canceled schedules, read in log order like
    restore reads them: the shard holds and arms exactly the last record of each schedule."""
    from scheduler.processor.shard import Shard

    now = T_MS // 1000
    log: list[tuple[str, bytes | None]] = [
        ("a", encode(_schedule(schedule_id="a", version=1))),
        ("b", encode(_schedule(schedule_id="b", version=1))),
        ("a", encode(_schedule(schedule_id="a", version=2, spec=ScheduleSpecRecord(
            kind="cron", cron="0 12 * * *", timezone="UTC", handler="h2", payload=b"p2")))),
        ("b", None),  # purged
        ("c", encode(_schedule(schedule_id="c", state="PAUSED", paused_at_ms=T_MS))),
        ("d", encode(_schedule(schedule_id="d", version=1))),
        ("d", encode(_schedule(schedule_id="d", version=2, state="CANCELED"))),
        ("e", encode(_schedule(schedule_id="e", version=1, state="PAUSED", paused_at_ms=T_MS))),
        ("e", encode(_schedule(schedule_id="e", version=2, resumed_at_ms=T_MS + 1000))),
    ]
    shard = Shard(0, {}, partitions=1)
    for sid, value in log:
        if value is None:
            shard.forget(sid)
        else:
            shard.restore_entry(wire_state.decode_schedule_entry(value))
    shard.finish_restore(now)
    got = {sid: (e.version, e.state, e.payload, e.armed_at is not None) for sid, e in shard.entries.items()}
    assert got == {
        "a": (2, "ACTIVE", b"p2", True),
        "c": (3, "PAUSED", b"p1", False),
        "d": (2, "CANCELED", b"p1", False),
        "e": (2, "ACTIVE", b"p1", True),
    }
    assert shard.active_count == {"tënant": 3}
    assert shard.entries["a"].next_for is not None and shard.entries["a"].next_for % 86_400 == 12 * 3600
