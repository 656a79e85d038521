"""The compiled copies of scheduler/native.py: built, current, used, and equal to their source.

``make install`` builds them, so the suite runs what production runs; each compiled module is
checked against its own interpreted source on the same bytes (values and exception types),
while tests/test_schedule_scan.py checks the scan against fastavro, an independent decoder.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import native
from scheduler.processor.model import Event
from scheduler.records import AttemptReport, Occurrence, OccurrenceEvent, Schedule, VersionRecord, encode
from scheduler.records import report_scan as rs
from scheduler.records import schedule_scan as ss
from tests.test_records import record_strategy

FAST = "scheduler.records.avro_fast"


def test_every_listed_module_is_compiled_from_its_current_source() -> None:
    every = (*native.NATIVE, *native.NATIVE_C)
    assert native.status() == dict.fromkeys(every, "current"), "run `make install`"
    done = subprocess.run([sys.executable, "-m", "scheduler.native", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", native.NATIVE)
def test_load_returns_the_compiled_copy(name: str) -> None:
    assert native.load(name).__file__.endswith(".so")  # type: ignore[union-attr]


def test_a_stale_copy_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_source_hash", lambda name: "0" * 64)
    assert native.status()["scheduler.records.avro_fast"] == "stale"
    assert native.load("scheduler.records.avro_fast").__file__.endswith("avro_fast.py")  # type: ignore[union-attr]


def test_ksched_native_0_runs_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSCHED_NATIVE", "0")
    assert native.load("scheduler.records.avro_fast").__file__.endswith("avro_fast.py")  # type: ignore[union-attr]
    assert native.load_c("scheduler.domain._ids_native") is None


def test_a_build_for_another_interpreter_or_without_its_stamp_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the file of this interpreter's ``EXT_SUFFIX`` counts (``make install PYTHON=...`` after
    another version's build), and a build whose stamp is gone (an interrupted build) is missing:
    both load the Python copy, never raise."""
    import sysconfig

    real = sysconfig.get_config_var

    def other(var: str) -> object:
        return ".cpython-399-x86_64-linux-gnu.so" if var == "EXT_SUFFIX" else real(var)

    monkeypatch.setattr(sysconfig, "get_config_var", other)
    assert set(native.status().values()) == {"missing"}
    assert native.load_c("scheduler.domain._ids_native") is None
    assert native.load(FAST).__file__.endswith("avro_fast.py")  # type: ignore[union-attr]
    monkeypatch.undo()
    monkeypatch.setattr(native, "_stamp_path", lambda name: tmp_path / "gone.sha256")
    assert native.status()[FAST] == "missing"
    assert native.load(FAST).__file__.endswith("avro_fast.py")  # type: ignore[union-attr]


def test_a_missing_compiler_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc -pthread")
    with pytest.raises(SystemExit, match="cannot run the C compiler 'no-such-cc'"):
        native._compile_c("scheduler.domain._ids_native")
    assert native.status()["scheduler.domain._ids_native"] == "current"  # the build in place is kept


@pytest.mark.parametrize("name", native.NATIVE_C)
def test_load_c_returns_the_module_only_when_current(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert native.load_c(name).__file__.endswith(".so")  # type: ignore[union-attr]
    monkeypatch.setattr(native, "_source_hash", lambda name: "0" * 64)
    assert native.status()[name] == "stale"
    assert native.load_c(name) is None


def _outcome(scan_body: Any, value: bytes) -> object:
    try:
        return scan_body(value, ss.STATES, set(), [], ss._key_end)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        return type(exc)


def _mutated(value: bytes, data: st.DataObject) -> bytes:
    out = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        out[data.draw(st.integers(10, len(out) - 1))] = data.draw(st.integers(0, 255))
    return bytes(out[: data.draw(st.integers(11, len(out)))])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rec=record_strategy(Schedule), data=st.data())
def test_compiled_scan_and_writer_equal_their_source(rec: Schedule, data: st.DataObject) -> None:
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    value = encode(rec)
    assert _outcome(compiled.scan_body, value) == _outcome(pure.scan_body, value)
    value = _mutated(value, data)
    assert _outcome(compiled.scan_body, value) == _outcome(pure.scan_body, value)
    # and the writer of the same record (its spec as the scan's key)
    scanned = pure.scan_body(encode(rec), ss.STATES, set(), [], ss._key_end)
    fields = (b"H", *scanned[:3], ss.STATES.index(scanned[3]), *scanned[4:])
    assert compiled.schedule_record(*fields) == pure.schedule_record(*fields) == b"H" + encode(rec)[10:]
    version = (b"V", rec.schedule_id, rec.tenant, rec.version, 1, rec.updated_at_ms, rec.paused_at_ms,
               rec.resumed_at_ms)
    assert compiled.version_record(*version) == pure.version_record(*version)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rep=record_strategy(AttemptReport), data=st.data())
