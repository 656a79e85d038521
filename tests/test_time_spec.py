"""ScheduleSpec: defaults, dict round trip, and every field-level validation message."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler.domain import ScheduleSpec, SpecError

UTC = dt.UTC
BASE: dict[str, object] = {"kind": "cron", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
                           "handler": "send_report"}


def make(**kw: object) -> ScheduleSpec:
    d = dict(BASE)
    d.update(kw)
    return ScheduleSpec.from_dict(d)


def test_spec_defaults() -> None:
    s = make()
    assert (s.nonexistent, s.repeated, s.window_minutes, s.misfire, s.catch_up_limit) == (
        "skip", "once", 0, "FIRE_ONCE", 0)
    assert (s.max_lateness_s, s.overlap, s.retry_max_attempts) == (60, "ALLOW", 3)
    assert (s.retry_backoff_base_s, s.retry_backoff_cap_s, s.retry_deadline_s) == (1.0, 300.0, None)
    assert s.payload == b"" and s.start is None and s.end is None and s.max_runs is None


def test_spec_round_trip_plain_values() -> None:
    s = make(start="2026-01-01T01:00:00+01:00", end=dt.datetime(2027, 1, 1, tzinfo=UTC),
             max_runs=5, nonexistent="shift", repeated="all", window_minutes=15,
             misfire="CATCH_UP", catch_up_limit=3, overlap="QUEUE_ONE", payload=b"\x00\x01",
             retry_deadline_s=3600)
    d = s.to_dict()
    assert d["start"] == dt.datetime(2026, 1, 1, tzinfo=UTC) and d["start"].tzinfo is UTC
    assert type(d["kind"]) is str and d["misfire"] == "CATCH_UP" and d["overlap"] == "QUEUE_ONE"
    assert list(d) == [
        "kind", "cron", "at", "timezone", "start", "end", "max_runs", "nonexistent", "repeated",
        "window_minutes", "misfire", "catch_up_limit", "max_lateness_s", "overlap",
        "retry_max_attempts", "retry_backoff_base_s", "retry_backoff_cap_s", "retry_deadline_s",
        "handler", "payload"]
    assert ScheduleSpec.from_dict(d) == s
    assert s.validate() is s


def test_spec_is_frozen_and_kw_only() -> None:
    s = make()
    with pytest.raises(AttributeError):
        s.cron = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ScheduleSpec("cron", "* * * * *")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "daily"}, "kind: 'daily' is not one of 'cron', 'once'"),
        ({"cron": None}, "cron: is required when kind is 'cron'"),
        ({"at": "2026-01-01T00:00"}, "at: must be empty when kind is 'cron'"),
        ({"kind": "once"}, "at: is required when kind is 'once'"),
        ({"kind": "once", "at": "2026-01-01T00:00"}, "cron: must be empty when kind is 'once'"),
        ({"timezone": ""}, "timezone: is required (an IANA zone such as 'UTC')"),
        ({"nonexistent": "later"}, "nonexistent: 'later' is not one of 'skip', 'shift'"),
        ({"repeated": "twice"}, "repeated: 'twice' is not one of 'once', 'all'"),
        ({"misfire": "skip"}, "misfire: 'skip' is not one of 'SKIP', 'FIRE_ONCE', 'CATCH_UP'"),
        ({"overlap": "NO"}, "overlap: 'NO' is not one of 'ALLOW', 'SKIP_IF_RUNNING', 'QUEUE_ONE'"),
        ({"start": dt.datetime(2026, 1, 1)},
         "start: 2026-01-01T00:00:00 has no UTC offset (give an aware UTC datetime)"),
        ({"end": "soon"}, "end: 'soon' is not an ISO-8601 datetime"),
        ({"start": 5}, "start: 5 is not a datetime"),
        ({"start": "2026-02-01T00:00Z", "end": "2026-01-01T00:00Z"},
         "end: end 2026-01-01T00:00:00+00:00 is before start 2026-02-01T00:00:00+00:00"),
        ({"max_runs": 0}, "max_runs: 0 is out of range 1-100000 runs"),
        ({"max_runs": True}, "max_runs: True is not an integer (allowed: >= 1 and <= 100000 runs)"),
        ({"window_minutes": -1}, "window_minutes: -1 is out of range 0-1440 minutes (1 day)"),
        ({"window_minutes": 1441}, "window_minutes: 1441 is out of range 0-1440 minutes (1 day)"),
        ({"window_minutes": 1.5},
         "window_minutes: 1.5 is not an integer (allowed: >= 0 and <= 1440 minutes (1 day))"),
        ({"catch_up_limit": -1}, "catch_up_limit: -1 is out of range 0-10000 occurrences"),
        ({"misfire": "CATCH_UP"}, "catch_up_limit: must be >= 1 when misfire is 'CATCH_UP'"),
        ({"max_lateness_s": -5}, "max_lateness_s: -5 is out of range 0-604800 seconds (7 days)"),
        ({"retry_max_attempts": 0},
         "retry_max_attempts: 0 is out of range 1-100 attempts, the first included"),
        ({"retry_backoff_base_s": 0}, "retry_backoff_base_s: 0 must be > 0 and <= 604800 seconds"),
        ({"retry_backoff_base_s": "1"},
         "retry_backoff_base_s: '1' is not a number (allowed: > 0 and <= 604800 seconds)"),
        ({"retry_backoff_cap_s": float("inf")}, ("retry_backoff_cap_s: inf is not a finite number"
          " (allowed: > 0 and <= 604800 seconds (7 days))")),
        ({"retry_backoff_cap_s": 0.5}, "retry_backoff_cap_s: 0.5 is below retry_backoff_base_s 1.0"),
        ({"retry_deadline_s": 0}, "retry_deadline_s: 0 is out of range 1-2592000 seconds (30 days)"),
        ({"handler": " "}, "handler: is required (a registered handler name)"),
        ({"handler": "h" * 256}, "handler: is 256 characters long; at most 255 are allowed"),
        ({"payload": 5}, "payload: must be bytes"),
        ({"colour": "red"}, "colour: unknown field 'colour'"),
        ({"handler": None}, "handler: is required"),
    ],
)
def test_spec_field_validation_messages(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as info:
        make(**changes)
    assert str(info.value) == message
    assert info.value.field == message.split(":")[0]


def test_spec_validate_reports_timing_errors() -> None:
    with pytest.raises(SpecError) as info:
        make(cron="0 0 30 2 *").validate()
    assert info.value.field == "cron"
    with pytest.raises(SpecError) as info:
        make(timezone="Mars/Base").validate()
    assert str(info.value) == "timezone: 'Mars/Base' is not a known IANA zone"


def test_spec_from_dict_needs_mapping_and_coerces_payload() -> None:
    with pytest.raises(SpecError, match=r"^spec: must be a mapping$"):
        ScheduleSpec.from_dict([])  # type: ignore[arg-type]
    assert make(payload="hé").payload == "hé".encode()
    assert make(payload=bytearray(b"ab")).payload == b"ab"


def test_spec_error_attributes_and_pickle() -> None:
    import pickle

    e = SpecError("day-of-week", "8", "8 is out of range 0-7")
    assert (e.field, e.value, e.reason) == ("day-of-week", "8", "8 is out of range 0-7")
    assert isinstance(e, ValueError)
    e2 = pickle.loads(pickle.dumps(e))
    assert str(e2) == "day-of-week: 8 is out of range 0-7" and e2.field == "day-of-week"


def test_spec_patched_changes_only_the_given_fields() -> None:
    s = make(nonexistent="shift", repeated="all", payload=b"p", overlap="QUEUE_ONE",
             start="2026-01-01T00:00+00:00", max_runs=5)
    p = s.patched(handler="other")
    assert p == s.replace(handler="other")
    once = s.patched(at="2027-01-01T09:00")  # giving `at` makes it one-time and clears cron
    assert (once.kind, once.cron, once.at, once.overlap) == ("once", None, "2027-01-01T09:00", "QUEUE_ONE")
    assert once.patched(cron="0 9 * * *").kind == "cron"
    assert s.patched(max_runs=None, payload=None).max_runs is None
    with pytest.raises(SpecError, match=r"^colour: unknown field"):
        s.patched(colour="red")
    with pytest.raises(SpecError, match=r"^spec: no field to change"):
        s.patched()
    with pytest.raises(SpecError, match=r"^retry_max_attempts: "):
        s.patched(retry_max_attempts=1000)
