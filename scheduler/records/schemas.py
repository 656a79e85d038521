"""Loading ``schemas/*.avsc``: named-type registry, expansion, canonical form, fingerprints.

Each ``schemas/<Name>.avsc`` defines one named type (and possibly named types
nested inline in it); a file may refer to a type defined in another file by
name (``"ScheduleSpec"``, ``"ScheduleState"``...). :func:`load_definitions`
reads the folder into a registry of full name -> JSON definition, and
:func:`expand` turns a top-level record into a *self-contained* schema in which
every named type is defined inline at its first use and referred to by full
name afterwards -- exactly the shape the Avro specification's Parsing
Canonical Form (PCF) needs, so the fingerprint is the one any other Avro
implementation computes for the same schema. (fastavro's ``expand=True``
inlines every use, which is not a valid schema when a type is used twice.)

``schemas/history/<Name>.v<N>.avsc`` hold the released versions of every
top-level record, already expanded (a released version must not change when a
shared type changes later). Readers use them as writer schemas, so data
written by any released version stays decodable.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from scheduler.resources import resource_dir

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
MAGIC = b"\xc3\x01"
_HISTORY_FILE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[0-9]+)\.avsc$")

Json = Any


def schemas_dir() -> Path:
    return resource_dir("schemas")


def history_dir(base: Path | None = None) -> Path:
    return (base or schemas_dir()) / "history"


def fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _walk_defs(schema: Json, namespace: str | None, out: dict[str, Json], where: str) -> None:
    """Collect every named type defined in ``schema`` (full name -> definition)."""
    if isinstance(schema, list):
        for branch in schema:
            _walk_defs(branch, namespace, out, where)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in NAMED:
        ns = schema.get("namespace", namespace)
        full = fullname(schema["name"], ns)
        if full in out:
            raise ValueError(f"{where}: named type {full} is defined twice")
        out[full] = schema
        ns = full.rpartition(".")[0] or None
        if kind in ("record", "error"):
            for f in schema["fields"]:
                _walk_defs(f["type"], ns, out, where)
    elif kind == "array":
        _walk_defs(schema["items"], namespace, out, where)
    elif kind == "map":
        _walk_defs(schema["values"], namespace, out, where)
    elif isinstance(kind, dict | list):
        _walk_defs(kind, namespace, out, where)


def load_definitions(folder: Path | None = None) -> tuple[dict[str, Json], dict[str, str]]:
    """Read ``folder/*.avsc``: (full name -> definition, full name of each file's type -> file stem)."""
    folder = folder or schemas_dir()
    defs: dict[str, Json] = {}
    tops: dict[str, str] = {}
    for path in sorted(folder.glob("*.avsc")):
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(schema, dict) or schema.get("type") not in NAMED:
            raise ValueError(f"{path}: must define one named type (record, enum or fixed)")
        _walk_defs(schema, None, defs, str(path))
        tops[fullname(schema["name"], schema.get("namespace"))] = path.stem
    return defs, tops


def expand(schema: Json, defs: dict[str, Json]) -> Json:
    """Self-contained copy of ``schema``: named types defined at first use, full names throughout."""
    return _Expander(defs).go(schema, None)


class _Expander:
    """One expansion: remembers the named types already defined (later uses are by full name)."""

    def __init__(self, defs: dict[str, Json]) -> None:
        self.defs = defs
        self.seen: set[str] = set()

    def go(self, s: Json, namespace: str | None) -> Json:
        if isinstance(s, str):
            return s if s in PRIMITIVES else self._reference(s, namespace)
        if isinstance(s, list):
            return [self.go(b, namespace) for b in s]
        if not isinstance(s, dict):
            raise ValueError(f"not a schema: {s!r}")
        kind = s.get("type")
        if kind in NAMED:
            return self._definition(s, kind, namespace)
        if kind == "array":
            return {**s, "items": self.go(s["items"], namespace)}
        if kind == "map":
            return {**s, "values": self.go(s["values"], namespace)}
        if isinstance(kind, str) and kind in PRIMITIVES:
            return dict(s)
        if isinstance(kind, str | list | dict):
            return self.go(kind, namespace)
        raise ValueError(f"not a schema: {s!r}")

    def _reference(self, s: str, namespace: str | None) -> Json:
        """A named type used by name: its definition at the first use, its full name after."""
        full = fullname(s, namespace)
        if full not in self.defs and s in self.defs:
            full = s
        if full in self.seen:
            return full
        if full not in self.defs:
            raise ValueError(f"unknown named type {s!r} (looked for {full})")
        return self.go(self.defs[full], full.rpartition(".")[0] or None)

    def _definition(self, s: dict[str, Json], kind: str, namespace: str | None) -> Json:
        full = fullname(s["name"], s.get("namespace", namespace))
        if full in self.seen:
            return full
        self.seen.add(full)
        out = {k: copy.deepcopy(v) for k, v in s.items() if k not in ("name", "namespace", "fields")}
        out["name"] = full
        if kind in ("record", "error"):
            ns = full.rpartition(".")[0] or None
            out["fields"] = [{**copy.deepcopy(f), "type": self.go(f["type"], ns)} for f in s["fields"]]
        return out


@dataclass(frozen=True, slots=True)
class LoadedSchema:
    """One version of one top-level record schema."""

    name: str  # full Avro name, e.g. ksched.v1.Occurrence
    version: int | None  # released version number, None for the working copy in schemas/
    expanded: Json  # self-contained JSON, docs and defaults kept
    parsed: Json  # fastavro-parsed form of ``expanded``
    canonical: str  # Parsing Canonical Form
    fingerprint: bytes  # 8 bytes, CRC-64-AVRO of ``canonical``, little-endian (as on the wire)

    @property
    def header(self) -> bytes:
        return MAGIC + self.fingerprint


def load_expanded(expanded: Json, version: int | None) -> LoadedSchema:
    parsed = parse_schema(copy.deepcopy(expanded), named_schemas={})
    canonical = to_parsing_canonical_form(parsed)
    # fastavro renders CRC-64-AVRO as the hex of the little-endian bytes: exactly the wire order.
    fp = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
    return LoadedSchema(expanded["name"], version, expanded, parsed, canonical, fp)


def load_history(name: str, folder: Path | None = None) -> list[LoadedSchema]:
    """Released versions of the record ``name`` (short or full), oldest first."""
    short = name.rpartition(".")[2]
    found: list[LoadedSchema] = []
    hdir = history_dir(folder)
    if not hdir.is_dir():
        return found
    for path in hdir.glob(f"{short}.v*.avsc"):
        m = _HISTORY_FILE.match(path.name)
        if not m or m["name"] != short:
            continue
        expanded = json.loads(path.read_text(encoding="utf-8"))
        found.append(load_expanded(expanded, int(m["version"])))
    found.sort(key=lambda s: s.version or 0)
    return found


def history_names(folder: Path | None = None) -> set[str]:
    hdir = history_dir(folder)
    if not hdir.is_dir():
        return set()
    return {m["name"] for p in hdir.glob("*.avsc") if (m := _HISTORY_FILE.match(p.name))}
