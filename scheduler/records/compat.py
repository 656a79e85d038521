"""Schema compatibility check: ``python -m scheduler.records.compat`` (``make schemas-check``).

Every top-level record in ``schemas/`` is compared with each of its released
versions in ``schemas/history/<Name>.v<N>.avsc`` in both directions, by the
Avro specification's schema-resolution rules:

* the current reader must read data written with the released version
  (e.g. a field added without a default, an incompatible type change);
* a reader of the released version must read data written with the current
  schema (e.g. a field removed that the old reader has no default for, an
  enum symbol added while the old enum has no default).

Problems are printed one per line (schema, version, field, what) and the exit
status is 1. A compatible change that is not released yet is reported as a
note; ``--release`` freezes each changed or new schema as the next
``v<N>`` (self-contained, so later changes to shared types do not alter it) and
must be run, and committed, before records written with a changed schema
leave the building -- readers find writer schemas by fingerprint in the
history folder.

Supported constructs: records, fields and defaults, unions, enums (with
enum defaults), fixed, arrays, maps, primitives with the Avro promotions
(int -> long/float/double, long -> float/double, float -> double,
string <-> bytes). Aliases are not supported (a renamed field is a removed
field plus an added one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler.records.schemas import (
    NAMED,
    PRIMITIVES,
    LoadedSchema,
    _walk_defs,
    expand,
    history_dir,
    history_names,
    load_definitions,
    load_expanded,
    load_history,
    schemas_dir,
)
from scheduler.records.types import TOP_LEVEL

Json = Any
_STRUCTURED = NAMED | {"array", "map"}
_PROMOTIONS = {
    ("int", "long"), ("int", "float"), ("int", "double"),
    ("long", "float"), ("long", "double"), ("float", "double"),
    ("string", "bytes"), ("bytes", "string"),
}


def _defs_of(schema: Json) -> dict[str, Json]:
    out: dict[str, Json] = {}
    _walk_defs(schema, None, out, "schema")
    return out


def _kind(s: Json) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    t = s["type"]
    return t if isinstance(t, str) else "union"


def _label(s: Json) -> str:
    k = _kind(s)
    return f"{k} {s['name']}" if isinstance(s, dict) and k in NAMED else k


class _Checker:
    def __init__(self, reader: Json, writer: Json) -> None:
        self.rdefs = _defs_of(reader)
        self.wdefs = _defs_of(writer)
        self.active: set[tuple[int, int]] = set()  # record pairs being checked (recursive types)
        self.problems: list[str] = []

    def resolve(self, s: Json, defs: dict[str, Json]) -> Json:
        while True:
            if isinstance(s, str) and s not in PRIMITIVES:
                if s not in defs:
                    raise ValueError(f"unknown named type {s!r}")
                s = defs[s]
            elif isinstance(s, dict) and not isinstance(s["type"], str):
                s = s["type"]  # {"type": [...]} or {"type": {...}}
            elif isinstance(s, dict) and s["type"] not in _STRUCTURED | PRIMITIVES:
                s = s["type"]  # {"type": "SomeName"}
            else:
                return s

    def matches(self, r: Json, w: Json) -> bool:
        """Would a reader branch ``r`` be chosen for writer ``w`` (same kind and name, or a promotion)?"""
        rk, wk = _kind(r), _kind(w)
        if rk in NAMED or wk in NAMED:
            return rk == wk and r["name"].rpartition(".")[2] == w["name"].rpartition(".")[2]
        return rk == wk or (wk, rk) in _PROMOTIONS

    def check(self, r: Json, w: Json, path: str) -> None:
        """Record in ``problems`` why data written as ``w`` cannot be read as ``r`` (at ``path``)."""
        r, w = self.resolve(r, self.rdefs), self.resolve(w, self.wdefs)
        rk, wk = _kind(r), _kind(w)
        if wk == "union":
            self._writer_union(r, rk, w, path)
        elif rk == "union":
            self._reader_union(r, w, path)
        elif not self.matches(r, w):
            self.problems.append(f"{path}: type changed from {_label(w)} to {_label(r)}")
        elif rk in ("record", "error"):
            self._record(r, w, path)
        elif rk == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and "default" not in r:
                self.problems.append(
                    f"{path}: enum {r['name']} lacks symbol(s) {', '.join(missing)} and has no default"
                )
        elif rk == "fixed":
            if r["size"] != w["size"]:
                self.problems.append(f"{path}: fixed {r['name']} size {w['size']} changed to {r['size']}")
        elif rk == "array":
            self.check(r["items"], w["items"], f"{path}[]")
        elif rk == "map":
            self.check(r["values"], w["values"], f"{path}{{}}")

    def _writer_union(self, r: Json, rk: str, w: Json, path: str) -> None:
        # Every branch the writer may have chosen must be readable.
        for branch in w:
            b = self.resolve(branch, self.wdefs)
            if rk != "union" and not self.matches(r, b):
                self.problems.append(f"{path}: writer union branch {_label(b)} cannot be read as {_label(r)}")
            else:
                self.check(r, b, path)

    def _reader_union(self, r: Json, w: Json, path: str) -> None:
        # The first reader branch that matches the writer's type is the one used.
        for branch in r:
            if self.matches(self.resolve(branch, self.rdefs), w):
                self.check(branch, w, path)
                return
        self.problems.append(f"{path}: writer type {_label(w)} is not in the reader's union")

    def _record(self, r: Json, w: Json, path: str) -> None:
        key = (id(r), id(w))
        if key in self.active:
            return  # a recursive type: this pair is already being checked further up
        self.active.add(key)
        wfields = {f["name"]: f for f in w["fields"]}
        for f in r["fields"]:
            if f["name"] in wfields:
                self.check(f["type"], wfields[f["name"]]["type"], f"{path}.{f['name']}")
            elif "default" not in f:
                self.problems.append(
                    f"{path}.{f['name']}: field missing from the written data and has no default"
                )
        self.active.discard(key)


def compatibility_problems(reader: Json, writer: Json) -> list[str]:
    """Why a reader with schema ``reader`` cannot read data written with ``writer`` ([] if it can).

    Both schemas self-contained (named types defined at first use, full names
    elsewhere), as :func:`scheduler.records.schemas.expand` makes them. Each
    problem starts with the field path (``Schedule.spec.misfire``).
    """
    c = _Checker(reader, writer)
    root = c.resolve(reader, c.rdefs)
    name = root["name"].rpartition(".")[2] if isinstance(root, dict) and "name" in root else _kind(root)
    c.check(reader, writer, name)
    return c.problems


def check(folder: Path | None = None) -> tuple[list[str], list[str]]:
    """(problems, notes) for the schemas in ``folder`` (default: the project's ``schemas/``)."""
    folder = folder or schemas_dir()
    problems: list[str] = []
    notes: list[str] = []
    try:
        defs, _tops = load_definitions(folder)
    except ValueError as exc:
        return [str(exc)], notes
    names = sorted({c.AVRO_NAME.rpartition(".")[2] for c in TOP_LEVEL} | history_names(folder))
    for short in names:
        full = next((n for n, d in defs.items() if n.rpartition(".")[2] == short and d["type"] == "record"),
                    None)
        try:
            released = load_history(short, folder)
        except (ValueError, OSError) as exc:
            problems.append(f"{short}: cannot load a released version: {exc}")
            continue
        if full is None:
            if released:
                problems.append(f"{short}: schema removed, but v{released[-1].version} was released")
            else:
                problems.append(f"{short}: no schema in {folder}")
            continue
        try:
            current = load_expanded(expand(full, defs), None)
        except Exception as exc:
            problems.append(f"{short}: invalid schema: {exc}")
            continue
        for old in released:
            v = f"v{old.version}"
            for p in compatibility_problems(current.expanded, old.expanded):
                problems.append(f"{short} (current reads {v} data): {p}")
            for p in compatibility_problems(old.expanded, current.expanded):
                problems.append(f"{short} ({v} reader reads current data): {p}")
        if not released:
            notes.append(f"{short}: new, not released yet (run with --release)")
        elif released[-1].fingerprint != current.fingerprint:
            notes.append(
                f"{short}: changed since v{released[-1].version}, compatible, "
                "not released yet (run with --release)"
            )
    return problems, notes


def release(folder: Path | None = None) -> list[Path]:
    """Write ``history/<Name>.v<N+1>.avsc`` for every new or changed top-level schema; return the files."""
    folder = folder or schemas_dir()
    defs, _tops = load_definitions(folder)
    written: list[Path] = []
    hdir = history_dir(folder)
    for cls in TOP_LEVEL:
        short = cls.AVRO_NAME.rpartition(".")[2]
        current: LoadedSchema = load_expanded(expand(cls.AVRO_NAME, defs), None)
        released = load_history(short, folder)
        if released and released[-1].fingerprint == current.fingerprint:
            continue
        hdir.mkdir(parents=True, exist_ok=True)
        path = hdir / f"{short}.v{(released[-1].version or 0) + 1 if released else 1}.avsc"
        path.write_text(json.dumps(current.expanded, indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scheduler.records.compat",
        description="Fail if a schema change would break a reader of a released version (schemas/history/).",
    )
    ap.add_argument("--schemas", type=Path, default=None, help="schema folder (default: the project's)")
    ap.add_argument("--release", action="store_true",
                    help="after a clean check, freeze new and changed schemas as the next history version")
    args = ap.parse_args(argv)
    problems, notes = check(args.schemas)
    for p in problems:
        print(p)
    if problems:
        print(f"schemas-check: {len(problems)} compatibility problem(s)", file=sys.stderr)
        return 1
    if args.release:
        for path in release(args.schemas):
            print(f"released {path}")
        return 0
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    print("schemas-check: OK", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
