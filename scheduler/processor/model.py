"""The processor's in-memory model of one shard's schedules (no Kafka).

``Entry`` is the per-schedule record kept in memory; it is deliberately small
(``__slots__``, shared compiled specs and policies, interned names) because a
shard holds hundreds of thousands of them (target: under 1,000 bytes RSS per
schedule). The full spec lives on ``ksched.schedules``; the entry keeps only
what the tick needs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Generic, NamedTuple, TypeVar

from scheduler.domain import CompiledSpec, ScheduleSpec, compile_spec, occurrence_id
from scheduler.vocabulary import Lane, ScheduleState

# The schedule states, by their short names (the vocabulary's members: they compare equal to the
# plain symbols that records decode to).
ACTIVE, PAUSED, CANCELED, COMPLETED = (
    ScheduleState.ACTIVE, ScheduleState.PAUSED, ScheduleState.CANCELED, ScheduleState.COMPLETED
)
_T = TypeVar("_T")
TERMINAL = frozenset({CANCELED, COMPLETED})
# A one-time schedule created or updated this long (plus its max_lateness_s) after its time is
# refused (firing it would surprise more often than help); within it, its occurrence fires late
# (docs/schedules.md). Also the bound of the occurrences a version can have (lifecycle).
PAST_ONCE_LIMIT_S = 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The per-schedule policies the tick needs; interned, so equal policies share one object."""

    window_s: int
    misfire: str
    catch_up_limit: int
    max_lateness_s: int
    overlap: str
    retry_max_attempts: int
    retry_backoff_base_s: float
    retry_backoff_cap_s: float
    retry_deadline_s: int | None

    @staticmethod
    def of(spec: ScheduleSpec) -> Policy:
        return _intern_policy(
            Policy(
                window_s=int(spec.window_minutes) * 60,
                misfire=str(getattr(spec.misfire, "value", spec.misfire)),
                catch_up_limit=int(spec.catch_up_limit),
                max_lateness_s=int(spec.max_lateness_s),
                overlap=str(getattr(spec.overlap, "value", spec.overlap)),
                retry_max_attempts=int(spec.retry_max_attempts),
                retry_backoff_base_s=float(spec.retry_backoff_base_s),
                retry_backoff_cap_s=float(spec.retry_backoff_cap_s),
                retry_deadline_s=spec.retry_deadline_s,
            )
        )


_POLICIES: dict[Policy, Policy] = {}


def _intern_policy(p: Policy) -> Policy:
    return _POLICIES.setdefault(p, p)


@dataclass(frozen=True, slots=True)
class SpecParts:
    """What every schedule with the same spec except its payload shares (interned).

    ``base`` is the spec with an empty payload; an entry keeps its own payload. ``lane`` and
    ``handler`` follow from ``base``; they are kept here so that the tick reads them in one hop.
    """

    base: ScheduleSpec
    compiled: CompiledSpec
    policy: Policy
    lane: Lane
    handler: str
    lane_value: int  # int(lane), as a DueOccurrence holds it: int() of an IntEnum is ~40 ns a fire

    @staticmethod
    def of(base: ScheduleSpec) -> SpecParts:
        policy = Policy.of(base)
        lane = Lane.FLEXIBLE if policy.window_s > 0 else Lane.STRICT
        return SpecParts(base, compile_spec(base), policy, lane, sys.intern(base.handler), int(lane))


_PARTS: dict[tuple[object, ...], SpecParts] = {}
_PARTS_LIMIT = 100_000  # distinct specs remembered; past it the table starts over (a cache, not state)
_SPEC_KEY = attrgetter(*(f.name for f in fields(ScheduleSpec) if f.name != "payload"))


def spec_parts(spec: ScheduleSpec) -> SpecParts:
    """The interned parts of ``spec``; raises :class:`SpecError` if it does not compile."""
    key = _SPEC_KEY(spec)
    parts = _PARTS.get(key)
    if parts is None:
        base = spec if spec.payload == b"" else spec.replace(payload=b"")
        parts = SpecParts.of(base)
        if len(_PARTS) >= _PARTS_LIMIT:
            _PARTS.clear()
        _PARTS[key] = parts
    return parts


