"""``ScheduleSpec``: the user-facing description of a schedule (DESIGN §1-§2, §4-§5).

Plain, frozen data. Construction checks every field on its own (types, enum
values, ranges, aware datetimes -- normalised to UTC); the cross-field timing
checks that need the cron parser or the zone database (bad expression, unknown
zone, nonexistent one-time ``at``) happen in
:func:`scheduler.domain.compiled.compile_spec`, which :meth:`ScheduleSpec.validate`
calls. Every problem is a :class:`SpecError` naming the field.

The enum fields take a :mod:`scheduler.vocabulary` member (``Misfire.CATCH_UP``)
or its plain symbol (``"CATCH_UP"``) and keep the plain symbol, so specs built
either way are equal, hash, print and pickle alike.

``to_dict`` gives plain Python values with the enum fields as the plain strings
of the contract (``"cron"``, ``"skip"``, ``"FIRE_ONCE"``...), ``start``/``end``
as aware UTC ``datetime`` (what Avro ``timestamp-*`` logical types take) and
``payload`` as ``bytes``. ``from_dict`` accepts that, plus ISO-8601 strings for
``start``/``end`` and ``str``/``bytearray`` payloads; unknown keys are rejected.

Defaults worth knowing: ``nonexistent="skip"``, ``repeated="once"``,
``window_minutes=0`` (strict), ``misfire="FIRE_ONCE"`` (after an outage a late
schedule runs once, not never and not N times -- see docs/decisions-time.md),
``max_lateness_s=60``, ``overlap="ALLOW"``, ``retry_max_attempts=3`` (total
attempts, including the first).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from scheduler.domain.bounds import (
    MAX_AT_LEN,
    MAX_CRON_LEN,
    MAX_HANDLER_LEN,
    MAX_TIMEZONE_LEN,
    NUMERIC,
    check_float,
    check_instant,
    check_int,
    check_length,
    check_payload,
)
from scheduler.domain.errors import SpecError
from scheduler.spec_fields import CHOICES, REQUIRED
from scheduler.vocabulary import (
    Misfire,
    MisfireSymbol,
    Nonexistent,
    NonexistentSymbol,
    Overlap,
    OverlapSymbol,
    Repeated,
    RepeatedSymbol,
    ScheduleKind,
    ScheduleKindSymbol,
)

Kind = ScheduleKind  # the name this module used before the vocabulary

__all__ = [
    "MAX_WINDOW_MINUTES", "Kind", "Misfire", "Nonexistent", "Overlap", "Repeated", "ScheduleKind",
    "ScheduleSpec",
]

MAX_WINDOW_MINUTES = int(NUMERIC["window_minutes"].hi)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _utc(name: str, v: object) -> _dt.datetime | None:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            v = _dt.datetime.fromisoformat(v)
        except ValueError:
            raise SpecError(name, v, f"{v!r} is not an ISO-8601 datetime") from None
    if not isinstance(v, _dt.datetime):
        raise SpecError(name, v, f"{v!r} is not a datetime")
    if v.tzinfo is None or v.utcoffset() is None:
        raise SpecError(name, v, f"{v.isoformat()} has no UTC offset (give an aware UTC datetime)")
    return check_instant(name, v.astimezone(_dt.UTC), v if isinstance(v, str) else None)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleSpec:
    """What a schedule is: timing, DST options, policies and target."""

    kind: ScheduleKind | ScheduleKindSymbol
    cron: str | None = None
    at: str | None = None
    timezone: str
    start: _dt.datetime | None = None
    end: _dt.datetime | None = None
    max_runs: int | None = None
    nonexistent: Nonexistent | NonexistentSymbol = "skip"
    repeated: Repeated | RepeatedSymbol = "once"
    window_minutes: int = 0
    misfire: Misfire | MisfireSymbol = "FIRE_ONCE"
    catch_up_limit: int = 0
    max_lateness_s: int = 60
    overlap: Overlap | OverlapSymbol = "ALLOW"
    retry_max_attempts: int = 3
    retry_backoff_base_s: float = 1.0
    retry_backoff_cap_s: float = 300.0
    retry_deadline_s: int | None = None
    handler: str
    payload: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        # The checks run in this order (the first problem is the one reported).
        self._check_choices()
        self._check_timing()
        self._check_bounds()
        self._check_policies()
        self._check_target()

    def _check_choices(self) -> None:
        """Each enum field is one of its symbols; a vocabulary enum member is kept as its plain symbol."""
        for name, choices in CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                allowed = ", ".join(repr(c) for c in choices)
                raise SpecError(name, value, f"{value!r} is not one of {allowed}")
            if type(value) is not str:  # e.g. Misfire.CATCH_UP: to_dict, repr and pickles stay plain
                object.__setattr__(self, name, str(value))

    def _check_timing(self) -> None:
        """``cron`` for a cron schedule, ``at`` for a one-time one (the other empty); a zone."""
        if self.kind == ScheduleKind.CRON:
            if not isinstance(self.cron, str) or not self.cron.strip():
                raise SpecError("cron", self.cron, "is required when kind is 'cron'")
            check_length("cron", self.cron, MAX_CRON_LEN)
            if self.at is not None:
                raise SpecError("at", self.at, "must be empty when kind is 'cron'")
        else:
            if not isinstance(self.at, str) or not self.at.strip():
                raise SpecError("at", self.at, "is required when kind is 'once'")
            check_length("at", self.at, MAX_AT_LEN)
            if self.cron is not None:
                raise SpecError("cron", self.cron, "must be empty when kind is 'once'")
        if not isinstance(self.timezone, str) or not self.timezone:
            raise SpecError("timezone", self.timezone, "is required (an IANA zone such as 'UTC')")
        check_length("timezone", self.timezone, MAX_TIMEZONE_LEN)

    def _check_bounds(self) -> None:
        """``start`` <= ``end``, both normalised to UTC; ``max_runs`` in range."""
        start = _utc("start", self.start)
        end = _utc("end", self.end)
        if start is not None and end is not None and end < start:
            raise SpecError("end", end, f"end {end.isoformat()} is before start {start.isoformat()}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        if self.max_runs is not None:
            check_int("max_runs", self.max_runs)

    def _check_policies(self) -> None:
        """Window, misfire, lateness and retry numbers in range; CATCH_UP needs a limit; cap >= base."""
        check_int("window_minutes", self.window_minutes)
        check_int("catch_up_limit", self.catch_up_limit)
        if self.misfire == Misfire.CATCH_UP and self.catch_up_limit < 1:
            raise SpecError(
                "catch_up_limit", self.catch_up_limit, "must be >= 1 when misfire is 'CATCH_UP'"
            )
        check_int("max_lateness_s", self.max_lateness_s)
        check_int("retry_max_attempts", self.retry_max_attempts)
        base = check_float("retry_backoff_base_s", self.retry_backoff_base_s)
        cap = check_float("retry_backoff_cap_s", self.retry_backoff_cap_s)
        if cap < base:
            raise SpecError(
                "retry_backoff_cap_s", self.retry_backoff_cap_s,
                f"{self.retry_backoff_cap_s} is below retry_backoff_base_s {base}",
            )
        object.__setattr__(self, "retry_backoff_base_s", base)
        object.__setattr__(self, "retry_backoff_cap_s", cap)
        if self.retry_deadline_s is not None:
            check_int("retry_deadline_s", self.retry_deadline_s)

    def _check_target(self) -> None:
        """A handler name; ``payload`` bytes within the limit (a bytearray or memoryview is copied)."""
        if not isinstance(self.handler, str) or not self.handler.strip():
            raise SpecError("handler", self.handler, "is required (a registered handler name)")
        check_length("handler", self.handler, MAX_HANDLER_LEN)
        if isinstance(self.payload, bytearray | memoryview):
            object.__setattr__(self, "payload", bytes(self.payload))
        if not isinstance(self.payload, bytes):
            raise SpecError("payload", self.payload, "must be bytes")
        check_payload(self.payload)

    def validate(self) -> ScheduleSpec:
        """Full validation (expression, zone, one-time ``at``); returns ``self``."""
        from scheduler.domain.compiled import compile_spec

        compile_spec(self)
        return self

    def replace(self, **changes: Any) -> ScheduleSpec:
        return dataclasses.replace(self, **changes)

    def with_payload(self, payload: bytes) -> ScheduleSpec:
        """This spec with ``payload`` (bytes, its size checked), without running the other checks
        again: none of them reads the payload. The processor rebuilds each stored schedule's spec
        this way for its records (``replace`` re-validated the whole spec: ~20 µs a record)."""
        if not isinstance(payload, bytes):
            raise SpecError("payload", payload, "must be bytes")
        check_payload(payload)
        new = object.__new__(ScheduleSpec)
        for name in _SLOTS:
            _set(new, name, payload if name == "payload" else _get(self, name))
        return new

    def patched(self, **changes: Any) -> ScheduleSpec:
        """This spec with only ``changes`` applied: the PATCH of an update (every other field kept).

        Values take the forms :meth:`from_dict` accepts (ISO strings for ``start``/``end``,
        ``str`` payloads). Giving ``cron`` (not None) without ``kind`` makes the spec a cron
        schedule and clears ``at``; giving ``at`` makes it a one-time schedule and clears
        ``cron``. Unknown fields and an empty change set are a :class:`SpecError`.
        """
        if not changes:
            raise SpecError("spec", changes, "no field to change was given")
        merged = self.to_dict()
        if "kind" not in changes:
            if changes.get("cron") is not None:
                merged.update(kind=ScheduleKind.CRON.value, at=None)
            elif changes.get("at") is not None:
                merged.update(kind=ScheduleKind.ONCE.value, cron=None)
        merged.update(changes)
        return ScheduleSpec.from_dict(merged)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScheduleSpec:
        if not isinstance(data, Mapping):
            raise SpecError("spec", data, "must be a mapping")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SpecError(unknown[0], data[unknown[0]], f"unknown field {unknown[0]!r}")
        for required in REQUIRED:
            if data.get(required) is None:
                raise SpecError(required, None, "is required")
        kwargs = dict(data)
        payload = kwargs.get("payload")
        if isinstance(payload, str):
            kwargs["payload"] = payload.encode()
        elif payload is None and "payload" in kwargs:
            kwargs["payload"] = b""
        return cls(**kwargs)


_SLOTS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ScheduleSpec))
_get, _set = object.__getattribute__, object.__setattr__
