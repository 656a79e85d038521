"""What the generated Avro writer and reader (:mod:`~scheduler.records.fast_write`,
:mod:`~scheduler.records.fast_read`) share: the walk of an expanded schema into flat Python code."""

from __future__ import annotations

from typing import Any


class Unsupported(Exception):
    """A schema construct the generated code leaves to fastavro."""


class SchemaCode:
    """Base of a generator: unique variable names, named types (a record or enum is defined inline
    at its first use, then referred to by its short or full name), the one union it handles, and
    the namespace the generated functions are compiled into (``env``)."""

    def __init__(self, env: dict[str, Any]) -> None:
        self.env = env
        self.named: dict[str, Any] = {}  # full and short names -> their definition
        self.done: set[str] = set()  # the record functions generated (or being generated)
        self._n = 0

    def var(self) -> str:
        self._n += 1
        return f"v{self._n}"

    def define(self, t: dict[str, Any]) -> str:
        """Remember the named type ``t``; returns its name made a Python identifier."""
        name, ns = str(t["name"]), t.get("namespace")
        self.named[name] = t
        if ns and "." not in name:
            self.named[f"{ns}.{name}"] = t
        return name.replace(".", "_")

    def resolve(self, t: Any) -> Any:
        """``t``, or the definition it names."""
        return self.named[t] if isinstance(t, str) and t in self.named else t

    @staticmethod
    def optional(t: list[Any]) -> Any:
        """The ``T`` of a union ``["null", T]``; any other union is left to fastavro."""
        if len(t) != 2 or t[0] != "null" or isinstance(t[1], list):
            raise Unsupported(f"union {t}")
        return t[1]

    def compile(self, fn: str, args: str, body: list[str]) -> None:
        """Define ``fn(args)`` with ``body`` (statements) in ``env``: once per record type."""
        src = f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body or ["pass"])
        exec(src, self.env)
