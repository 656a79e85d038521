"""Avro single-object encoding of the ksched records (fastavro; schemas parsed once, at import).

Wire format (Avro specification, "Single-object encoding")::

    C3 01 | CRC-64-AVRO of the writer schema's Parsing Canonical Form (8 bytes, little-endian) | body

The body is the plain Avro binary encoding of the record. The fingerprint names
the writer schema: the current one in ``schemas/`` or a released one in
``schemas/history/``; data written with an older version is resolved against
the current (reader) schema, so new fields take their defaults.

A value starting with ``00`` is in the Confluent wire format instead (``00`` | 4-byte schema id |
the same body; :mod:`scheduler.records.framing`): the id is resolved to a fingerprint through
the schema registry (:mod:`scheduler.records.schema_ids`), so every decoder reads both framings.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar, overload

from fastavro import schemaless_reader, schemaless_writer
from fastavro.validation import ValidationError, validate

from scheduler.records import schema_ids
from scheduler.records.errors import RecordDecodeError, RecordEncodeError
from scheduler.records.fast_read import reader_for
from scheduler.records.fast_write import INT_MAX, INT_MIN, writer_for
from scheduler.records.framing import CONFLUENT_HEADER_LEN
from scheduler.records.schemas import (
    MAGIC,
    LoadedSchema,
    expand,
    load_definitions,
    load_expanded,
    load_history,
)
from scheduler.records.types import (
    NESTED,
    TOP_LEVEL,
    AttemptReport,
    AttemptReports,
    OccurrenceEvent,
    OccurrenceEvents,
    Record,
    ScheduleCommand,
)

R = TypeVar("R", bound=Record)

_HEADER_LEN = 10
_CLASSES: dict[str, type] = {c.AVRO_NAME: c for c in (*TOP_LEVEL, *NESTED)}
_COMMAND_TOPIC: tuple[type[Record], ...] = (ScheduleCommand, AttemptReport, AttemptReports)  # its records


@dataclass(frozen=True, slots=True)
class _Writer:
    schema: LoadedSchema
    to_avro: Callable[[Any], dict[str, Any]]
    fast: Callable[[Any], bytes] | None  # the generated writer (fast_write), None: fastavro's only


@dataclass(frozen=True, slots=True)
class _Reader:
    cls: type[Record]
    name: str
    version: str  # "current" or "v<N>"
    writer: Any  # parsed writer schema
    reader: Any  # parsed reader schema, None when it is the writer schema
    from_avro: Callable[[dict[str, Any]], Any]
    fast: Callable[[Any, int], tuple[Any, int]] | None  # the generated reader (fast_read), current only


def _record_name(t: Any) -> str | None:
    if isinstance(t, dict) and t.get("type") in ("record", "error"):
        return str(t["name"])
    if isinstance(t, str) and t in _CLASSES:
        return t
    return None


def _check_int(name: str, value: Any) -> Any:
    raise ValueError(f"field {name}: {value!r} does not fit an Avro int (32 bits)")


def _is_optional(t: Any) -> bool:
    return isinstance(t, list) and len(t) == 2 and t[0] == "null"


def _is_array(t: Any) -> bool:
    return isinstance(t, dict) and t.get("type") == "array"


def _converters(
    name: str, schema: Any, built: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]]
) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(dataclass -> dict, dict -> dataclass) for the record ``name``, generated once as flat code."""
    if name in built:
        return built[name]
    if not isinstance(schema, dict):  # a by-name reference always follows the inline definition
        raise RuntimeError(f"record {name} referenced before its definition")
    cls = _CLASSES[name]
    avro_fields = [f["name"] for f in schema["fields"]]
    py_fields = [f.name for f in fields(cls)]
    if avro_fields != py_fields:
        raise RuntimeError(
            f"{cls.__name__} fields {py_fields} != schema {name} fields {avro_fields}"
            " (stale records/_generated.py? run python -m scheduler.records.generate)"
        )
    env: dict[str, Any] = {"_cls": cls}
    to_parts: list[str] = []
    from_parts: list[str] = []
    for i, f in enumerate(schema["fields"]):
        n, t = f["name"], f["type"]
        sub: str | None
        if (sub := _record_name(t)) is not None:
            env[f"_t{i}"], env[f"_f{i}"] = _converters(sub, t, built)
            to_parts.append(f"{n!r}: _t{i}(r.{n})")
            from_parts.append(f"{n}=_f{i}(d[{n!r}])")
        elif _is_optional(t) and (sub := _record_name(t[1])) is not None:
            env[f"_t{i}"], env[f"_f{i}"] = _converters(sub, t[1], built)
            to_parts.append(f"{n!r}: None if r.{n} is None else _t{i}(r.{n})")
            from_parts.append(f"{n}=None if d[{n!r}] is None else _f{i}(d[{n!r}])")
        elif _is_array(t) and (sub := _record_name(t["items"])) is not None:
            env[f"_t{i}"], env[f"_f{i}"] = _converters(sub, t["items"], built)
            to_parts.append(f"{n!r}: [_t{i}(x) for x in r.{n}]")
            from_parts.append(f"{n}=tuple([_f{i}(x) for x in d[{n!r}]])")
        elif _is_array(t):
            to_parts.append(f"{n!r}: list(r.{n})")
            from_parts.append(f"{n}=tuple(d[{n!r}])")
        elif t == "int":  # fastavro writes any Python int as a varint; other readers reject > 32 bits
            env["_int"] = _check_int
            to_parts.append(f"{n!r}: r.{n} if {INT_MIN} <= r.{n} <= {INT_MAX} else _int({n!r}, r.{n})")
            from_parts.append(f"{n}=d[{n!r}]")
        elif t == ["null", "int"]:
            env["_int"] = _check_int
            to_parts.append(
                f"{n!r}: r.{n} if r.{n} is None or {INT_MIN} <= r.{n} <= {INT_MAX} else _int({n!r}, r.{n})"
            )
            from_parts.append(f"{n}=d[{n!r}]")
        else:
            to_parts.append(f"{n!r}: r.{n}")
            from_parts.append(f"{n}=d[{n!r}]")
    to_avro = eval("lambda r: {" + ", ".join(to_parts) + "}", env)  # generated once per record type
    if all(part == f"{n}=d[{n!r}]" for part, n in zip(from_parts, avro_fields, strict=True)):
        from_avro = eval("lambda d: _cls(**d)", env)  # flat record: the fastest construction
    else:
        from_avro = eval("lambda d: _cls(" + ", ".join(from_parts) + ")", env)
    built[name] = (to_avro, from_avro)
    return built[name]