_PARTS_BY: dict[Hashable, SpecParts] = {}
known_spec_parts = _PARTS_BY.get  # the parts of a caller's key already seen, else None (no call)


def spec_parts_by(key: Hashable, build: Callable[[], ScheduleSpec]) -> SpecParts:
    """The interned parts of a spec known by a caller's stable ``key`` of everything but its
    payload (restore: a record's encoded spec without the payload); ``build`` makes the spec only
    on a miss, so a shard's schedules are validated and compiled once per distinct spec, not once
    each. Raises like :func:`spec_parts`."""
    parts = _PARTS_BY.get(key)
    if parts is None:
        parts = spec_parts(build())
        if len(_PARTS_BY) >= _PARTS_LIMIT:
            _PARTS_BY.clear()  # clear(), not a new dict: known_spec_parts stays bound to this one
        _PARTS_BY[key] = parts
    return parts


_TIMES: dict[tuple[int, int], tuple[int, int]] = {}
_TIMES_LIMIT = 65_536  # distinct pairs held; past it the table starts over (a cache)


def shared_times(created_at_ms: int, effective_from: int) -> tuple[int, int]:
    """``(created_at_ms, effective_from)`` as one tuple per distinct pair: the entries created in
    one second share theirs (a slot and two ints less per entry, about 80 B)."""
    pair = (created_at_ms, effective_from)
    got = _TIMES.setdefault(pair, pair)
    if got is pair and len(_TIMES) > _TIMES_LIMIT:
        _TIMES.clear()
    return got


class RareFields:
    """The fields of an entry that most schedules never set, behind one slot of the entry."""

    __slots__ = ("finished_at", "last_request_id", "paused_at_ms", "resumed_at_ms")

    def __init__(
        self, paused_at_ms: int | None, resumed_at_ms: int | None, last_request_id: str | None,
        finished_at: int | None,
    ) -> None:
        self.paused_at_ms = paused_at_ms
        self.resumed_at_ms = resumed_at_ms
        self.last_request_id = last_request_id
        self.finished_at = finished_at


_NO_RARE = RareFields(None, None, None, None)  # read through when an entry has none; never written


