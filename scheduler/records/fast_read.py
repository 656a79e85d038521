"""A generated Avro binary reader per record type, for bodies written with its current schema:
the record fastavro's ``schemaless_reader`` and the codec's ``from_avro`` would build, read
straight into the dataclass (no dict per record, no walk of the parsed schema per field).

Generated once per record type at import, like :mod:`scheduler.records.fast_write`, from the
same expanded schema: one block of statements per field over a byte buffer and an offset. fastavro
took 18.8 µs to read a ``Schedule`` or a ``ScheduleCommand``; the processor reads every command,
the history indexer three records for every change (docs/decisions.md, "A generated reader").

Contract: ``read(data, start)`` returns ``(record, end)`` equal to what fastavro reads for every
body it accepts (tests/test_records.py: fastavro is the oracle, on records drawn from the schemas
and on truncated or altered bodies), and raises for whatever it does not read exactly so (a
truncated body, a bad union or enum index, a boolean byte other than 0 or 1, bad UTF-8, an
overlong varint): the codec then reads through fastavro, which names the problem. Bodies written
with a released older schema are resolved by fastavro as before (the reader is for the current
one only); unions other than ``["null", T]`` get no reader.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from scheduler.records.fast_gen import SchemaCode, Unsupported

_DOUBLE = struct.Struct("<d").unpack_from


class _Corrupt(Exception):
    """The body is not what the generated reader reads exactly as fastavro does."""


def _long_rest(b: Any, i: int, x: int) -> tuple[int, int]:
    """The rest of a varint whose first byte ``x`` (>= 0x80) was read; ``i`` is past it. (Not
    avro_fast.read_long: that one takes ``bytes`` only, compiled, and keeps varints over 64 bits.)"""
    u, shift = x & 0x7F, 7
    while True:
        x = b[i]
        i += 1
        u |= (x & 0x7F) << shift
        if x < 0x80:
            if u >> 64:  # fastavro keeps the low 64 bits of it
                raise _Corrupt("varint over 64 bits")
            return (u >> 1) ^ -(u & 1), i
        shift += 7
        if shift > 63:
            raise _Corrupt("varint over 10 bytes")


def _corrupt(what: str) -> None:
    raise _Corrupt(what)


class _Gen(SchemaCode):
    """Generates one function per record, ``_r_<Name>(b, i) -> (record, i)``."""

    def __init__(self, classes: dict[str, type]) -> None:
        super().__init__({"_long_rest": _long_rest, "_double": _DOUBLE, "_corrupt": _corrupt})
        self.classes = classes

    def record(self, t: dict[str, Any]) -> str:
        name = str(t["name"])
        fn = "_r_" + self.define(t)
        if fn in self.done:
            return fn
        self.done.add(fn)
        cls = self.classes.get(name)
        if cls is None:
            raise Unsupported(f"no dataclass for record {name}")
        self.env[f"_c_{fn}"] = cls
        body, names = ["n = len(b)"], []
        for f in t["fields"]:
            v = self.var()
            names.append(f"{f['name']}={v}")  # the records are keyword-only dataclasses
            body += self.value(f["type"], v)
        body.append(f"return _c_{fn}({', '.join(names)}), i")
        self.compile(fn, "b, i", body)
        return fn

    def _long(self, v: str) -> list[str]:
        return ["x = b[i]", "i += 1", "if x < 0x80:", f"    {v} = (x >> 1) ^ -(x & 1)", "else:",
                f"    {v}, i = _long_rest(b, i, x)"]

    def value(self, t: Any, v: str) -> list[str]:
        """Statements reading a value of type ``t`` at ``i`` into variable ``v`` (``i`` advanced)."""
        t = self.resolve(t)
        if isinstance(t, list):
            inner = self.value(self.optional(t), v)
            return ["x = b[i]", "i += 1", "if x == 0:", f"    {v} = None", "elif x == 2:",
                    *(f"    {line}" for line in inner), "else:", "    _corrupt('union index')"]
        if isinstance(t, str):
            return self._primitive(t, v)
        kind = t["type"]
        if kind == "record":
            return [f"{v}, i = {self.record(t)}(b, i)"]
        if kind == "enum":
            table = "_s_" + self.define(t)
            self.env[table] = tuple(t["symbols"])
            return [*self._long("k"), "if k < 0:", "    _corrupt('enum index')", f"{v} = {table}[k]"]
        if kind == "array":
            item, items, c = self.var(), self.var(), self.var()
            inner = self.value(t["items"], item)
            return [f"{items} = []", "while True:", *(f"    {s}" for s in self._long(c)),
                    f"    if {c} == 0:", "        break",
                    f"    if {c} < 0:",  # a block with its size in bytes (other writers)
                    f"        {c} = -{c}", *(f"        {s}" for s in self._long("_size")),
                    f"    for _ in range({c}):", *(f"        {s}" for s in inner),
                    f"        {items}.append({item})", f"{v} = tuple({items})"]
        if isinstance(kind, str) and kind not in ("map", "fixed") and "logicalType" not in t:
            return self._primitive(kind, v)
        raise Unsupported(f"type {kind}")

    def _primitive(self, t: str, v: str) -> list[str]:
        if t in ("long", "int"):
            return self._long(v)
        if t in ("string", "bytes"):
            conv = "str(b[i:e], 'utf-8')" if t == "string" else "bytes(b[i:e])"
            return [*self._long("m"), "e = i + m", "if m < 0 or e > n:", "    _corrupt('length')",
                    f"{v} = {conv}", "i = e"]
        if t == "boolean":
            return ["x = b[i]", "i += 1", "if x > 1:", "    _corrupt('boolean')", f"{v} = x == 1"]
        if t == "double":
            return [f"{v} = _double(b, i)[0]", "i += 8"]
        if t == "null":
            return [f"{v} = None"]
        raise Unsupported(f"type {t}")


def reader_for(
    expanded: dict[str, Any], classes: dict[str, type]
) -> Callable[[Any, int], tuple[Any, int]] | None:
    """The body reader of the top-level record schema ``expanded`` into the dataclasses
    ``classes`` (by record name), or None when the schema holds a construct left to fastavro.
    The reader raises for any body it does not read exactly as fastavro does."""
    gen = _Gen(classes)
    try:
        fn = gen.record(expanded)
    except Unsupported:
        return None
    read: Callable[[Any, int], tuple[Any, int]] = gen.env[fn]
    return read
