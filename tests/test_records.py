"""Avro records: round trips, single-object header, old-schema data, malformed input."""

from __future__ import annotations

import array
import collections
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import fractions
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import parse_schema, to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scheduler.records as records
from scheduler.records import (
    TOP_LEVEL,
    AttemptReport,
    AttemptReports,
    CommandResult,
    Occurrence,
    RecordDecodeError,
    RecordEncodeError,
    Schedule,
    ScheduleCommand,
    ScheduleRuntime,
    ScheduleSpecRecord,
    current_schema,
    decode,
    decode_command_topic,
    decode_fields,
    encode,
    record_type,
    report_fields,
    schema_header,
)
from scheduler.records.codec import Codecs
from scheduler.records.schemas import expand, schemas_dir

# --- an independent CRC-64-AVRO (Rabin) fingerprint, straight from the Avro specification ---------

_EMPTY = 0xC15D213AA4D7A795


def _table() -> list[int]:
    out = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        out.append(fp)
    return out


_FP_TABLE = _table()


def rabin(data: bytes) -> int:
    fp = _EMPTY
    for b in data:
        fp = (fp >> 8) ^ _FP_TABLE[(fp ^ b) & 0xFF]
    return fp


_PUBLISHED = {  # signed 64-bit, from the Avro project's share/test/data/schema-tests.txt
    '"null"': 7195948357588979594,
    '"boolean"': -6970731678124411036,
    '"int"': 8247732601305521295,
    '"long"': -3434872931120570953,
    '"float"': 5583340709985441680,
    '"double"': -8181574048448539266,
    '"bytes"': 5746618253357095269,
    '"string"': -8142146995180207161,
}


def test_reference_rabin_matches_published_vectors() -> None:
    for text, signed in _PUBLISHED.items():
        assert rabin(text.encode()) == signed % (1 << 64), text


# --- hypothesis strategies derived from the schemas ------------------------------------------------

_CLASSES: dict[str, type] = {c.AVRO_NAME: c for c in (*TOP_LEVEL, *records.types.NESTED)}


def _strategy(t: Any, named: dict[str, Any]) -> st.SearchStrategy[Any]:
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, list):
        return st.one_of(*[_strategy(b, named) for b in t])
    if isinstance(t, dict):
        kind = t["type"]
        if kind == "enum":
            named[t["name"]] = t
            return st.sampled_from(t["symbols"])
        if kind == "array":
            return st.lists(_strategy(t["items"], named), max_size=3).map(tuple)
        if kind == "record":
            named[t["name"]] = t
            cls = _CLASSES[t["name"]]
            return st.builds(cls, **{f["name"]: _strategy(f["type"], named) for f in t["fields"]})
        return _strategy(kind, named)
    return {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1),
        "double": st.floats(allow_nan=False),
        "string": st.text(max_size=40),
        "bytes": st.binary(max_size=40),
    }[t]


def record_strategy(cls: type) -> st.SearchStrategy[Any]:
    return _strategy(current_schema(cls).expanded, {})


ANY_RECORD = st.one_of(*[record_strategy(c) for c in TOP_LEVEL])


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(cls: type, data: st.DataObject) -> None:
    rec = data.draw(record_strategy(cls))
    raw = encode(rec)
    assert decode(raw) == rec
    assert decode(raw, cls) == rec
    assert decode(bytearray(raw), cls) == rec
    assert decode(memoryview(raw), cls) == rec
    assert record_type(raw) is cls


def spec(**kw: Any) -> ScheduleSpecRecord:
    base: dict[str, Any] = {
        "kind": "cron",
        "cron": "0 9 * * 1-5",
        "timezone": "Europe/Paris",
        "handler": "email.send",
    }
    return ScheduleSpecRecord(**{**base, **kw})


