"""``render.iso``: the time format of every answer (CLI JSON, API), against datetime as oracle."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from scheduler.cli.render import iso

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _oracle(ms: int) -> str:
    text = (_EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
    text = text.replace("+00:00", "Z")
    return text.replace(".000Z", "Z")


@given(st.integers(min_value=-(10**12), max_value=253_402_300_799_999))  # 1938 .. the end of 9999
def test_iso_agrees_with_datetime(ms: int) -> None:
    assert iso(ms) == _oracle(ms)


def test_iso_edges() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00Z"
    assert iso(1) == "1970-01-01T00:00:00.001Z"
    assert iso(-1) == "1969-12-31T23:59:59.999Z"
    assert iso(1_796_410_048_000) == "2026-12-04T18:47:28Z"


@given(
    payload=st.binary(max_size=8),
    misfire=st.sampled_from(["SKIP", "FIRE_ONCE", "CATCH_UP"]),
    end=st.none() | st.integers(min_value=0, max_value=2**40),
)
def test_spec_json_is_every_field_of_the_record(payload: bytes, misfire: str, end: int | None) -> None:
    """The shallow copy ``spec_json`` makes agrees with ``dataclasses.asdict`` (the oracle) for
    every field of the spec record, the payload rendered as text or base64."""
    import base64
    import dataclasses
    import json

    from scheduler.cli.render import spec_json
    from scheduler.records import ScheduleSpecRecord

    rec = ScheduleSpecRecord(kind="cron", cron="0 9 * * 1-5", timezone="Europe/Paris",
                             handler="h", payload=payload, misfire=misfire, end_ms=end)  # type: ignore[arg-type]
    want = dataclasses.asdict(rec)
    del want["payload"]
    try:
        want["payload"] = payload.decode()
    except UnicodeDecodeError:
        want["payload_base64"] = base64.b64encode(payload).decode()
    assert json.dumps(spec_json(rec), sort_keys=True) == json.dumps(want, sort_keys=True)
