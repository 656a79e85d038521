"""The hand-written ``Schedule`` and ``VersionRecord`` (records/schedule_write.py) against the
general codec: the same bytes for any record, so the processor's fast writer is invisible to
every reader (restore, the history indexer, workers in other languages)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings

from scheduler.records import Schedule, VersionRecord, encode
from scheduler.records import schedule_write as sw
from tests.test_records import record_strategy

exact = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _version_of(rec: Schedule) -> VersionRecord:
    return VersionRecord(schedule_id=rec.schedule_id, tenant=rec.tenant, version=rec.version, state=rec.state,
                         updated_at_ms=rec.updated_at_ms, paused_at_ms=rec.paused_at_ms,
                         resumed_at_ms=rec.resumed_at_ms)


@exact
@given(rec=record_strategy(Schedule))
def test_a_schedule_record_and_its_version_are_the_codecs(rec: Schedule) -> None:
    key = sw.spec_key(dataclasses.replace(rec.spec, payload=b""))
    assert key == sw.spec_key(rec.spec)  # the key leaves the payload out, whatever it is
    sched = sw.schedule_record(
        rec.tenant, rec.schedule_id, rec.version, rec.state, key, rec.spec.payload, rec.created_at_ms,
        rec.updated_at_ms, rec.effective_from_ms, rec.idempotency_key, rec.paused_at_ms,
        rec.resumed_at_ms, rec.last_request_id,
    )
    version = sw.version_record(rec.schedule_id, rec.tenant, rec.version, rec.state, rec.updated_at_ms,
                                rec.paused_at_ms, rec.resumed_at_ms)
    assert sched == encode(rec)
    assert version == encode(_version_of(rec))


@exact
@given(rec=record_strategy(VersionRecord))
def test_a_version_record_is_the_codecs(rec: VersionRecord) -> None:
    """Any version record."""
    got = sw.version_record(rec.schedule_id, rec.tenant, rec.version, rec.state, rec.updated_at_ms,
                            rec.paused_at_ms, rec.resumed_at_ms)
    assert got == encode(rec)


def test_the_field_order_guard_names_the_module_to_update() -> None:
    import pytest

    from scheduler.records.codec import checked_fields
    from scheduler.records.schedule_scan import SCHEDULE_FIELDS

    assert [f["name"] for f in checked_fields(Schedule, SCHEDULE_FIELDS, "m")] == list(SCHEDULE_FIELDS)
    with pytest.raises(RuntimeError, match=r"Schedule fields changed to \['tenant'.*: update my\.module"):
        checked_fields(Schedule, SCHEDULE_FIELDS[:-1], "my.module")