def occurrence(**kw: Any) -> Occurrence:
    base: dict[str, Any] = dict(
        occurrence_id="0" * 32,
        schedule_id="s" * 32,
        tenant="acme",
        version=2,
        scheduled_for_ms=1_760_000_000_000,
        available_at_ms=1_760_000_000_000,
        enqueued_at_ms=1_760_000_000_150,
        attempt=1,
        lane="STRICT",
        handler="email.send",
        payload=b'{"to":"a@b.c"}',
    )
    return Occurrence(**{**base, **kw})


def report(**kw: Any) -> AttemptReport:
    base: dict[str, Any] = dict(
        occurrence_id="0" * 32,
        schedule_id="s" * 32,
        tenant="acme",
        version=2,
        scheduled_for_ms=1,
        attempt=1,
        token="tok",
        kind="FAILED",
        retryable=True,
        error_class="TimeoutError",
        error_message="slow",
        worker_id="w1",
        reported_at_ms=5,
    )
    return AttemptReport(**{**base, **kw})


def test_single_object_header_is_marker_plus_independent_fingerprint() -> None:
    for cls in TOP_LEVEL:
        canonical = current_schema(cls).canonical
        assert "doc" not in json.loads(canonical) and '"doc"' not in canonical
        expected = b"\xc3\x01" + rabin(canonical.encode()).to_bytes(8, "little")
        assert schema_header(cls) == expected, cls.__name__
    raw = encode(occurrence())
    assert raw[:10] == schema_header(Occurrence)
    # The body is plain Avro binary: fastavro's schemaless reader of the canonical schema reads it.
    body = fastavro.schemaless_reader(
        io.BytesIO(raw[10:]), parse_schema(json.loads(current_schema(Occurrence).canonical))
    )
    assert isinstance(body, dict) and body["tenant"] == "acme" and body["lane"] == "STRICT"


def test_canonical_form_defines_a_shared_type_once_then_refers_by_name() -> None:
    defs = {
        "ns.E": {"type": "enum", "name": "E", "namespace": "ns", "symbols": ["A"], "doc": "x"},
        "ns.R": {
            "type": "record",
            "name": "R",
            "namespace": "ns",
            "fields": [
                {"name": "a", "type": "E", "doc": "first use"},
                {"name": "b", "type": ["null", "E"], "default": None},
            ],
        },
    }
    parsed = parse_schema(expand("ns.R", defs), named_schemas={})
    assert to_parsing_canonical_form(parsed) == (
        '{"name":"ns.R","type":"record","fields":[{"name":"a","type":{"name":"ns.E","type":"enum",'
        '"symbols":["A"]}},{"name":"b","type":["null","ns.E"]}]}'
    )


def test_nested_records_round_trip() -> None:
    s = spec(start_ms=1, end_ms=2, max_runs=5, payload=b"\x00\xff", misfire="CATCH_UP", catch_up_limit=3)
    cmd = ScheduleCommand(
        request_id="r1", tenant="acme", idempotency_key="k", kind="CREATE", spec=s, issued_at_ms=7
    )
    assert decode(encode(cmd), ScheduleCommand) == cmd
    sch = Schedule(
        tenant="acme",
        schedule_id="x",
        version=1,
        state="ACTIVE",
        spec=s,
        created_at_ms=1,
        updated_at_ms=1,
        effective_from_ms=1,
    )
    assert decode(encode(sch)) == sch
    rt = ScheduleRuntime(
        schedule_id="x",
        tenant="acme",
        version=3,
        runs_emitted=9,
        running=(
            records.RunningAttempt(
                occurrence_id="o", version=3, scheduled_for_ms=1, attempt=2, token="t", lease_expires_at_ms=4
            ),
        ),
        retries=(
            records.RetryTimer(occurrence_id="p", version=3, scheduled_for_ms=0, attempt=2, due_at_ms=8),
        ),
        queued=records.QueuedOccurrence(occurrence_id="q", version=3, scheduled_for_ms=5, available_at_ms=6),
        catch_up_cursor_ms=10,
        catch_up_emitted=1,
        updated_at_ms=11,
    )
    assert decode(encode(rt), ScheduleRuntime) == rt


