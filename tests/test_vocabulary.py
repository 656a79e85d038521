"""scheduler.vocabulary against schemas/: every enum (and its Literal) spells the Avro symbols, in order."""

from __future__ import annotations

import json
import re
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, get_args

import pytest

from scheduler import vocabulary as v

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def _avro_enums() -> dict[str, list[str]]:
    """Short name -> symbols of every enum defined anywhere in ``schemas/*.avsc`` (not history)."""
    found: dict[str, list[str]] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b)
        elif isinstance(s, dict):
            if s.get("type") == "enum":
                found[s["name"].rpartition(".")[2]] = list(s["symbols"])
            for key in ("type", "items", "values"):
                walk(s.get(key))
            for f in s.get("fields", []):
                walk(f)

    for path in sorted(SCHEMAS.glob("*.avsc")):
        walk(json.loads(path.read_text(encoding="utf-8")))
    return found


AVRO_ENUMS = _avro_enums()


def _symbols(enum: type[Enum]) -> list[str]:
    # A StrEnum's value is its symbol (e.g. ScheduleKind.CRON = "cron"); an IntEnum's name is.
    return [m.name if issubclass(enum, IntEnum) else str(m.value) for m in enum]


def _difference(name: str, ours: list[str], theirs: list[str]) -> str:
    return (
        f"vocabulary.{name} {ours} != schemas enum {name} {theirs}: "
        f"missing {[s for s in theirs if s not in ours]}, extra {[s for s in ours if s not in theirs]}"
        + (", order differs" if sorted(ours) == sorted(theirs) else "")
    )


def test_every_schema_enum_has_a_vocabulary_enum() -> None:
    ours = {e.__name__ for e in v.VOCABULARY}
    assert set(AVRO_ENUMS) == ours, f"schema enums without vocabulary: {sorted(set(AVRO_ENUMS) - ours)}"


@pytest.mark.parametrize("enum", v.VOCABULARY, ids=lambda e: e.__name__)
def test_enum_members_are_the_schema_symbols_in_order(enum: type[Enum]) -> None:
    name = enum.__name__
    ours, theirs = _symbols(enum), AVRO_ENUMS[name]
    assert ours == theirs, _difference(name, ours, theirs)
    if not issubclass(enum, IntEnum):  # the member names are the UPPER_CASE spelling of the symbols
        assert [m.name for m in enum] == [s.upper() for s in theirs], name


@pytest.mark.parametrize("enum", v.VOCABULARY, ids=lambda e: e.__name__)
def test_symbol_literal_is_the_schema_symbols_in_order(enum: type[Enum]) -> None:
    name = f"{enum.__name__}Symbol"
    ours = list(get_args(getattr(v, name)))
    theirs = AVRO_ENUMS[enum.__name__]
    assert ours == theirs, _difference(name, ours, theirs)


def test_str_enums_are_their_wire_strings() -> None:
    assert v.ScheduleState.ACTIVE == "ACTIVE" and hash(v.ScheduleState.ACTIVE) == hash("ACTIVE")
    assert f"{v.ScheduleKind.CRON}" == "cron" and str(v.ErrorClass.CANCELED) == "ksched.Canceled"
    assert json.dumps([v.Misfire.FIRE_ONCE]) == '["FIRE_ONCE"]'


def test_lane_values_are_priorities_and_names_are_symbols() -> None:
    assert [(lane.name, int(lane)) for lane in v.Lane] == [
        ("STRICT", 0), ("FLEXIBLE", 1), ("CATCH_UP", 2), ("RETRY", 3)
    ]
    assert [v.lane_symbol(lane) for lane in v.Lane] == AVRO_ENUMS["Lane"]


def test_terminal_and_final_states() -> None:
    assert {"CANCELED", "COMPLETED"} == v.TERMINAL_SCHEDULE_STATES
    assert "terminal" in _doc("ScheduleState.avsc")  # the schema's doc says which states are terminal
    assert {"SUCCEEDED", "DEAD", "MISSED", "CANCELED", "SKIPPED_OVERLAP"} == v.FINAL_OCCURRENCE_STATES


def _doc(file: str) -> str:
    return str(json.loads((SCHEMAS / file).read_text(encoding="utf-8"))["doc"])


def test_reject_codes_cover_the_codes_the_schema_documents() -> None:
    # CommandResult.code is a plain string (new codes never break old readers), so there is no
    # symbol list to compare with: its doc names the codes, and each must be a RejectCode.
    doc = next(
        f["doc"] for f in json.loads((SCHEMAS / "CommandResult.avsc").read_text(encoding="utf-8"))["fields"]
        if f["name"] == "code"
    )
    documented = re.findall(r"\b[A-Z][A-Z_]{3,}\b", doc.partition(":")[2])
    assert documented, doc
    assert set(documented) <= {c.value for c in v.RejectCode}, documented


def test_the_vocabulary_imports_nothing_from_scheduler() -> None:
    source = Path(v.__file__).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) scheduler", source, re.M)


def test_spec_and_records_take_the_enums_and_keep_the_plain_symbols() -> None:
    from scheduler.domain.spec import ScheduleSpec
    from scheduler.records import Schedule, ScheduleSpecRecord, decode, encode

    by_enum = ScheduleSpec(
        kind=v.ScheduleKind.CRON, cron="* * * * *", timezone="UTC", handler="h",
        nonexistent=v.Nonexistent.SHIFT, repeated=v.Repeated.ALL, misfire=v.Misfire.CATCH_UP,
        catch_up_limit=2, overlap=v.Overlap.QUEUE_ONE,
    )
    by_str = ScheduleSpec(
        kind="cron", cron="* * * * *", timezone="UTC", handler="h", nonexistent="shift", repeated="all",
        misfire="CATCH_UP", catch_up_limit=2, overlap="QUEUE_ONE",
    )
    assert by_enum == by_str and repr(by_enum) == repr(by_str) and hash(by_enum) == hash(by_str)
    assert all(type(x) is str for x in (by_enum.kind, by_enum.misfire, by_enum.to_dict()["overlap"]))
    rec = Schedule(
        tenant="t", schedule_id="s", version=1, state=v.ScheduleState.PAUSED,
        spec=ScheduleSpecRecord.from_domain(by_enum), created_at_ms=0, updated_at_ms=0, effective_from_ms=0,
    )
    back = decode(encode(rec), Schedule)
    assert back == rec and back.state == "PAUSED" and type(back.state) is str
    assert back.spec.to_domain() == by_str
