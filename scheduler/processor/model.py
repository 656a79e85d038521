"""The processor's in-memory model of one shard's schedules (no Kafka).

``Entry`` is the per-schedule record kept in memory; it is deliberately small
(``__slots__``, shared compiled specs and policies, interned names) because a
shard holds hundreds of thousands of them (target: under 1,000 bytes RSS per
schedule). The full spec lives on ``ksched.schedules``; the entry keeps only
what the tick needs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import IntEnum

from scheduler.domain import CompiledSpec, ScheduleSpec


class Lane(IntEnum):
    """Emission priority: lower first (DESIGN.md §4 step 2)."""

    STRICT = 0
    FLEXIBLE = 1
    CATCH_UP = 2
    RETRY = 3


ACTIVE, PAUSED, CANCELED, COMPLETED = "ACTIVE", "PAUSED", "CANCELED", "COMPLETED"
TERMINAL = frozenset({CANCELED, COMPLETED})


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


class Entry:
    """One schedule of the shard.

    ``armed_at`` is the index bucket (``available_at``, epoch s) it waits in, or
    None; ``next_for`` is the ``scheduled_for`` (epoch s) of that occurrence.
    ``prepared`` caches the encoded dispatch record of that occurrence.
    """

    __slots__ = (
        "armed_at",
        "compiled",
        "effective_from",
        "handler",
        "idempotency_key",
        "lane",
        "next_for",
        "payload",
        "policy",
        "prepared",
        "schedule_id",
        "spec_digest",
        "state",
        "tenant",
        "version",
    )

    def __init__(
        self,
        *,
        schedule_id: str,
        tenant: str,
        version: int,
        state: str,
        compiled: CompiledSpec,
        policy: Policy,
        handler: str,
        payload: bytes,
        effective_from: int,
        spec_digest: bytes,
        idempotency_key: str | None,
    ) -> None:
        self.schedule_id = schedule_id
        self.tenant = sys.intern(tenant)
        self.version = version
        self.state = state
        self.compiled = compiled
        self.policy = policy
        self.handler = sys.intern(handler)
        self.payload = payload
        self.effective_from = effective_from
        self.spec_digest = spec_digest
        self.idempotency_key = idempotency_key
        self.lane = Lane.FLEXIBLE if policy.window_s > 0 else Lane.STRICT
        self.armed_at: int | None = None
        self.next_for: int | None = None
        self.prepared: bytes | None = None

    def __repr__(self) -> str:
        return f"Entry({self.schedule_id!r} v{self.version} {self.state} next={self.next_for})"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence handed to the dispatch topic."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for: int
    available_at: int
    lane: Lane
    handler: str
    payload: bytes
    attempt: int = 1
    prepared: bytes | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An occurrence-event (MISSED, CANCELED, …) to record on ``ksched.occurrence-events``."""

    occurrence_id: str
    schedule_id: str
    tenant: str
    version: int
    scheduled_for: int
    state: str
    reason: str | None = None