def test_commands_topic_carries_its_three_types() -> None:
    cmd = ScheduleCommand(request_id="r", tenant="t", schedule_id="s", kind="PAUSE", issued_at_ms=1)
    assert decode_command_topic(encode(cmd)) == cmd
    rep = report()
    assert decode_command_topic(encode(rep)) == rep
    other = dataclasses.replace(rep, kind="FAILED", retryable=True, error_class="E", error_message="m")
    reps = AttemptReports(reports=(rep, other))
    assert decode_command_topic(encode(reps)) == reps
    with pytest.raises(RecordDecodeError,
                       match="got Occurrence, expected ScheduleCommand, AttemptReport or AttemptReports"):
        decode_command_topic(encode(occurrence()))


def test_report_fields_reads_a_report_alone_or_several_alike() -> None:
    rep = report()
    other = dataclasses.replace(rep, occurrence_id="o2", kind="FAILED", retryable=False, error_class="E")
    alone = report_fields(encode(rep))
    assert alone == [decode_fields(encode(rep), AttemptReport)]
    both = report_fields(encode(AttemptReports(reports=(rep, other))))
    assert both == [alone[0], decode_fields(encode(other), AttemptReport)]
    assert report_fields(encode(AttemptReports(reports=()))) == []
    cmd = ScheduleCommand(request_id="r", tenant="t", schedule_id="s", kind="PAUSE", issued_at_ms=1)
    assert report_fields(encode(cmd)) is None
    with pytest.raises(RecordDecodeError, match="got Occurrence"):
        report_fields(encode(occurrence()))



def test_occurrence_events_reads_an_event_alone_or_several_alike() -> None:
    from scheduler.records import OccurrenceEvent, OccurrenceEvents, occurrence_events

    ev = OccurrenceEvent(occurrence_id="o", schedule_id="s", tenant="t", version=1, scheduled_for_ms=0,
                         state="SUCCEEDED", attempt=1, reason=None, at_ms=5)  # type: ignore[arg-type]
    other = dataclasses.replace(ev, occurrence_id="o2", state="DEAD", reason="exhausted")
    assert occurrence_events(encode(ev)) == [ev]
    assert occurrence_events(encode(OccurrenceEvents(events=(ev, other)))) == [ev, other]
    assert occurrence_events(encode(OccurrenceEvents(events=()))) == []
    with pytest.raises(RecordDecodeError, match="got Occurrence, expected OccurrenceEvent or Occurrence"):
        occurrence_events(encode(occurrence()))

# --- field mirrors ----------------------------------------------------------------------------------


def _avro_default(f: dict[str, Any]) -> Any:
    if "default" not in f:
        return dataclasses.MISSING
    d = f["default"]
    if f["type"] == "bytes":
        return d.encode("latin-1")
    if isinstance(d, list):
        return tuple(d)
    return d


def _mirror(cls: type, schema: dict[str, Any]) -> None:
    pyfields = dataclasses.fields(cls)
    assert [f.name for f in pyfields] == [f["name"] for f in schema["fields"]], cls.__name__
    for pf, af in zip(pyfields, schema["fields"], strict=True):
        default = pf.default if pf.default_factory is dataclasses.MISSING else pf.default_factory()
        assert default == _avro_default(af), f"{cls.__name__}.{pf.name}"
        assert af.get("doc"), f"{cls.__name__}.{pf.name} has no doc"


def test_dataclasses_mirror_the_schemas_and_every_field_has_a_doc() -> None:
    seen: dict[str, dict[str, Any]] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b)
        elif isinstance(s, dict):
            if s["type"] == "record":
                seen[s["name"]] = s
                for f in s["fields"]:
                    walk(f["type"])
            elif s["type"] == "array":
                walk(s["items"])

    for cls in TOP_LEVEL:
        walk(current_schema(cls).expanded)
    assert set(seen) == set(_CLASSES)
    for name, s in seen.items():
        _mirror(_CLASSES[name], s)