def test_compiled_report_and_event_equal_their_source(rep: AttemptReport, data: st.DataObject) -> None:
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    for value in (encode(rep), _mutated(encode(rep), data)):
        header = rs.REPORT_HEADER
        assert compiled.scan_report(header, rs.KINDS, value) == pure.scan_report(header, rs.KINDS, value)
    args = (b"H", rep.occurrence_id, rep.schedule_id, rep.tenant, rep.version, rep.scheduled_for_ms, 2,
            rep.attempt, rep.error_message, rep.reported_at_ms)
    assert compiled.event_value(*args) == pure.event_value(*args)
    # the processor's Event (a named tuple) through the compiled unpacking
    ev = Event(rep.occurrence_id, rep.schedule_id, rep.tenant, rep.version, rep.scheduled_for_ms // 1000,
               "SUCCEEDED", rep.error_message, rep.attempt)
    record = (rs.STATE_INDEX, rep.reported_at_ms, b"H", ev)
    assert compiled.event_record(*record) == pure.event_record(*record)
    # a batch's events in tenant runs: the same records and the same end of each run
    events = [ev, ev._replace(tenant=ev.tenant + "x"), ev, ev]
    for start in (0, 1, 2):
        for batch in ((), (b"B", 1), (b"B", 10**6)):  # one record an event; batches of one; of all
            counted: tuple[dict[str, int], dict[str, int]] = ({"DEAD": 1}, {"DEAD": 1})
            run = (rs.STATE_INDEX, rep.reported_at_ms, b"H", events, start)
            assert compiled.event_run(*run, counted[0], *batch) == pure.event_run(*run, counted[1], *batch)
            assert counted[0] == counted[1]
    # and the batch's reader, on the batch the writer made and on a mutation of it
    value = pure.event_run(rs.STATE_INDEX, 0, b"H", events, 2, {}, b"B" * 10, 10**6)[0][0]["value"]
    for v in (value, _mutated(value, data)):
        assert _called(compiled.event_bodies, v) == _called(pure.event_bodies, v)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    occ=record_strategy(Occurrence),
    ver=record_strategy(VersionRecord),
    ev=record_strategy(OccurrenceEvent),
    data=st.data(),
)
def test_compiled_worker_reads_equal_their_source(
    occ: Occurrence, ver: VersionRecord, ev: OccurrenceEvent, data: st.DataObject
) -> None:
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    for fn, rec in (("occurrence_body", occ), ("version_body", ver), ("event_body", ev)):
        for value in (encode(rec), _mutated(encode(rec), data)):
            assert _called(getattr(compiled, fn), value) == _called(getattr(pure, fn), value)


def _called(fn: Any, value: bytes) -> object:
    try:
        return fn(value)
    except (IndexError, ValueError) as exc:  # UnicodeDecodeError included
        return type(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(occ=record_strategy(Occurrence))
def test_compiled_dispatch_writers_equal_their_source(occ: Occurrence) -> None:
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    ids = (occ.occurrence_id, occ.schedule_id)
    assert compiled.occurrence_head(*ids) == pure.occurrence_head(*ids)
    run = (occ.tenant, occ.version, occ.scheduled_for_ms, occ.available_at_ms)
    assert compiled.occurrence_run(*run) == pure.occurrence_run(*run)
    tail = (max(occ.attempt, 1), 2, occ.handler, occ.payload, occ.deadline_ms)  # attempts count from 1
    pieces = (b"H", b"head", occ.schedule_id.encode(), b"run", pure.avro_long(occ.enqueued_at_ms))
    assert compiled.occurrence_record(*pieces, *tail) == pure.occurrence_record(*pieces, *tail)
    for fn in (compiled.occurrence_record, pure.occurrence_record):
        with pytest.raises(ValueError, match="field attempt: 0"):
            fn(*pieces, 0, *tail[1:])


def test_the_cached_name_encoding_stays_the_string_encoding_past_the_cache_size() -> None:
    """``avro_name`` (a handler's encoding, cached) equals ``avro_string`` for more distinct names
    than its cache holds, the first ones again after the cache was emptied, and non-ASCII."""
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    names = [f"h{i}-é" for i in range(pure._NAMES_LIMIT + 10)]
    for mod in (pure, compiled):
        for name in [*names, *names[:20]]:
            assert mod.avro_name(name) == pure.avro_string(name)
            assert len(mod._NAMES) <= pure._NAMES_LIMIT


def test_a_varint_past_64_bits_is_no_long_compiled_or_not() -> None:
    """The hand readers refuse what no writer of a long can write (fastavro wraps it around), and
    read the longs at both ends of the range."""
    pure, compiled = importlib.import_module(FAST), native.load(FAST)
    for mod in (pure, compiled):
        for n in (-(2**63), 2**63 - 1, 0, -1, 300):
            assert mod.read_long(mod.avro_long(n), 0) == (n, len(mod.avro_long(n)))
        with pytest.raises(ValueError, match="over 64 bits"):
            mod.read_long(bytes([0x80] * 9 + [0x02]), 0)
        with pytest.raises(ValueError, match="longer than 10 bytes"):
            mod.read_long(bytes([0x80] * 10 + [0x01]), 0)