class Codecs:
    """Encoders and decoders for every top-level record, built once from a schema folder.

    The module-level :func:`encode` / :func:`decode` use the project's
    ``schemas/``; tests build their own instance over a modified copy.
    """

    def __init__(self, folder: Path | None = None) -> None:
        defs, _tops = load_definitions(folder)
        self._writers: dict[type, _Writer] = {}
        self._readers: dict[bytes, _Reader] = {}
        built: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}
        for cls in TOP_LEVEL:
            if cls.AVRO_NAME not in defs:
                raise RuntimeError(f"no schema for {cls.AVRO_NAME} in schemas/")
            current = load_expanded(expand(cls.AVRO_NAME, defs), None)
            to_avro, from_avro = _converters(cls.AVRO_NAME, current.expanded, built)
            self._writers[cls] = _Writer(current, to_avro, writer_for(current.expanded))
            for old in [current, *load_history(cls.AVRO_NAME, folder)]:
                if old.fingerprint in self._readers:
                    continue  # a released version identical to the working copy
                if old.name != cls.AVRO_NAME:
                    raise RuntimeError(f"history file for {cls.AVRO_NAME} v{old.version} names {old.name}")
                same = old is current
                self._readers[old.fingerprint] = _Reader(
                    cls, cls.__name__, "current" if same else f"v{old.version}",
                    old.parsed, None if same else current.parsed, from_avro,
                    reader_for(current.expanded, _CLASSES) if same else None,
                )

    def encode(self, record: Record, header: bytes | None = None) -> bytes:
        """Single-object encoding of ``record`` with the current schema of its type, or its body
        after ``header`` (the Confluent wire format's, :mod:`scheduler.records.framer`).

        Raises :class:`RecordEncodeError` if ``record`` is not a top-level ksched
        record or does not fit its schema.
        """
        w = self._writers.get(type(record))
        if w is None:
            raise RecordEncodeError(f"not a top-level ksched record: {type(record).__qualname__}")
        if w.fast is not None:
            try:
                return (w.schema.header if header is None else header) + w.fast(record)
            except Exception:  # fastavro below writes it as before, or names the problem
                pass
        buf = io.BytesIO()
        buf.write(w.schema.header if header is None else header)
        try:
            schemaless_writer(buf, w.schema.parsed, w.to_avro(record))
        except Exception as exc:
            raise RecordEncodeError(_encode_problem(record, w, exc)) from None
        return buf.getvalue()

    def schema_header(self, cls: type[Record]) -> bytes:
        """The 10-byte single-object header (marker + fingerprint) of ``cls``'s current schema."""
        return self._writers[cls].schema.header

    def current_schema(self, cls: type[Record]) -> LoadedSchema:
        """The current (writer) schema of ``cls``: expanded JSON, parsed form, canonical form, fingerprint."""
        return self._writers[cls].schema

    @overload
    def decode(self, data: bytes | bytearray | memoryview, expected: type[R]) -> R: ...
    @overload
    def decode(self, data: bytes | bytearray | memoryview, expected: None = None) -> Record: ...
    def decode(self, data: bytes | bytearray | memoryview, expected: type[Any] | None = None) -> Any:
        """Decode one record (of type ``expected``, when given), single-object encoded or in the
        Confluent wire format (told apart by the first byte, so a topic may hold both).

        Accepts data written with the current schema or any released version in
        ``schemas/history/``; a Confluent schema id is looked up in the schema registry once
        (:mod:`scheduler.records.schema_ids`). Raises :class:`RecordDecodeError`, and nothing else,
        for anything that is not such a record.
        """
        r = self._reader(data)
        if expected is not None and r.cls is not expected:
            name = getattr(expected, "__name__", repr(expected))
            raise RecordDecodeError(f"wrong record type: got {r.name}, expected {name}")
        return _body(data, r)

    def decode_fields(self, data: bytes | bytearray | memoryview, expected: type[Record]) -> dict[str, Any]:
        """Decode like :meth:`decode` but return fastavro's field dict, resolved to the current
        schema, without building the dataclass: for bulk paths (restore) that read a few
        fields of very many records. Raises :class:`RecordDecodeError` as ``decode`` does."""
        r = self._reader(data)
        if r.cls is not expected:
            raise RecordDecodeError(f"wrong record type: got {r.name}, expected {expected.__name__}")
        datum: dict[str, Any] = _datum(data, r)
        return datum

    def decode_command_topic(
        self, data: bytes | bytearray | memoryview
    ) -> ScheduleCommand | AttemptReport | AttemptReports:
        """Decode a ``ksched.commands`` value: a :class:`ScheduleCommand`, an :class:`AttemptReport`
        or an :class:`AttemptReports` (several reports in one record).

        The fingerprint tells them apart; any other record type is a
        :class:`RecordDecodeError`.
        """
        r = self._command_topic_reader(data)
        out = _body(data, r)
        assert isinstance(out, ScheduleCommand | AttemptReport | AttemptReports)
        return out

    def report_fields(self, data: bytes | bytearray | memoryview) -> list[dict[str, Any]] | None:
        """The reports of a ``ksched.commands`` value as field dicts (one for an
        :class:`AttemptReport`, each of an :class:`AttemptReports` in order), or None for a
        :class:`ScheduleCommand`. Any other record is a :class:`RecordDecodeError`: how the
        readers of the commands topic (history, reconciler, demo view) take reports alike."""
        r = self._command_topic_reader(data)
        if r.cls is ScheduleCommand:
            return None
        if r.cls is AttemptReport:
            return [_datum(data, r)]
        return list(_datum(data, r)["reports"])

    def occurrence_events(self, data: bytes | bytearray | memoryview) -> list[OccurrenceEvent]:
        """The events of a ``ksched.occurrence-events`` value: an :class:`OccurrenceEvent`'s one,
        or each of an :class:`OccurrenceEvents` in order. Any other record is a
        :class:`RecordDecodeError`: how every reader of the events topic takes both shapes."""
        r = self._reader(data)
        if r.cls is not OccurrenceEvent and r.cls is not OccurrenceEvents:
            raise RecordDecodeError(
                f"wrong record type: got {r.name}, expected OccurrenceEvent or OccurrenceEvents"
            )
        out = _body(data, r)
        if isinstance(out, OccurrenceEvents):
            return list(out.events)
        assert isinstance(out, OccurrenceEvent)
        return [out]

    def _command_topic_reader(self, data: bytes | bytearray | memoryview) -> _Reader:
        """The reader of ``data``'s header, which must name a record of the commands topic."""
        r = self._reader(data)
        if r.cls not in _COMMAND_TOPIC:
            raise RecordDecodeError(
                f"wrong record type: got {r.name}, expected ScheduleCommand, AttemptReport or AttemptReports"
            )
        return r

    def record_type(self, data: bytes | bytearray | memoryview) -> type[Record]:
        """The record type named by ``data``'s header, without decoding the body."""
        return self._reader(data).cls

    def _reader(self, data: bytes | bytearray | memoryview) -> _Reader:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise RecordDecodeError(f"not bytes: got {type(data).__name__}")
        n = len(data)
        if n and data[0] == 0:  # the Confluent wire format: 00 | schema id | body
            return self._registry_reader(data)
        if n < _HEADER_LEN:
            raise RecordDecodeError(
                f"too short: {n} bytes, a single-object record has a {_HEADER_LEN}-byte header"
            )
        if data[0:2] != MAGIC:
            raise RecordDecodeError(
                f"wrong marker: {bytes(data[0:2]).hex()}, expected c301 (Avro single-object) "
                "or 00 (Confluent wire format)"
            )
        fp = bytes(data[2:_HEADER_LEN])
        r = self._readers.get(fp)
        if r is None:
            raise RecordDecodeError(
                f"unknown schema fingerprint {fp.hex()} (not a current or released ksched schema)"
            )
        return r

    def _registry_reader(self, data: bytes | bytearray | memoryview) -> _Reader:
        if len(data) < CONFLUENT_HEADER_LEN:
            raise RecordDecodeError(
                f"too short: {len(data)} bytes, a Confluent-framed record has a "
                f"{CONFLUENT_HEADER_LEN}-byte header"
            )
        schema_id = int.from_bytes(data[1:CONFLUENT_HEADER_LEN], "big")
        fp = schema_ids.fingerprint(schema_id)  # cached; RecordDecodeError when the registry does not say
        r = self._readers.get(fp)
        if r is None:
            raise RecordDecodeError(
                f"schema id {schema_id} is a schema with fingerprint {fp.hex()} in the registry, "
                "not a current or released ksched schema"
            )
        return r