def test_spec_record_mirrors_the_domain_spec() -> None:
    from scheduler.domain.spec import ScheduleSpec

    rename = {"start": "start_ms", "end": "end_ms"}
    dom = {rename.get(f.name, f.name): f for f in dataclasses.fields(ScheduleSpec)}
    rec = {f.name: f for f in dataclasses.fields(ScheduleSpecRecord)}
    assert list(dom) == list(rec)
    for name, f in rec.items():
        if name not in ("start_ms", "end_ms"):
            assert f.default == dom[name].default, name
    d = ScheduleSpec(
        kind="cron",
        cron="*/5 * * * *",
        timezone="America/New_York",
        handler="h",
        payload=b"p",
        start=dt.datetime(2026, 3, 8, 6, 30, 0, 123000, tzinfo=dt.UTC),
        end=dt.datetime(2027, 1, 1, tzinfo=dt.UTC),
        max_runs=4,
        nonexistent="shift",
        repeated="all",
        window_minutes=5,
        misfire="CATCH_UP",
        catch_up_limit=2,
        overlap="QUEUE_ONE",
        retry_deadline_s=600,
    )
    r = ScheduleSpecRecord.from_domain(d)
    assert r.start_ms == 1772951400123 and r.end_ms == 1798761600000
    assert r.to_domain() == d
    assert (
        decode(
            encode(
                Schedule(
                    tenant="t",
                    schedule_id="s",
                    version=1,
                    state="ACTIVE",
                    spec=r,
                    created_at_ms=0,
                    updated_at_ms=0,
                    effective_from_ms=0,
                )
            ),
            Schedule,
        ).spec.to_domain()
        == d
    )
    # with a payload of its own: the record of the spec with that payload, built without the spec
    for payload in (b"", b"other", b"\x00" * 300):
        assert ScheduleSpecRecord.from_domain(d, payload) == ScheduleSpecRecord.from_domain(
            d.with_payload(payload)
        )
    assert ScheduleSpecRecord.from_domain(d, None) == r


def test_public_api_is_pinned() -> None:
    assert sorted(records.__all__) == sorted(
        [
            "TOP_LEVEL",
            "ApiKeyRecord",
            "AttemptReport",
            "AttemptReports",
            "CommandResult",
            "DlqEntry",
            "Occurrence",
            "OccurrenceEvent",
            "OccurrenceEvents",
            "FinishedAttempt",
            "QueuedOccurrence",
            "QuotaDemand",
            "Record",
            "RecordDecodeError",
            "RecordEncodeError",
            "RetryTimer",
            "LaneCursor",
            "RunningAttempt",
            "Schedule",
            "ScheduleCommand",
            "ScheduleHistoryEntry",
            "ScheduleRuntime",
            "ScheduleSpecRecord",
            "ShardState",
            "TenantDemand",
            "TenantRecord",
            "VersionRecord",
            "current_schema",
            "decode",
            "decode_command_topic",
            "decode_fields",
            "encode",
            "occurrence_events",
            "record_type",
            "report_fields",
            "schema_header",
        ]
    )
    for name in records.__all__:
        assert hasattr(records, name), name
    assert issubclass(RecordDecodeError, ValueError) and issubclass(RecordEncodeError, ValueError)


def _fastavro_body(cls: type, rec: Any) -> bytes:
    w = records.codec._DEFAULT._writers[cls]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, w.schema.parsed, w.to_avro(rec))
    return buf.getvalue()


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_generated_writer_writes_fastavros_bytes(cls: type, data: st.DataObject) -> None:
    """fastavro is the oracle: every record type has a generated writer, and it writes the same body."""
    fast = records.codec._DEFAULT._writers[cls].fast
    assert fast is not None, f"{cls.__name__}: no generated writer (a union other than [null, T]?)"
    rec = data.draw(record_strategy(cls))
    assert fast(rec) == _fastavro_body(cls, rec)


