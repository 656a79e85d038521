"""Generate the record dataclasses from ``schemas/*.avsc``: ``python -m scheduler.records.generate``.

Writes ``scheduler/records/_generated.py``: one frozen, keyword-only, slotted
dataclass per Avro record, with the schema's field names, order, defaults and
docs; ``--check`` writes nothing and exits 1 when the committed module differs
from what the schemas give (``make schemas-check`` and a test run it).

Mapping (what ``records/types.py`` spelled out by hand before):

* ``string`` -> ``str``, ``int``/``long`` -> ``int`` (``*_ms`` are epoch
  milliseconds UTC), ``float``/``double`` -> ``float``, ``boolean`` -> ``bool``,
  ``bytes`` -> ``bytes``; ``["null", T]`` -> ``T | None``; arrays -> tuples;
* an Avro enum -> its :mod:`scheduler.vocabulary` enum or Literal of the same
  name (``Enum | EnumSymbol``; ``LaneSymbol`` for the ``IntEnum`` :class:`Lane`,
  whose *name* is the symbol); a schema enum the vocabulary lacks is an error;
* a record -> the class of the same name, except those renamed in
  :data:`PY_NAMES`; :data:`BASES` gives a class its hand-written behaviour (a
  mixin with ``__slots__ = ()``);
* ``TOP_LEVEL`` are the records no other record contains (they travel on their
  own), and those of :data:`ALSO_ALONE`; ``NESTED`` the others.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import textwrap
from collections.abc import Sequence
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

from scheduler import vocabulary
from scheduler.records.schemas import PRIMITIVES, fullname, load_definitions

Json = Any
OUTPUT = Path(__file__).with_name("_generated.py")
PY_NAMES = {"ksched.v1.ScheduleSpec": "ScheduleSpecRecord"}  # the domain owns the name ScheduleSpec
BASES = {"ksched.v1.ScheduleSpec": ("scheduler.records.spec_record", "SpecConversion")}
# Records that travel on their own although another record contains them: an ``AttemptReport``
# is a record of the commands topic, and an ``AttemptReports`` carries several; an ``OccurrenceEvent``
# is a record of the events topic, and an ``OccurrenceEvents`` carries several.
ALSO_ALONE = frozenset({"ksched.v1.AttemptReport", "ksched.v1.OccurrenceEvent"})
_PY_PRIMITIVES = {
    "null": "None", "boolean": "bool", "int": "int", "long": "int", "float": "float", "double": "float",
    "bytes": "bytes", "string": "str",
}
_WIDTH = 110


class _Module:
    """The generated module's text, built from the schema definitions."""

    def __init__(self, defs: dict[str, Json]) -> None:
        self.defs = defs
        self.records = [n for n, d in defs.items() if d["type"] == "record"]
        self.vocab: set[str] = set()
        self.nested: set[str] = set()

    def py_name(self, full: str) -> str:
        return PY_NAMES.get(full, full.rpartition(".")[2])

    def named(self, full: str) -> str:
        d = self.defs[full]
        if d["type"] == "record":
            self.nested.add(full)
            return self.py_name(full)
        if d["type"] != "enum":
            raise ValueError(f"{full}: only records and enums are supported, not {d['type']}")
        short = full.rpartition(".")[2]
        enum = getattr(vocabulary, short, None)
        if not (isinstance(enum, type) and issubclass(enum, StrEnum | IntEnum)):
            raise ValueError(f"schemas enum {full} has no enum {short} in scheduler.vocabulary")
        self.vocab.add(f"{short}Symbol")
        if issubclass(enum, IntEnum):  # the wire carries the member's name, never the int
            return f"{short}Symbol"
        self.vocab.add(short)
        return f"{short} | {short}Symbol"

    def py_type(self, t: Json, ns: str | None) -> str:
        if isinstance(t, str):
            return _PY_PRIMITIVES[t] if t in PRIMITIVES else self.named(self._full(t, ns))
        if isinstance(t, list):
            branches = [b for b in t if b != "null"] + ["null"] * ("null" in t)  # ``T | None``
            return " | ".join(self.py_type(b, ns) for b in branches)
        kind = t["type"]
        if kind == "array":
            return f"tuple[{self.py_type(t['items'], ns)}, ...]"
        if kind in ("record", "enum"):
            return self.named(fullname(t["name"], t.get("namespace", ns)))
        return self.py_type(kind, ns)

    def _full(self, name: str, ns: str | None) -> str:
        full = fullname(name, ns)
        return full if full in self.defs else name

    def default(self, f: Json) -> str:
        """The Python default of an Avro field default (``=`` included), or ``""`` for none."""
        if "default" not in f:
            return ""
        d, t = f["default"], f["type"]
        base = t["type"] if isinstance(t, dict) else t
        if d is None:
            return " = None"
        if base == "array":
            return " = ()"
        if base == "bytes":  # an Avro bytes default is a string of code points 0-255
            plain = d.isascii() and d.isprintable()
            return f" = b{json.dumps(d)}" if plain else f" = {d.encode('latin-1')!r}"
        if base in ("float", "double"):
            return f" = {float(d)!r}"
        return f" = {json.dumps(d) if isinstance(d, str) else repr(d)}"  # "" quotes like the code around

    def record(self, full: str) -> list[str]:
        d = self.defs[full]
        ns = full.rpartition(".")[0] or None
        base = BASES.get(full)
        head = f"class {self.py_name(full)}({base[1]}):" if base else f"class {self.py_name(full)}:"
        out = ["", "", "@dataclass(frozen=True, kw_only=True, slots=True)", head]
        out += _docstring(f"Avro ``{full}``: {d.get('doc', '')}", "    ")
        out += ["", f'    AVRO_NAME: ClassVar[str] = "{full}"', ""]
        for f in d["fields"]:
            out += _comment(f.get("doc", ""), "    ")
            out.append(f"    {f['name']}: {self.py_type(f['type'], ns)}{self.default(f)}")
        return out

    def text(self) -> str:
        body: list[str] = []
        for full in self.records:
            body += self.record(full)
        top = [self.py_name(n) for n in self.records if n not in self.nested or n in ALSO_ALONE]
        nested = [self.py_name(n) for n in self.records if n in self.nested and n not in ALSO_ALONE]
        imports = sorted({module for module, _ in BASES.values()})
        head = [
            '"""Generated by ``python -m scheduler.records.generate`` from ``schemas/*.avsc``: do not edit.',
            "",
            "One frozen, keyword-only dataclass per Avro record; hand-written behaviour lives in",
            "the bases named in ``scheduler.records.generate.BASES``.",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from dataclasses import dataclass",
            "from typing import ClassVar",
            "",
            *[f"from {m} import {', '.join(sorted(b for mm, b in BASES.values() if mm == m))}"
              for m in imports],
            *_wrapped_import("scheduler.vocabulary", sorted(self.vocab)),
        ]
        tail = [
            "",
            "",
            *_wrapped("Record = (", " | ".join(top), ")"),
            '"""Any top-level record (one that travels on its own, single-object encoded)."""',
            "",
            *_wrapped("TOP_LEVEL: tuple[type[Record], ...] = (", ", ".join(top) + ",", ")"),
            *_wrapped("NESTED: tuple[type[", " | ".join(nested), "], ...] = ("),
            *_wrapped("", ", ".join(nested) + ",", ")")[1:],
            '"""The records that travel only inside another one."""',
        ]
        return "\n".join([*head, *body, *tail]) + "\n"