def _encode_problem(record: Record, w: _Writer, exc: Exception) -> str:
    where = f"{type(record).__name__} does not fit schema {w.schema.name}"
    if isinstance(exc, ValueError) and "does not fit an Avro int" in str(exc):
        return f"{where}: {exc}"
    try:
        validate(asdict(record), w.schema.parsed, raise_errors=True)  # error path only: asdict is fine
    except ValidationError as detail:
        return f"{where}: " + "; ".join(str(e) for e in detail.errors)
    except Exception as detail:
        return f"{where}: {type(detail).__name__}: {detail}"
    return f"{where}: {type(exc).__name__}: {exc}"


def _body_start(data: bytes | bytearray | memoryview) -> int:
    """Where the Avro body starts: after the Confluent header (first byte 00) or the single-object one."""
    return CONFLUENT_HEADER_LEN if data[0] == 0 else _HEADER_LEN


def _body(data: bytes | bytearray | memoryview, r: _Reader) -> Record:
    if r.fast is not None:
        try:
            rec, end = r.fast(data, _body_start(data))
            if end == len(data):
                return rec  # type: ignore[no-any-return]
        except Exception:  # fastavro below reads it as before, or names the problem
            pass
    datum = _datum(data, r)
    try:
        out: Record = r.from_avro(datum)
    except Exception as exc:
        raise RecordDecodeError(f"{r.name} ({r.version} schema): {type(exc).__name__}: {exc}") from None
    return out