def test_the_generated_writer_refuses_what_it_would_not_write_as_fastavro_does() -> None:
    """It raises (the codec then goes through fastavro, which names the problem) rather than
    write something else: a wrong type, an unknown symbol, a value over the type's bits."""
    fast = records.codec._DEFAULT._writers[Occurrence].fast
    assert fast is not None
    bad = [occurrence(lane="URGENT"), occurrence(tenant=None), occurrence(version="2"),
           occurrence(attempt=2**31), occurrence(attempt=-(2**31) - 1), occurrence(attempt="1"),
           occurrence(scheduled_for_ms=2**63), occurrence(payload="text, not bytes")]
    for rec in bad:
        with pytest.raises(Exception):  # noqa: B017 - any error: the codec falls back on all
            fast(rec)
    assert fast(occurrence(attempt=2**31 - 1)) == _fastavro_body(Occurrence, occurrence(attempt=2**31 - 1))
    assert fast(occurrence(scheduled_for_ms=2**63 - 1)) == _fastavro_body(
        Occurrence, occurrence(scheduled_for_ms=2**63 - 1))


class _Small(enum.IntEnum):
    ONE = 1


# Values of the wrong type, or at a type's edge, put in every field of a record (a review found a
# bytes-like value with __radd__ that cut a record short, and bools and strings accepted in unions).
_ODD = [None, True, False, 0, 1, -1, 2**31, 2**63, -(2**63) - 1, 1.0, -0.0, float("inf"),
        2**31 - 1, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63),  # each bound of an int and a long
        decimal.Decimal("1"), fractions.Fraction(1, 2), "", "x", "STRICT", "cron", b"", b"x",
        bytearray(b"x"), memoryview(b"x"), (), [], (1,), ("x",), _Small.ONE, collections.UserString("x"),
        array.array("B", b"xy"), {}, {"a": 1}]


def _with_odd_values(rec: Any, depth: int = 0) -> Iterator[Any]:
    for f in dataclasses.fields(rec):
        v = getattr(rec, f.name)
        for odd in _ODD:
            yield dataclasses.replace(rec, **{f.name: odd})
        if dataclasses.is_dataclass(v) and depth < 2:
            for inner in _with_odd_values(v, depth + 1):
                yield dataclasses.replace(rec, **{f.name: inner})
        if isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]) and depth < 2:
            for inner in _with_odd_values(v[0], depth + 1):
                yield dataclasses.replace(rec, **{f.name: (inner, *v[1:])})


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_generated_writer_raises_or_writes_fastavros_bytes_for_odd_values(
    cls: type, data: st.DataObject
) -> None:
    """A value of another type or at its type's edge in any field, nested ones too: the
    generated writer raises (the codec then asks fastavro), or writes exactly fastavro's bytes;
    it never writes what fastavro refuses."""
    fast = records.codec._DEFAULT._writers[cls].fast
    assert fast is not None
    for rec in _with_odd_values(data.draw(record_strategy(cls))):
        try:
            got = fast(rec)
        except Exception:  # refused: the codec writes it through fastavro
            continue
        try:
            want = _fastavro_body(cls, rec)
        except Exception as exc:
            raise AssertionError(f"written, where fastavro raises {exc!r}: {rec!r}") from None
        assert got == want, rec


def _fastavro_read(data: bytes) -> Any:
    r = records.codec._DEFAULT._reader(data)
    return r.from_avro(records.codec._datum(data, r))


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_generated_reader_reads_what_fastavro_reads(cls: type, data: st.DataObject) -> None:
    """fastavro is the oracle: every current schema has a generated reader, and on a record's body
    it builds the same record; on the body truncated or with a byte changed it either raises
    (the codec then asks fastavro) or reads exactly what fastavro reads."""
    raw = encode(data.draw(record_strategy(cls)))
    fast = records.codec._DEFAULT._reader(raw).fast
    assert fast is not None, f"{cls.__name__}: no generated reader (a union other than [null, T]?)"
    assert fast(raw, 10) == (_fastavro_read(raw), len(raw))
    cut = data.draw(st.integers(10, len(raw) - 1))
    at = data.draw(st.integers(10, len(raw) - 1))
    changed = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    for bad in (raw[:cut], changed):
        try:
            got, end = fast(bad, 10)
        except Exception:  # refused: the codec reads it through fastavro
            continue
        if end != len(bad):
            continue  # trailing bytes: the codec reads it through fastavro, which names them
        want = _fastavro_read(bad)
        assert got == want or repr(got) == repr(want)  # a changed byte may make a double NaN


