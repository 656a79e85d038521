"""The record classes are generated from schemas/, and the committed module is what the generator writes."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from scheduler.records import ScheduleSpecRecord, generate
from scheduler.records.schemas import schemas_dir
from scheduler.spec_fields import CHOICES, CLEARABLE, REQUIRED, SPEC_FIELDS


def test_committed_module_is_what_the_schemas_generate() -> None:
    assert generate.OUTPUT.read_text(encoding="utf-8") == generate.generate(), (
        "scheduler/records/_generated.py is stale: run python -m scheduler.records.generate"
    )
    assert generate.main(["--check"]) == 0


def test_check_fails_and_writes_nothing_when_the_output_would_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "_generated.py"
    stale.write_text("# edited by hand\n", encoding="utf-8")
    monkeypatch.setattr(generate, "OUTPUT", stale)
    assert generate.main(["--check"]) == 1
    assert stale.read_text(encoding="utf-8") == "# edited by hand\n"
    assert "stale" in capsys.readouterr().err
    assert generate.main([]) == 0
    assert stale.read_text(encoding="utf-8") == generate.generate()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "schemas"
    shutil.copytree(schemas_dir(), out)
    return out


def _edit(folder: Path, name: str, edit: object) -> None:
    path = folder / f"{name}.avsc"
    schema = json.loads(path.read_text(encoding="utf-8"))
    edit(schema)  # type: ignore[operator]
    path.write_text(json.dumps(schema), encoding="utf-8")


def test_a_schema_change_changes_the_output(folder: Path) -> None:
    _edit(folder, "VersionRecord", lambda s: s["fields"].append(
        {"name": "note", "type": ["null", "string"], "default": None, "doc": "A note."}
    ))
    text = generate.generate(folder)
    assert text != generate.generate()
    assert "    # A note.\n    note: str | None = None\n" in text


def test_a_schema_enum_without_a_vocabulary_enum_is_an_error(folder: Path) -> None:
    _edit(folder, "CommandKind", lambda s: s.update(name="Verb"))
    _edit(folder, "ScheduleCommand", lambda s: next(f for f in s["fields"] if f["name"] == "kind").update(
        type="Verb"
    ))
    with pytest.raises(ValueError, match=r"schemas enum ksched.v1.Verb has no enum Verb in scheduler\.vocab"):
        generate.generate(folder)


def test_the_spec_field_table_lists_the_domain_and_record_fields_in_order() -> None:
    from scheduler.domain.spec import ScheduleSpec

    assert [f.name for f in SPEC_FIELDS] == [f.name for f in dataclasses.fields(ScheduleSpec)]
    assert [f.record for f in SPEC_FIELDS] == [f.name for f in dataclasses.fields(ScheduleSpecRecord)]
    no_default = [f.name for f in dataclasses.fields(ScheduleSpec) if f.default is dataclasses.MISSING]
    assert list(REQUIRED) == no_default
    assert list(CHOICES) == ["kind", "nonexistent", "repeated", "misfire", "overlap"]
    optional = [f.name for f in dataclasses.fields(ScheduleSpec) if f.default in (None, b"")]
    assert list(CLEARABLE) == [n for n in optional if n not in ("cron", "at")]  # --cron/--at switch kind
