"""The worker's hand readers and report encoder agree with fastavro, field for field and byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.records import AttemptReport, Occurrence, RecordDecodeError, VersionRecord, decode, encode
from scheduler.records.report import ReportEncoder
from scheduler.records.worker_scan import scan_occurrence, scan_version

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
text = st.text(max_size=80)
occurrences = st.builds(
    Occurrence, occurrence_id=text, schedule_id=text, tenant=text, version=longs, scheduled_for_ms=longs,
    available_at_ms=longs, enqueued_at_ms=longs, attempt=ints,
    lane=st.sampled_from(["STRICT", "FLEXIBLE", "CATCH_UP", "RETRY"]), handler=text,
    payload=st.binary(max_size=300), deadline_ms=st.none() | longs,
)


@given(occurrences)
def test_scan_occurrence_equals_the_general_decoder(occ: Occurrence) -> None:
    value = encode(occ)
    scanned = scan_occurrence(value)
    assert scanned is not None
    got, cut = scanned
    assert got == occ == decode(value, Occurrence)
    # the report's five leading fields end where scheduled_for_ms does
    rep = encode(AttemptReport(
        occurrence_id=occ.occurrence_id, schedule_id=occ.schedule_id, tenant=occ.tenant, version=occ.version,
        scheduled_for_ms=occ.scheduled_for_ms, attempt=1, token="t", kind="SUCCEEDED", worker_id="w",
        reported_at_ms=0,
    ))
    assert rep[10:].startswith(value[10:cut])


@given(
    occ=occurrences, token=text, kind=st.sampled_from(["STARTED", "HEARTBEAT", "SUCCEEDED", "FAILED"]),
    retryable=st.none() | st.booleans(), error_class=st.none() | text, error_message=st.none() | text,
    worker_id=text, reported=longs, started=st.none() | longs,
)
def test_report_encoder_writes_what_fastavro_writes(
    occ: Occurrence, token: str, kind: str, retryable: bool | None, error_class: str | None,
    error_message: str | None, worker_id: str, reported: int, started: int | None,
) -> None:
    value = encode(occ)
    scanned = scan_occurrence(value)
    assert scanned is not None
    ident = value[10:scanned[1]]
    got = ReportEncoder(worker_id).value(
        ident, occ.attempt, token, kind, reported, retryable=retryable, error_class=error_class,
        error_message=error_message, started_at_ms=started,
    )
    want = AttemptReport(
        occurrence_id=occ.occurrence_id, schedule_id=occ.schedule_id, tenant=occ.tenant, version=occ.version,
        scheduled_for_ms=occ.scheduled_for_ms, attempt=occ.attempt, token=token, kind=kind,  # type: ignore[arg-type]
        retryable=retryable, error_class=error_class, error_message=error_message, worker_id=worker_id,
        reported_at_ms=reported, started_at_ms=started,
    )
    assert got == encode(want)


@given(
    sid=text, tenant=text, version=longs,
    state=st.sampled_from(["ACTIVE", "PAUSED", "CANCELED", "COMPLETED"]), updated=longs,
    paused=st.none() | longs, resumed=st.none() | longs,
)
def test_scan_version_equals_the_general_decoder(
    sid: str, tenant: str, version: int, state: str, updated: int, paused: int | None, resumed: int | None,
) -> None:
    rec = VersionRecord(schedule_id=sid, tenant=tenant, version=version, state=state,  # type: ignore[arg-type]
                        updated_at_ms=updated, paused_at_ms=paused, resumed_at_ms=resumed)
    assert scan_version(encode(rec)) == (sid, tenant, version, state, paused, resumed)


def _occ() -> Occurrence:
    return Occurrence(
        occurrence_id="o-1", schedule_id="s-1", tenant="acme", version=3, scheduled_for_ms=1_798_761_600_000,
        available_at_ms=1_798_761_600_000, enqueued_at_ms=1_798_761_600_100, attempt=1, lane="STRICT",
        handler="h", payload=b"{}", deadline_ms=None,
    )


def test_other_framings_and_types_are_left_to_the_general_decoder() -> None:
    occ = _occ()
    assert scan_occurrence(b"\x00\x00\x00\x00\x07" + encode(occ)[10:]) is None  # Confluent wire format
    assert scan_occurrence(encode(VersionRecord(schedule_id="s", tenant="t", version=1, state="ACTIVE",
                                                updated_at_ms=0))) is None
    assert scan_version(encode(occ)) is None
    assert scan_occurrence(b"") is None


@pytest.mark.parametrize("cut", [11, 13, -3, -1])
def test_truncated_or_padded_bodies_are_decode_errors(cut: int) -> None:
    value = encode(_occ())
    with pytest.raises(RecordDecodeError, match="Occurrence"):
        scan_occurrence(value[:cut])
    with pytest.raises(RecordDecodeError, match=r"trailing|end"):
        scan_occurrence(value + b"\x00")
    ver = encode(VersionRecord(schedule_id="s", tenant="t", version=1, state="ACTIVE", updated_at_ms=0))
    with pytest.raises(RecordDecodeError, match="VersionRecord"):
        scan_version(ver[:cut])