def test_a_body_of_a_released_schema_is_read_by_fastavro() -> None:
    """The generated reader is for the current schema only: an older fingerprint has none."""
    old = [r for r in records.codec._DEFAULT._readers.values() if r.version != "current"]
    assert old and all(r.fast is None for r in old)


# --- encode errors -----------------------------------------------------------------------------------


def test_encode_rejects_what_does_not_fit() -> None:
    with pytest.raises(RecordEncodeError, match="not a top-level ksched record: ScheduleSpecRecord"):
        encode(spec())  # type: ignore[arg-type]
    with pytest.raises(RecordEncodeError, match="lane"):
        encode(occurrence(lane="URGENT"))
    with pytest.raises(RecordEncodeError, match="tenant"):
        encode(occurrence(tenant=None))
    with pytest.raises(RecordEncodeError, match="Occurrence"):
        encode(occurrence(version="2"))
    with pytest.raises(RecordEncodeError, match="field attempt: 2147483648 does not fit an Avro int"):
        encode(occurrence(attempt=2**31))
    with pytest.raises(RecordEncodeError, match="attempt"):
        encode(occurrence(attempt="1"))
    with pytest.raises(RecordEncodeError, match="field max_runs: -2147483649 does not fit"):
        encode(
            ScheduleCommand(
                request_id="r", tenant="t", kind="CREATE", spec=spec(max_runs=-(2**31) - 1), issued_at_ms=0
            )
        )


# --- malformed input ---------------------------------------------------------------------------------


def test_malformed_inputs_name_the_problem() -> None:
    good = encode(occurrence())
    cases: list[tuple[Any, str]] = [
        (b"", "too short: 0 bytes"),
        (good[:9], "too short: 9 bytes"),
        (b"\x4f\x62" + good[2:], "wrong marker: 4f62"),
        (b"\xc3\x01" + b"\x00" * 8 + good[10:], "unknown schema fingerprint 0000000000000000"),
        (good[:-1], "Occurrence \\(current schema\\): truncated or corrupt body"),
        (good + b"\x00", "Occurrence \\(current schema\\): 1 trailing bytes"),
        ("not bytes", "not bytes: got str"),
        (None, "not bytes: got NoneType"),
    ]
    for data, message in cases:
        with pytest.raises(RecordDecodeError, match=message):
            decode(data)
    with pytest.raises(RecordDecodeError, match="wrong record type: got Occurrence, expected CommandResult"):
        decode(good, CommandResult)


@pytest.mark.parametrize("cls", TOP_LEVEL, ids=lambda c: c.__name__)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_truncation_is_a_decode_error(cls: type, data: st.DataObject) -> None:
    raw = encode(data.draw(record_strategy(cls)))
    for n in range(len(raw)):
        with pytest.raises(RecordDecodeError):
            decode(raw[:n])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_decode_error(blob: bytes) -> None:
    with contextlib.suppress(RecordDecodeError):
        decode(blob)


@settings(max_examples=500, deadline=None)
@given(cls=st.sampled_from(TOP_LEVEL), body=st.binary(max_size=200))
def test_random_bodies_behind_a_valid_header_never_raise_anything_but_decode_error(
    cls: type, body: bytes
) -> None:
    with contextlib.suppress(RecordDecodeError):
        decode(schema_header(cls) + body)