def _docstring(text: str, indent: str) -> list[str]:
    lines = textwrap.wrap(text, _WIDTH - len(indent) - 6)
    if len(lines) <= 1:
        return [f'{indent}"""{text}"""']
    return [f'{indent}"""{lines[0]}', *[f"{indent}{line}" for line in lines[1:]], f'{indent}"""']


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, _WIDTH - len(indent) - 2)]


def _wrapped(opening: str, items: str, closing: str) -> list[str]:
    """``opening`` + the items, one indented block of wrapped lines, then ``closing``."""
    lines = textwrap.wrap(items, _WIDTH - 4, initial_indent="    ", subsequent_indent="    ")
    return [opening, *lines, closing]


def _wrapped_import(module: str, names: list[str]) -> list[str]:
    return [f"from {module} import (", *[f"    {n}," for n in names], ")"]


def generate(folder: Path | None = None) -> str:
    """The text of ``_generated.py`` for the schemas in ``folder`` (default: the project's)."""
    defs, _tops = load_definitions(folder)
    return _Module(defs).text()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scheduler.records.generate",
        description=f"Write {OUTPUT.name} (the record dataclasses) from schemas/*.avsc.",
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the output would change")
    args = ap.parse_args(argv)
    text = generate()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    if args.check:
        if text != current:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True),
                f"{OUTPUT.name} (committed)", f"{OUTPUT.name} (from schemas/)",
            ))
            print(f"records-check: {OUTPUT} is stale: run python -m scheduler.records.generate",
                  file=sys.stderr)
            return 1
        print("records-check: OK", file=sys.stderr)
        return 0
    if text != current:
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
