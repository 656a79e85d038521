"""Schema compatibility check (``python -m scheduler.records.compat``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.records.compat import check, compatibility_problems, main
from scheduler.records.schemas import schemas_dir

REPO = Path(__file__).resolve().parent.parent
MISSING = "field missing from the written data and has no default"


def rec(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": f"ns.{name}", "fields": list(fields)}


def enum(*symbols: str, default: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"type": "enum", "name": "ns.E", "symbols": list(symbols)}
    if default is not None:
        e["default"] = default
    return e


def both(new: dict[str, Any], old: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems of the new reader reading old data, problems of the old reader reading new data)."""
    return compatibility_problems(new, old), compatibility_problems(old, new)


A = {"name": "a", "type": "string"}


def test_identical_schemas_are_compatible() -> None:
    s = rec(A, {"name": "b", "type": ["null", "long"], "default": None})
    assert both(s, s) == ([], [])


def test_field_added_without_default_breaks_new_readers() -> None:
    new_reads_old, old_reads_new = both(rec(A, {"name": "b", "type": "long"}), rec(A))
    assert new_reads_old == ["R.b: field missing from the written data and has no default"]
    assert old_reads_new == []


def test_field_added_with_default_is_compatible() -> None:
    assert both(rec(A, {"name": "b", "type": "int", "default": 0}), rec(A)) == ([], [])


def test_field_removed_without_default_breaks_old_readers() -> None:
    new_reads_old, old_reads_new = both(rec(A), rec(A, {"name": "b", "type": "long"}))
    assert new_reads_old == []
    assert old_reads_new == ["R.b: field missing from the written data and has no default"]


def test_type_change_breaks_and_promotion_works_one_way() -> None:
    assert both(rec({"name": "a", "type": "long"}), rec(A)) == (
        ["R.a: type changed from string to long"],
        ["R.a: type changed from long to string"],
    )
    # int -> long: new readers promote old ints; old int readers cannot read longs.
    assert both(rec({"name": "a", "type": "long"}), rec({"name": "a", "type": "int"})) == (
        [],
        ["R.a: type changed from long to int"],
    )
    assert both(rec({"name": "a", "type": "bytes"}), rec(A)) == ([], [])


def test_enum_symbol_added_needs_an_enum_default() -> None:
    old = rec({"name": "e", "type": enum("X", "Y")})
    assert both(rec({"name": "e", "type": enum("X", "Y", "Z")}), old) == (
        [],
        ["R.e: enum ns.E lacks symbol(s) Z and has no default"],
    )
    old_with_default = rec({"name": "e", "type": enum("X", "Y", default="X")})
    assert both(rec({"name": "e", "type": enum("X", "Y", "Z", default="X")}), old_with_default) == ([], [])
    # removing a symbol breaks the new reader (old data may hold it) unless the new enum has a default
    assert both(rec({"name": "e", "type": enum("X")}), old)[0] == [
        "R.e: enum ns.E lacks symbol(s) Y and has no default"
    ]


def test_unions() -> None:
    nullable = rec({"name": "a", "type": ["null", "string"], "default": None})
    plain = rec(A)
    # making a field nullable: new readers read old strings; old readers cannot read a null
    assert both(nullable, plain) == ([], ["R.a: writer union branch null cannot be read as string"])
    assert both(plain, nullable) == (["R.a: writer union branch null cannot be read as string"], [])
    # a union reader lacking a writer type
    assert compatibility_problems(rec({"name": "a", "type": ["null", "long"]}), plain) == [
        "R.a: writer type string is not in the reader's union"
    ]


