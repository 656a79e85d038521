"""The jittered time of an occurrence: ``available_at``, defined once (DESIGN §1, refined).

An occurrence of schedule ``schedule_id`` (version ``version``) at nominal
instant ``scheduled_for`` may be dispatched at::

    available_at = scheduled_for + jitter_within_s(occurrence_id, w)
    w            = window_s                                   if there is no next fire
                   min(window_s, next_fire - scheduled_for)   otherwise

where ``occurrence_id = ids.occurrence_id(schedule_id, version, scheduled_for)``,
``next_fire = compiled.next_after_epoch(scheduled_for)`` and
:func:`~scheduler.domain.ids.jitter_within_s` is the hash
``H(occurrence_id) mod w``. A window of 0 is strict: ``available_at`` is
``scheduled_for``, with no hashing and no next-fire lookup.

Why the cap: jitter within the gap to the next fire keeps one schedule's
occurrences in order of ``available_at``, which the processor's cursor relies
on (it never skips one). Whenever the window is shorter than the gap this is
exactly DESIGN.md §1's ``scheduled_for + H(oid) mod window``.

This module is the only definition: the processor's shard, ``ksched preview``
and tests all go through :func:`available_at` or :func:`fire_at`, so the
instant a preview shows is the instant the processor uses -- for the same
compiled spec, schedule id and version.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.domain.compiled import CompiledSpec
from scheduler.domain.ids import jitter_within_s, occurrence_id


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence's instants: nominal (``scheduled_for``) and when it may be dispatched."""

    scheduled_for: int
    """Nominal UTC instant, epoch seconds: a member of the compiled spec's fire set."""
    available_at: int
    """``scheduled_for`` plus the capped deterministic jitter; never earlier than nominal."""
    occurrence_id: str
    """``ids.occurrence_id(schedule_id, version, scheduled_for)``, the jitter's hash input."""


def available_at(
    compiled: CompiledSpec, schedule_id: str, version: int, scheduled_for: int, window_s: int
) -> int:
    """When the occurrence at ``scheduled_for`` may be dispatched (epoch s); see the module doc.

    ``scheduled_for`` must be a fire instant of ``compiled`` (the cap is the gap
    to the next one); ``window_s`` is the schedule's flexible window in seconds
    (0: strict). Strict costs one comparison, which is what lets the processor
    fire 500,000 strict occurrences per burst. ValueError if ``window_s < 0``.
    """
    if not window_s:
        return scheduled_for
    return _jittered(compiled, occurrence_id(schedule_id, version, scheduled_for), scheduled_for,
                     window_s)


def fire_at(
    compiled: CompiledSpec, schedule_id: str, version: int, scheduled_for: int, window_s: int
) -> Fire:
    """The :class:`Fire` at ``scheduled_for``: :func:`available_at` plus the occurrence id.

    For callers that need the id anyway (records, previews); it is hashed even
    for a strict window, so the hot strict path should call :func:`available_at`.
    """
    oid = occurrence_id(schedule_id, version, scheduled_for)
    avail = scheduled_for if not window_s else _jittered(compiled, oid, scheduled_for, window_s)
    return Fire(scheduled_for, avail, oid)


def _jittered(compiled: CompiledSpec, oid: str, scheduled_for: int, window_s: int) -> int:
    if window_s < 0:
        raise ValueError(f"window_s must be >= 0, got {window_s}")
    nxt = compiled.next_after_epoch(scheduled_for)
    w = window_s if nxt is None else min(window_s, nxt - scheduled_for)
    return scheduled_for + jitter_within_s(oid, w)