@settings(max_examples=300, deadline=None)
@given(rec=ANY_RECORD, data=st.data())
def test_corrupted_records_never_raise_anything_but_decode_error(rec: Any, data: st.DataObject) -> None:
    raw = bytearray(encode(rec))
    i = data.draw(st.integers(10, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(RecordDecodeError):
        decode(bytes(raw))


# --- data written with an older schema -----------------------------------------------------------------


def _strip(schema: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    out = json.loads(json.dumps(schema))
    out["fields"] = [f for f in out["fields"] if f["name"] not in drop]
    return out


def _write_old(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    parsed = parse_schema(json.loads(json.dumps(schema)), named_schemas={})
    header = b"\xc3\x01" + rabin(to_parsing_canonical_form(parsed).encode()).to_bytes(8, "little")
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, datum)
    return header + buf.getvalue()


def test_data_written_with_an_older_schema_decodes_with_the_current_reader(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), folder)
    old_occ = _strip(current_schema(Occurrence).expanded, {"deadline_ms"})
    old_rt = _strip(
        current_schema(ScheduleRuntime).expanded,
        {"queued", "catch_up_cursor_ms", "catch_up_emitted", "retries"},
    )
    (folder / "history" / "Occurrence.v0.avsc").write_text(json.dumps(old_occ))
    (folder / "history" / "ScheduleRuntime.v0.avsc").write_text(json.dumps(old_rt))
    codecs = Codecs(folder)

    occ = occurrence(deadline_ms=99)
    datum = {f.name: getattr(occ, f.name) for f in dataclasses.fields(occ) if f.name != "deadline_ms"}
    old_bytes = _write_old(old_occ, datum)
    assert old_bytes[:10] != schema_header(Occurrence)
    assert codecs.decode(old_bytes, Occurrence) == dataclasses.replace(occ, deadline_ms=None)
    with pytest.raises(RecordDecodeError, match="unknown schema fingerprint"):
        decode(old_bytes)  # the project's registry does not know this made-up version

    rt_bytes = _write_old(
        old_rt,
        {
            "schedule_id": "s",
            "tenant": "t",
            "version": 4,
            "runs_emitted": 2,
            "running": [],
            "updated_at_ms": 8,
        },
    )
    assert codecs.decode(rt_bytes) == ScheduleRuntime(
        schedule_id="s", tenant="t", version=4, runs_emitted=2, updated_at_ms=8
    )
    # a truncated old-schema record is still a precise error, naming the version
    with pytest.raises(RecordDecodeError, match=r"ScheduleRuntime \(v0 schema\): truncated"):
        codecs.decode(rt_bytes[:-1])


def test_released_v1_schemas_are_readable() -> None:
    hist = schemas_dir() / "history"
    for cls in TOP_LEVEL:
        short = cls.__name__
        path = hist / f"{short}.v1.avsc"
        assert path.is_file(), f"{path} missing: run python -m scheduler.records.compat --release"
        v1 = json.loads(path.read_text())
        assert v1["name"] == cls.AVRO_NAME


def test_decode_fields_is_decode_without_the_dataclass() -> None:
    from scheduler.records import decode_fields

    rec = Schedule(
        tenant="t", schedule_id="s", version=3, state="PAUSED",
        spec=ScheduleSpecRecord(kind="cron", cron="0 * * * *", timezone="UTC", handler="h", payload=b"p"),
        created_at_ms=1, updated_at_ms=2, effective_from_ms=3, paused_at_ms=4,
    )
    data = encode(rec)
    fields = decode_fields(data, Schedule)
    assert fields["spec"] == dataclasses.asdict(rec.spec)
    assert {k: v for k, v in fields.items() if k != "spec"} == {
        k: v for k, v in dataclasses.asdict(rec).items() if k != "spec"
    }
    with pytest.raises(RecordDecodeError, match="expected Schedule"):
        decode_fields(encode(ScheduleCommand(request_id="r", tenant="t", kind="PAUSE", issued_at_ms=0)),
                      Schedule)
    with pytest.raises(RecordDecodeError, match="trailing"):
        decode_fields(data + b"x", Schedule)