def test_nested_records_arrays_and_maps_are_checked_with_paths() -> None:
    inner_old = rec(A, name="I")
    inner_new = rec(A, {"name": "n", "type": "int"}, name="I")
    old = rec(
        {"name": "xs", "type": {"type": "array", "items": inner_old}},
        {"name": "m", "type": {"type": "map", "values": "int"}},
    )
    new = rec(
        {"name": "xs", "type": {"type": "array", "items": inner_new}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
    )
    new_reads_old, old_reads_new = both(new, old)
    assert new_reads_old == [
        "R.xs[].n: field missing from the written data and has no default",
        "R.m{}: type changed from int to string",
    ]
    assert old_reads_new == ["R.m{}: type changed from string to int"]


def test_named_type_references_are_resolved() -> None:
    e = enum("X", "Y")
    old = rec({"name": "a", "type": e}, {"name": "b", "type": ["null", "ns.E"], "default": None})
    new = rec(
        {"name": "a", "type": enum("X", "Y", "Z")}, {"name": "b", "type": ["null", "ns.E"], "default": None}
    )
    assert both(new, old)[1] == [
        "R.a: enum ns.E lacks symbol(s) Z and has no default",
        "R.b: enum ns.E lacks symbol(s) Z and has no default",
    ]


def test_recursive_types_terminate() -> None:
    node = {
        "type": "record",
        "name": "ns.Node",
        "fields": [
            {"name": "v", "type": "int"},
            {"name": "next", "type": ["null", "ns.Node"], "default": None},
        ],
    }
    node2 = json.loads(json.dumps(node))
    node2["fields"].append({"name": "w", "type": "long"})
    assert compatibility_problems(node2, node) == [
        "Node.w: field missing from the written data and has no default"
    ]


# --- the command over a copy of the project's schemas ------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    dst = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), dst)
    return dst


def _edit(folder: Path, name: str, fn: Any) -> None:
    path = folder / f"{name}.avsc"
    schema = json.loads(path.read_text())
    fn(schema)
    path.write_text(json.dumps(schema, indent=2))


def test_project_schemas_are_compatible_with_their_released_versions() -> None:
    problems, _notes = check()
    assert problems == []
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.records.compat"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "schemas-check: OK" in out.stderr


def test_breaking_change_in_a_shared_type_fails_naming_every_schema_and_field(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(
        folder, "ScheduleSpec", lambda s: s["fields"].append({"name": "priority", "type": "int", "doc": "p"})
    )
    assert main(["--schemas", str(folder)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"Schedule (current reads v1 data): Schedule.spec.priority: {MISSING}",
        f"Schedule (current reads v2 data): Schedule.spec.priority: {MISSING}",
        f"ScheduleCommand (current reads v1 data): ScheduleCommand.spec.priority: {MISSING}",
        f"ScheduleHistoryEntry (current reads v1 data): ScheduleHistoryEntry.spec.priority: {MISSING}",
        f"ScheduleHistoryEntry (current reads v2 data): ScheduleHistoryEntry.spec.priority: {MISSING}",
    ]


def test_enum_symbol_added_without_default_fails(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(folder, "Lane", lambda s: s["symbols"].append("BULK"))
    assert main(["--schemas", str(folder)]) == 1
    out = capsys.readouterr().out
    assert (
        "DlqEntry (v1 reader reads current data): DlqEntry.lane: enum ksched.v1.Lane lacks symbol(s) BULK"
        in out
    )
    assert (
        "Occurrence (v1 reader reads current data): Occurrence.lane: enum ksched.v1.Lane lacks symbol(s) BULK"
        in out
    )


def test_removed_field_without_default_and_type_change_fail(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def change(s: dict[str, Any]) -> None:
        s["fields"] = [f for f in s["fields"] if f["name"] != "handler"]
        next(f for f in s["fields"] if f["name"] == "attempt")["type"] = "string"

    _edit(folder, "Occurrence", change)
    assert main(["--schemas", str(folder)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Occurrence (current reads v1 data): Occurrence.attempt: type changed from int to string",
        "Occurrence (v1 reader reads current data): Occurrence.attempt: type changed from string to int",
        f"Occurrence (v1 reader reads current data): Occurrence.handler: {MISSING}",
    ]


def test_removed_schema_fails(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / "VersionRecord.avsc").unlink()
    assert main(["--schemas", str(folder)]) == 1
    assert "VersionRecord: schema removed, but v2 was released" in capsys.readouterr().out  # v2: pause span


def test_compatible_change_passes_then_release_freezes_it(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(
        folder,
        "ScheduleSpec",
        lambda s: s["fields"].append({"name": "priority", "type": "int", "default": 0, "doc": "p"}),
    )
    _edit(folder, "Lane", lambda s: None)  # untouched file rewritten: same schema, nothing to release
    assert main(["--schemas", str(folder)]) == 0
    err = capsys.readouterr().err
    assert "note: ScheduleHistoryEntry: changed since v2, compatible, not released yet" in err
    assert "note: Occurrence" not in err
    before = {p.name for p in (folder / "history").glob("*.avsc")}
    assert main(["--schemas", str(folder), "--release"]) == 0
    released = sorted(p.name for p in (folder / "history").glob("*.avsc") if p.name not in before)
    assert "ScheduleCommand.v2.avsc" in released and "ScheduleHistoryEntry.v3.avsc" in released
    assert [n for n in released if n.startswith("Schedule.")] != []  # every schema embedding the spec
    capsys.readouterr()
    assert main(["--schemas", str(folder)]) == 0
    assert "note:" not in capsys.readouterr().err
    # v3 is self-contained: it carries its own copy of the spec
    v3 = json.loads((folder / "history" / "ScheduleHistoryEntry.v3.avsc").read_text())
    spec = next(f for f in v3["fields"] if f["name"] == "spec")["type"][1]
    assert spec["name"] == "ksched.v1.ScheduleSpec" and spec["fields"][-1]["name"] == "priority"
    # and a later breaking change is checked against v1, v2 and v3
    _edit(folder, "ScheduleSpec", lambda s: s["fields"].pop())
    _edit(
        folder,
        "ScheduleSpec",
        lambda s: s["fields"].append({"name": "priority", "type": "string", "doc": "p"}),
    )
    assert main(["--schemas", str(folder)]) == 1
    out = capsys.readouterr().out
    assert (
        "ScheduleHistoryEntry (current reads v1 data): ScheduleHistoryEntry.spec.priority: field missing"
    ) in out
    assert (
        "ScheduleHistoryEntry (current reads v3 data): ScheduleHistoryEntry.spec.priority: "
        "type changed from int to string"
    ) in out
