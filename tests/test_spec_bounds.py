"""Every spec field has a documented bound, checked in one place (issue 9, items 13, 14, 21).

Out-of-range instants, durations, counts and payloads are ``SpecError`` naming the field,
never an ``OverflowError`` or an Avro encode error later in the processor.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest
from utc_queries import between, fire_times

from scheduler.domain import ScheduleSpec, SpecError, compile_spec, retry_delay_s
from scheduler.domain.backoff import MAX_DELAY_S, backoff_ceiling_s
from scheduler.domain.bounds import (
    MAX_EPOCH_S,
    MAX_PAYLOAD_BYTES,
    NUMERIC,
    TABLE,
    bounds_markdown,
    check_key,
    check_tenant,
)
from scheduler.processor import wire_state
from scheduler.processor.inbox import apply_command
from scheduler.processor.shard import Shard
from scheduler.records import RecordDecodeError, ScheduleCommand, ScheduleSpecRecord, decode, encode
from scheduler.records.types import Schedule
from scheduler.tenants import Tenant

UTC = dt.UTC
DOC = Path(__file__).resolve().parent.parent / "docs" / "contract-schedules.md"
ZONES = ("UTC", "America/Los_Angeles", "Asia/Tokyo", "Pacific/Kiritimati", "Pacific/Chatham",
         "Europe/Berlin")


def cron(**kw: object) -> ScheduleSpec:
    base: dict[str, object] = {"kind": "cron", "cron": "* * * * *", "timezone": "UTC", "handler": "h"}
    base.update(kw)
    return ScheduleSpec.from_dict(base)


def once(at: str, tz: str = "UTC") -> ScheduleSpec:
    return ScheduleSpec(kind="once", at=at, timezone=tz, handler="h")


def test_every_spec_field_has_one_documented_bound() -> None:
    assert [name for name, _ in TABLE] == [f.name for f in dataclasses.fields(ScheduleSpec)]
    assert set(NUMERIC) <= {name for name, _ in TABLE}
    assert bounds_markdown() in DOC.read_text(), "docs/contract-schedules.md: paste bounds_markdown()"


@pytest.mark.parametrize(
    ("at", "tz"),
    [
        ("9999-12-31T23:59", "America/Los_Angeles"),  # was OverflowError
        ("9999-12-31T23:59", "Asia/Tokyo"),
        ("0001-01-01T00:00", "Asia/Tokyo"),  # was OverflowError
        ("8999-12-31T23:59", "America/Los_Angeles"),  # local year fine, instant in 9000
        ("1970-01-01T00:00", "Asia/Tokyo"),  # instant before 1970
        ("9000-01-01T00:00", "UTC"),
    ],
)
def test_one_time_at_outside_the_instant_range_is_a_spec_error(at: str, tz: str) -> None:
    with pytest.raises(SpecError) as info:
        compile_spec(once(at, tz))
    assert info.value.field == "at" and at in str(info.value)
    assert "supported range" in str(info.value)


def test_instants_at_the_edges_of_the_range_are_accepted() -> None:
    assert compile_spec(once("8999-12-31T23:59", "Pacific/Kiritimati")).at_epoch is not None
    assert compile_spec(once("1970-01-01T00:00", "UTC")).at_epoch == 0


@pytest.mark.parametrize("field", ["start", "end"])
def test_start_and_end_outside_the_range_are_spec_errors(field: str) -> None:
    with pytest.raises(SpecError) as info:
        cron(**{field: dt.datetime(9500, 1, 1, tzinfo=UTC)})
    assert info.value.field == field
    with pytest.raises(SpecError) as info:
        cron(**{field: "1969-12-31T23:59:59+00:00"})
    assert info.value.field == field and "1969-12-31T23:59:59+00:00" in str(info.value)
    record = ScheduleSpecRecord(kind="cron", cron="* * * * *", timezone="UTC", handler="h",
                                **{f"{field}_ms": 2**62})  # type: ignore[arg-type]
    with pytest.raises(SpecError) as info:  # was OverflowError
        record.to_domain()
    assert info.value.field == field and str(2**62) in str(info.value)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("repeated", ["once", "all"])
@pytest.mark.parametrize("expr", ["* * * * *", "0 0 29 2 *", "30 2 * * *"])
def test_fire_times_near_the_bound_never_overflow(zone: str, repeated: str, expr: str) -> None:
    c = compile_spec(cron(cron=expr, timezone=zone, repeated=repeated, nonexistent="shift"))
    near = [(8999, 12, 30, 0, 0), (8999, 12, 31, 23, 59), (9999, 12, 31, 23, 0), (9999, 12, 31, 23, 59)]
    for t in (dt.datetime(*ymdhm, tzinfo=UTC) for ymdhm in near):
        for f in fire_times(c, t, 3):
            assert f.timestamp() < MAX_EPOCH_S
        assert between(c, t, dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), 10) is not None
    assert c.next_after_epoch(MAX_EPOCH_S - 1) is None
    with_runs = compile_spec(cron(cron=expr, timezone=zone, repeated=repeated, max_runs=100_000,
                                  start=dt.datetime(8999, 1, 1, tzinfo=UTC)))
    assert all(f < MAX_EPOCH_S for f in with_runs.fire_times_epoch(MAX_EPOCH_S - 400 * 86400, 5))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"retry_backoff_base_s": 1e300, "retry_backoff_cap_s": 1e300}, "retry_backoff_base_s"),
        ({"retry_backoff_cap_s": 8 * 86400.0}, "retry_backoff_cap_s"),
        ({"retry_deadline_s": 10**12}, "retry_deadline_s"),
        ({"max_lateness_s": 10**30}, "max_lateness_s"),
        ({"retry_max_attempts": 2**31}, "retry_max_attempts"),
        ({"retry_max_attempts": 101}, "retry_max_attempts"),
        ({"misfire": "CATCH_UP", "catch_up_limit": 10**9}, "catch_up_limit"),
        ({"max_runs": 10**7, "start": "2026-01-01T00:00+00:00"}, "max_runs"),
        ({"window_minutes": 10**6}, "window_minutes"),
        ({"handler": "h" * 1000}, "handler"),
        ({"cron": "* " * 200}, "cron"),
        ({"timezone": "X" * 100}, "timezone"),
    ],
)
def test_out_of_range_fields_name_the_field_value_and_range(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        cron(**changes)
    assert info.value.field == field
    text = str(info.value)
    assert text.startswith(f"{field}: ")
    if field in NUMERIC:
        assert str(NUMERIC[field].hi).rstrip("0").rstrip(".") in text  # the fix: the allowed range


def test_huge_numbers_are_shortened_in_the_message() -> None:
    with pytest.raises(SpecError) as info:
        cron(max_lateness_s=10**300)
    assert len(str(info.value)) < 160 and "digits" in str(info.value)


def test_payload_limit_is_named() -> None:
    cron(payload=b"x" * MAX_PAYLOAD_BYTES)
    with pytest.raises(SpecError) as info:
        cron(payload=b"x" * (2 * 1024 * 1024))
    assert info.value.field == "payload"
    assert f"{MAX_PAYLOAD_BYTES:_}" in str(info.value) and "2_097_152" in str(info.value)


def test_retry_delay_is_clamped_whatever_the_spec_says() -> None:
    assert retry_delay_s("occ", 1, 1e300, 1e300) <= MAX_DELAY_S
    assert retry_delay_s("occ", 5000, 1.0, float("inf")) <= MAX_DELAY_S
    assert backoff_ceiling_s(2000, 1e300, 1e300) == MAX_DELAY_S
    with pytest.raises(ValueError):
        backoff_ceiling_s(1, float("nan"), 1.0)


@pytest.mark.parametrize("bad", ["", "A", "1abc", "a" * 41, "a_b", "a.b", "tenant*"])
def test_tenant_names_follow_the_registry_rule(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        check_tenant(bad)
    assert info.value.field == "tenant" and "lower-case letters" in str(info.value)
    assert check_tenant("acme-1") == "acme-1"


@pytest.mark.parametrize("bad", ["", "   ", "k" * 256, "a\nb", "\x00"])
def test_keys_are_non_blank_bounded_and_printable(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        check_key(bad)
    assert info.value.field == "key"
    assert check_key("order-42/é") == "order-42/é"


def _command(**spec_fields: object) -> ScheduleCommand:
    spec = ScheduleSpecRecord(kind="cron", cron="* * * * *", timezone="UTC", handler="h",
                              **spec_fields)  # type: ignore[arg-type]
    return ScheduleCommand(request_id="r", tenant="a", schedule_id="s", kind="CREATE", spec=spec,
                           issued_at_ms=1_800_000_000_000)


@pytest.mark.parametrize(
    "fields",
    [
        {"start_ms": 2**62},
        {"end_ms": -(2**62)},
        {"retry_backoff_base_s": 1e300, "retry_backoff_cap_s": 1e300},
        {"max_lateness_s": 2**31 - 1},
        {"retry_max_attempts": 2**31 - 1},
        {"payload": b"x" * (MAX_PAYLOAD_BYTES + 1)},
    ],
)
def test_the_processor_answers_out_of_range_specs_invalid_spec(fields: dict[str, object]) -> None:
    shard = Shard(0, {"a": Tenant(name="a")}, partitions=1)
    cmd = decode(encode(_command(**fields)), ScheduleCommand)  # what the processor decodes
    out = apply_command(shard, cmd, 1_800_000_000)
    assert not out.accepted and out.code == "INVALID_SPEC", out
    assert out.reason is not None and out.reason.split(":")[0] in {k.removesuffix("_ms") for k in fields}


def test_a_stored_out_of_range_schedule_is_skipped_at_restore_not_a_crash() -> None:
    rec = Schedule(tenant="a", schedule_id="s", version=1, state="ACTIVE",
                   spec=_command(start_ms=2**62).spec,  # type: ignore[arg-type]
                   created_at_ms=0, updated_at_ms=0, effective_from_ms=0)
    with pytest.raises(RecordDecodeError, match="start"):
        wire_state.decode_schedule_entry(encode(rec))


@pytest.mark.parametrize("spec", [
    ScheduleSpec(kind="cron", cron="0 * * * *", timezone="Europe/Paris", handler="h", retry_max_attempts=5,
                 window_minutes=3, overlap="QUEUE_ONE"),
    ScheduleSpec(kind="once", at="2027-01-15T10:00:00", timezone="UTC", handler="h", payload=b"old"),
])
def test_with_payload_is_replace_without_the_other_checks_but_bounds_the_payload(spec: ScheduleSpec) -> None:
    """The processor rebuilds a stored schedule's spec with ``with_payload`` (no second validation
    of the rest): the same value as ``replace``, and the payload's own bound still holds."""
    for payload in (b"", b"x" * 16, b"y" * MAX_PAYLOAD_BYTES):
        rebuilt, replaced = spec.with_payload(payload), spec.replace(payload=payload)
        assert rebuilt == replaced and hash(rebuilt) == hash(replaced) and rebuilt.payload is payload
    with pytest.raises(SpecError, match="payload") as big:
        spec.with_payload(b"z" * (MAX_PAYLOAD_BYTES + 1))
    assert "256 KiB" in str(big.value)
    with pytest.raises(SpecError, match="payload"):
        spec.with_payload("text")  # type: ignore[arg-type]
