"""The compiled copies of scheduler/native.py: built, current, used, and equal to their source.

``make install`` builds them, so the suite runs what production runs; each compiled module is
checked against its own interpreted source on the same bytes (values and exception types),
while tests/test_schedule_scan.py checks the scan against fastavro, an independent decoder.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import native
from scheduler.records import Schedule, encode
from scheduler.records import schedule_scan as ss
from tests.test_records import record_strategy


def test_every_listed_module_is_compiled_from_its_current_source() -> None:
    assert native.status() == dict.fromkeys(native.NATIVE, "current"), "run `make install`"
    done = subprocess.run([sys.executable, "-m", "scheduler.native", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", native.NATIVE)
def test_load_returns_the_compiled_copy(name: str) -> None:
    assert native.load(name).__file__.endswith(".so")  # type: ignore[union-attr]


def test_a_stale_copy_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_source_hash", lambda name: "0" * 64)
    assert native.status()["scheduler.records.scan_core"] == "stale"
    assert native.load("scheduler.records.scan_core").__file__.endswith("scan_core.py")  # type: ignore[union-attr]


def test_ksched_native_0_runs_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSCHED_NATIVE", "0")
    assert native.load("scheduler.records.scan_core").__file__.endswith("scan_core.py")  # type: ignore[union-attr]


def _outcome(scan_body: Any, value: bytes) -> object:
    try:
        return scan_body(value, ss._STATES, set(), [], ss._key_end)
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        return type(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rec=record_strategy(Schedule), data=st.data())
def test_compiled_scan_equals_its_source_on_any_bytes(rec: Schedule, data: st.DataObject) -> None:
    pure = importlib.import_module("scheduler.records.scan_core")
    compiled = native.load("scheduler.records.scan_core")
    value = bytearray(encode(rec))
    assert _outcome(compiled.scan_body, bytes(value)) == _outcome(pure.scan_body, bytes(value))
    for _ in range(data.draw(st.integers(1, 3))):
        value[data.draw(st.integers(10, len(value) - 1))] = data.draw(st.integers(0, 255))
    value = value[: data.draw(st.integers(11, len(value)))]
    assert _outcome(compiled.scan_body, bytes(value)) == _outcome(pure.scan_body, bytes(value))
