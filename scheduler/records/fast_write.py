"""A generated Avro binary writer per record type: the body fastavro's ``schemaless_writer`` writes,
straight from the dataclass (no dict per record, no walk of the parsed schema per field).

Each writer is flat Python code generated once from the expanded schema (as the codec's
``to_avro`` is), one statement per field. fastavro took 12.7 µs to write a ``Schedule`` (170 B,
mostly optional fields), the processor writes three such records for every command and every
completion, the API one command per request: docs/decisions.md, "A generated writer".

Contract: ``write(record)`` returns exactly fastavro's bytes for every record it accepts
(tests/test_records.py checks it against fastavro over generated records of every type), and
raises for anything it does not write exactly so: a value not of the field's exact type (a
``str`` or a ``StrEnum`` member for a string, ``bytes`` or ``bytearray`` for bytes, an ``int``
but no ``bool`` for an int or a long, ``True``/``False`` for a boolean, a ``float`` or an
``int`` for a double, a ``tuple`` or ``list`` for an array), an int over 32 bits, a long over 64,
an unknown enum symbol: the codec then writes through fastavro, which names the problem or writes
it as before. Schemas with a union other than ``["null", T]`` get
no writer (:func:`writer_for` returns None): fastavro's union matching is not worth copying.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from scheduler.native import load
from scheduler.records.fast_gen import SchemaCode, Unsupported

# Avro's int and long bounds (fastavro writes any Python int; other readers reject one past them).
# scheduler.records.avro_fast keeps its own copy: a compiled module imports nothing of ours.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE = struct.Struct("<d").pack
# The project's varint writer (as scheduler.records.dispatch takes it; compiled when built). It
# writes any int: the generated code refuses one past the field's bounds before calling it (an int
# over 32 bits, a long over 64: fastavro would not write them so), a length never is.
_avro_long: Callable[[int], bytes] = load("scheduler.records.avro_fast").avro_long


def _refuse() -> None:
    raise TypeError("not a value the generated writer writes as fastavro does")


class _Gen(SchemaCode):
    """Generates one function per record, ``_w_<Name>(r, out)``, appending r's body to ``out``."""

    def __init__(self) -> None:
        super().__init__({
            "_long": _avro_long, "_double": _DOUBLE, "_refuse": _refuse, "_StrEnum": StrEnum,
        })

    def record(self, t: dict[str, Any]) -> str:
        """The name of the function writing record ``t`` (generated on first use)."""
        fn = "_w_" + self.define(t)
        if fn in self.done:
            return fn
        self.done.add(fn)
        body: list[str] = []
        for f in t["fields"]:
            v = self.var()
            body.append(f"{v} = r.{f['name']}")
            body += self.value(f["type"], v)
        self.compile(fn, "r, out", body)
        return fn

    def value(self, t: Any, v: str) -> list[str]:
        """Statements appending the encoding of the value in variable ``v`` of type ``t``."""
        t = self.resolve(t)
        if isinstance(t, list):
            inner = self.value(self.optional(t), v)
            return [f"if {v} is None:", "    out += b'\\x00'", "else:", "    out += b'\\x02'",
                    *(f"    {line}" for line in inner)]
        if isinstance(t, str):
            return self._primitive(t, v)
        kind = t["type"]
        if kind == "record":
            return [f"{self.record(t)}({v}, out)"]
        if kind == "enum":
            table = "_e_" + self.define(t)
            self.env[table] = {s: _avro_long(i) for i, s in enumerate(t["symbols"])}
            return [f"out += {table}[{v}]"]
        if kind == "array":
            item = self.var()
            inner = self.value(t["items"], item)
            return [f"if {v}.__class__ is not tuple and {v}.__class__ is not list:", "    _refuse()",
                    f"if {v}:", f"    out += _long(len({v}))", f"    for {item} in {v}:",
                    *(f"        {line}" for line in inner), "out += b'\\x00'"]
        if isinstance(kind, str) and kind not in ("map", "fixed") and "logicalType" not in t:
            return self._primitive(kind, v)
        raise Unsupported(f"type {kind}")

    @staticmethod
    def _primitive(t: str, v: str) -> list[str]:
        # Each value is checked for its exact type, stricter than fastavro: what passes, fastavro
        # would accept, in a union too, and write the same; the rest raises and goes to fastavro.
        # (A value with __radd__ or a length in elements, not bytes, would corrupt the body.)
        if t == "string":
            return [f"if {v}.__class__ is not str and not isinstance({v}, _StrEnum):", "    _refuse()",
                    f"{v} = str.encode({v})", f"out += _long(len({v}))", f"out += {v}"]
        if t == "bytes":
            return [f"if {v}.__class__ is not bytes and {v}.__class__ is not bytearray:", "    _refuse()",
                    f"out += _long(len({v}))", f"out += {v}"]
        if t in ("long", "int"):  # the bounds inline: a call less per number, ~20 in a Schedule
            low, high = (LONG_MIN, LONG_MAX) if t == "long" else (INT_MIN, INT_MAX)
            return [f"if {v}.__class__ is not int or not {low} <= {v} <= {high}:", "    _refuse()",
                    f"out += _long({v})"]
        if t == "boolean":
            return [f"if {v} is True:", "    out += b'\\x01'", f"elif {v} is False:", "    out += b'\\x00'",
                    "else:", "    _refuse()"]
        if t == "double":
            return [f"if {v}.__class__ is not float and {v}.__class__ is not int:", "    _refuse()",
                    f"out += _double({v})"]
        if t == "null":
            return [f"if {v} is not None:", "    _refuse()"]
        raise Unsupported(f"type {t}")


def writer_for(expanded: dict[str, Any]) -> Callable[[Any], bytes] | None:
    """The body writer of the top-level record schema ``expanded`` (named types inline at first
    use), or None when it holds a construct left to fastavro."""
    gen = _Gen()
    try:
        fn = gen.record(expanded)
    except Unsupported:
        return None
    write_body = gen.env[fn]

    def write(record: Any) -> bytes:
        out = bytearray()
        write_body(record, out)
        return bytes(out)

    return write