def _datum(data: bytes | bytearray | memoryview, r: _Reader) -> Any:
    buf = io.BytesIO(data)
    buf.seek(_body_start(data))
    try:
        datum: Any = schemaless_reader(buf, r.writer, r.reader)
    except Exception as exc:
        raise RecordDecodeError(
            f"{r.name} ({r.version} schema): truncated or corrupt body: {type(exc).__name__}: {exc}"
        ) from None
    end = buf.tell()
    if end != len(data):
        raise RecordDecodeError(
            f"{r.name} ({r.version} schema): {len(data) - end} trailing bytes after the body"
        )
    return datum


_DEFAULT = Codecs()
encode = _DEFAULT.encode
decode = _DEFAULT.decode
decode_command_topic = _DEFAULT.decode_command_topic
report_fields = _DEFAULT.report_fields
occurrence_events = _DEFAULT.occurrence_events
decode_fields = _DEFAULT.decode_fields
record_type = _DEFAULT.record_type
schema_header = _DEFAULT.schema_header
current_schema = _DEFAULT.current_schema


def checked_fields(cls: type[Record], expected: tuple[str, ...], owner: str) -> list[Any]:
    """The current schema's fields of ``cls`` (expanded: named types inline), after checking their
    names are ``expected``, the order module ``owner`` reads or writes by hand. Raises
    RuntimeError naming ``owner`` otherwise: a schema edit that forgot a hand-written codec
    fails at import, not as wrong bytes."""
    fields_: list[Any] = current_schema(cls).expanded["fields"]
    names = tuple(f["name"] for f in fields_)
    if names != expected:  # pragma: no cover - guards a schema edit
        raise RuntimeError(f"{cls.__name__} fields changed to {list(names)}: update {owner}")
    return fields_
