"""``ScheduleSpecRecord``'s hand-written behaviour: conversion from and to the domain spec.

The generated ``ScheduleSpecRecord`` (``_generated.py``) inherits
:class:`SpecConversion`. Both directions are driven by
:data:`scheduler.spec_fields.SPEC_FIELDS`: an ``instant`` field is an aware UTC
``datetime`` in the domain and epoch milliseconds on the wire (sub-millisecond
precision is truncated); every other field is copied as it is.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.spec_fields import SPEC_FIELDS

if TYPE_CHECKING:
    from typing import Self

    from scheduler.domain.spec import ScheduleSpec

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_ONE_MS = _dt.timedelta(milliseconds=1)


def _to_ms(t: _dt.datetime | None) -> int | None:
    return None if t is None else (t - _EPOCH) // _ONE_MS


def _source(name: str) -> str:
    return "payload" if name == "payload" else f"s.{name}"


def _flat(params: str, call: str, args: list[str], env: dict[str, Any]) -> Callable[..., Any]:
    # Both directions run per schedule (a processor's restore converts every stored spec): one
    # keyword call compiled from the table is as fast as the hand-written one it replaces.
    return eval(f"lambda {params}: {call}({', '.join(args)})", env)  # type: ignore[no-any-return]


# The payload is its own argument: a processor keeps one spec for every schedule that differs only
# in its payload, and writes each one's record from that spec and the schedule's own payload.
_from_domain = _flat("cls, s, payload", "cls", [
    f"{f.record}=_ms(s.{f.name})" if f.value == "instant" else f"{f.name}={_source(f.name)}"
    for f in SPEC_FIELDS
], {"_ms": _to_ms})
_to_domain: Callable[[Any], ScheduleSpec] | None = None  # built on first use: the domain loads late


def _build_to_domain() -> Callable[[Any], ScheduleSpec]:
    from scheduler.domain.bounds import instant_from_ms
    from scheduler.domain.spec import ScheduleSpec

    return _flat("r", "_Spec", [
        f"{f.name}=_instant({f.name!r}, r.{f.record})" if f.value == "instant" else f"{f.name}=r.{f.name}"
        for f in SPEC_FIELDS
    ], {"_Spec": ScheduleSpec, "_instant": instant_from_ms})


class SpecConversion:
    """Mixin of ``ScheduleSpecRecord``: :meth:`from_domain` / :meth:`to_domain`."""

    __slots__ = ()

    @classmethod
    def from_domain(cls, spec: ScheduleSpec, payload: bytes | None = None) -> Self:
        """The record of a domain spec (``start``/``end`` become ``start_ms``/``end_ms``); with
        ``payload``, the record of ``spec`` with that payload instead of its own, without building
        that spec first: the payload is not checked here (``ScheduleSpec.with_payload`` would)."""
        out: Self = _from_domain(cls, spec, spec.payload if payload is None else payload)
        return out

    def to_domain(self) -> ScheduleSpec:
        """The domain spec (field checks run; raises ``SpecError`` for a spec that fails them)."""
        global _to_domain
        if _to_domain is None:
            _to_domain = _build_to_domain()
        return _to_domain(self)