class _RareField(Generic[_T]):
    """An :class:`Entry` attribute kept in its ``_rare`` (created on the first non-None write)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.get = attrgetter(name)
        self.name = name

    def __get__(self, e: Entry | None, owner: type | None = None) -> _T | None:
        if e is None:  # on the class: the descriptor itself (introspection)
            return self  # type: ignore[return-value]
        return self.get(e._rare)  # type: ignore[no-any-return]

    def __set__(self, e: Entry, value: _T | None) -> None:
        if e._rare is _NO_RARE:
            if value is None:
                return
            e._rare = RareFields(None, None, None, None)
        setattr(e._rare, self.name, value)


class Entry:
    """One schedule of the shard.

    ``armed_at`` is the index bucket (``available_at``, epoch s) it waits in, or
    None; ``next_for`` is the ``scheduled_for`` (epoch s) of that occurrence.
    ``prepared`` caches the head of that occurrence's dispatch record
    (:func:`scheduler.records.dispatch.dispatch_head`), encoded ahead of time.
    The full spec is not stored: :meth:`spec` rebuilds it from the shared
    ``parts.base`` and the entry's own ``payload``.

    A shard holds hundreds of thousands, so every slot counts (8 B each, issue 14's memory
    target): what the spec gives is one shared ``parts``; the four fields few schedules set
    (a pause, a resume, a change after the create, the end) share one ``_rare``;
    ``effective_from`` is kept as seconds after the create (a small, shared int for most).
    """

    __slots__ = (
        "_rare",
        "_times",
        "armed_at",
        "idempotency_key",
        "next_for",
        "parts",
        "payload",
        "prepared",
        "schedule_id",
        "state",
        "tenant",
        "version",
    )
    # Every field, as restore and the state records see them (slots and properties alike).
    FIELDS = (
        "armed_at", "created_at_ms", "effective_from", "finished_at", "idempotency_key", "last_request_id",
        "next_for", "parts", "paused_at_ms", "payload", "prepared", "resumed_at_ms", "schedule_id", "state",
        "tenant", "version",
    )

    paused_at_ms = _RareField[int]()
    resumed_at_ms = _RareField[int]()
    last_request_id = _RareField[str]()  # of the last accepted change other than its create
    finished_at = _RareField[int]()  # epoch s it became COMPLETED / CANCELED (retention), else None

    def __init__(
        self,
        schedule_id: str,
        tenant: str,
        version: int,
        state: str,
        parts: SpecParts,
        payload: bytes,
        effective_from: int,
        idempotency_key: str | None,
        created_at_ms: int = 0,
        paused_at_ms: int | None = None,
        resumed_at_ms: int | None = None,
        last_request_id: str | None = None,
        finished_at: int | None = None,
    ) -> None:
        self.schedule_id = schedule_id
        self.tenant = sys.intern(tenant)
        self.version = version
        self.state = state
        self.parts = parts
        self.payload = payload
        self.idempotency_key = idempotency_key
        self._times = shared_times(created_at_ms, effective_from)
        if paused_at_ms is None and resumed_at_ms is None and last_request_id is None and finished_at is None:
            self._rare = _NO_RARE
        else:
            self._rare = RareFields(paused_at_ms, resumed_at_ms, last_request_id, finished_at)
        self.armed_at: int | None = None
        self.next_for: int | None = None
        self.prepared: bytes | None = None

    @property
    def created_at_ms(self) -> int:
        return self._times[0]

    @property
    def effective_from(self) -> int:
        """From when its version takes effect (epoch s): the create or update, moved on by a resume."""
        return self._times[1]

    @effective_from.setter
    def effective_from(self, value: int) -> None:
        self._times = shared_times(self._times[0], value)

    @property
    def base(self) -> ScheduleSpec:
        return self.parts.base

    @property
    def compiled(self) -> CompiledSpec:
        return self.parts.compiled

    @property
    def policy(self) -> Policy:
        return self.parts.policy

    @property
    def lane(self) -> Lane:
        return self.parts.lane

    @property
    def handler(self) -> str:
        return self.parts.handler

    def spec(self) -> ScheduleSpec:
        """The schedule's full spec (rebuilt; off the hot path)."""
        base = self.parts.base
        return base if not self.payload else base.with_payload(self.payload)

    def __repr__(self) -> str:
        return f"Entry({self.schedule_id!r} v{self.version} {self.state} next={self.next_for})"


entry_times: Callable[[Entry], tuple[int, int]] = attrgetter("_times")
"""An entry's ``(created_at_ms, effective_from)``, read in C: for a burst's reports, where the
properties cost a Python frame each."""

entry_rare_times: Callable[[Entry], tuple[RareFields, tuple[int, int]]] = attrgetter("_rare", "_times")
"""An entry's ``(rare, (created_at_ms, effective_from))``: ``rare`` has the attributes
``paused_at_ms``, ``resumed_at_ms``, ``last_request_id`` and ``finished_at``. For the encoders of a
burst's records, read in C: the properties cost a Python frame per field."""


class DueOccurrence(NamedTuple):
    """One occurrence the tick hands to the dispatch topic (a tuple: a burst creates hundreds of
    thousands). Its record on the wire is :class:`scheduler.records.Occurrence`; the two names
    differ so that a reader never takes one for the other.

    ``prepared`` is its dispatch record's head when it was encoded ahead of time.
    """

    schedule_id: str
    tenant: str
    version: int
    scheduled_for: int
    available_at: int
    # A Lane value as a plain int: a tuple of untracked atoms is dropped from the cyclic GC,
    # so a burst's hundreds of thousands of occurrences never trigger a full collection.
    lane: int
    handler: str
    payload: bytes
    attempt: int = 1
    prepared: bytes | None = None

    @property
    def occurrence_id(self) -> str:
        """``H(schedule_id, version, scheduled_for)`` (DESIGN.md §1), derived on access: the
        firing path never needs it when the record head was prepared."""
        return occurrence_id(self.schedule_id, self.version, self.scheduled_for)


class Event(NamedTuple):
    """An occurrence-event (MISSED, CANCELED, …) to record on ``ksched.occurrence-events``.

    A named tuple, not a frozen dataclass: one is built per report applied and per missed
    occurrence, and a frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field) costs
    about three times as much (0.80 against 0.25 µs)."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for: int
    state: str
    reason: str | None = None
    attempt: int | None = None
