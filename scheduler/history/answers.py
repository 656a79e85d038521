"""Pure helpers of the history queries: rows → frozen values, page cursors, next fire times.

No database and no Kafka here (``tests/test_history_answers.py`` tests them directly).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from functools import lru_cache
from typing import Any, TypeVar

from scheduler.history.views import (
    AttemptView,
    ChangeView,
    DeadLetterView,
    NextFire,
    OccurrenceView,
    Page,
    VersionView,
)
from scheduler.records import Schedule, ScheduleSpecRecord
from scheduler.vocabulary import ScheduleState

T = TypeVar("T")
Row = Sequence[Any]
_SPEC_FIELDS = frozenset(f.name for f in fields(ScheduleSpecRecord))


def spec_from_json(text: str | None) -> ScheduleSpecRecord | None:
    """The spec record of the store's ``spec_json`` (``mapping.spec_json``: payload in base64)."""
    if text is None:
        return None
    return _cached_spec(text) if len(text) <= _CACHED_SPEC_CHARS else _spec_from_json(text)


# The record is frozen and describes and list pages parse the same specs again; a spec with a
# large payload (up to 256 KiB) is parsed each time, so the cache stays a few MiB at most.
_CACHED_SPEC_CHARS = 2048


def _spec_from_json(text: str) -> ScheduleSpecRecord:
    raw = json.loads(text)
    d = {k: v for k, v in raw.items() if k in _SPEC_FIELDS}
    d["payload"] = base64.b64decode(d.get("payload") or "")
    return ScheduleSpecRecord(**d)


_cached_spec = lru_cache(maxsize=4096)(_spec_from_json)


def schedule_record(row: Row) -> Schedule:
    """The ``Schedule`` of a :func:`~scheduler.history.queries.latest_schedules` row."""
    (sid, version, tenant, state, effective_from_ms, request_id, updated_at_ms, spec, created,
     key, paused_at_ms, resumed_at_ms) = row
    record = spec_from_json(spec)
    assert record is not None  # the query leaves out schedules without an indexed spec
    created_at = int(created if created is not None else effective_from_ms)
    return Schedule(
        tenant=tenant, schedule_id=sid, version=int(version), state=state, spec=record,
        created_at_ms=created_at,
        updated_at_ms=int(updated_at_ms) if updated_at_ms is not None else created_at,
        effective_from_ms=int(effective_from_ms), idempotency_key=key, paused_at_ms=paused_at_ms,
        resumed_at_ms=resumed_at_ms, last_request_id=request_id,
    )


def versions(rows: Sequence[Row]) -> tuple[VersionView, ...]:
    """Version views of ``schedules`` rows (ordered by version); a version without a spec of its
    own (PAUSE, RESUME, CANCEL) carries the one before it."""
    out: list[VersionView] = []
    carried: ScheduleSpecRecord | None = None
    for sid, version, state, command, request_id, applied, frm, until, spec in rows:
        carried = spec_from_json(spec) or carried
        out.append(VersionView(
            schedule_id=sid, version=int(version), state=state, command=command, request_id=request_id,
            applied_at_ms=applied, effective_from_ms=int(frm), effective_until_ms=until, spec=carried,
        ))
    return tuple(out)


def change(row: Row) -> ChangeView:
    version, command, state, request_id, applied, frm = row
    return ChangeView(version=int(version), command=command, state=state, request_id=request_id,
                      applied_at_ms=int(applied), effective_from_ms=int(frm))


def occurrence(row: Row) -> OccurrenceView:
    oid, sid, version, sf, avail, enq, state, state_at, attempts, reason = row
    return OccurrenceView(
        occurrence_id=oid, schedule_id=sid, version=int(version), scheduled_for_ms=int(sf),
        available_at_ms=avail, enqueued_at_ms=enq, state=state, state_at_ms=int(state_at),
        attempt_count=int(attempts), reason=reason,
    )


def dead_letter(row: Row) -> DeadLetterView:
    oid, sid, version, sf, handler, attempts, err_class, err_msg, dead_at, reason, partition, offset = row
    return DeadLetterView(
        occurrence_id=oid, schedule_id=sid, version=int(version), scheduled_for_ms=int(sf), handler=handler,
        attempts=int(attempts), last_error_class=err_class, last_error_message=err_msg,
        dead_at_ms=int(dead_at), reason=reason, dlq_partition=int(partition), dlq_offset=int(offset),
    )


def attempt(row: Row) -> AttemptView:
    no, token, worker, started, beat, finished, result, retryable, err_class, err_msg = row
    return AttemptView(
        attempt_no=int(no), token=token, worker_id=worker, started_at_ms=started, last_heartbeat_ms=beat,
        finished_at_ms=finished, result=result, retryable=None if retryable is None else bool(retryable),
        error_class=err_class, error_message=err_msg,
    )


def encode_cursor(listing: str, at_ms: int, item_id: str) -> str:
    """An opaque cursor: after ``(at_ms, item_id)`` in ``listing``."""
    return base64.urlsafe_b64encode(json.dumps([listing, at_ms, item_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, listing: str) -> tuple[int, str] | None:
    """``(at_ms, item_id)`` of a cursor of ``listing``; ValueError naming it if it is not one."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, at_ms, item_id = json.loads(raw)
        if kind == listing and isinstance(at_ms, int) and isinstance(item_id, str):
            return at_ms, item_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise ValueError(f"cursor {cursor!r} is not a cursor of the {listing} listing: pass the next_cursor "
                     "of its previous page, or none for the first page")


def page(items: Sequence[T], limit: int, cursor_of: Callable[[T], str]) -> Page[T]:
    """The page of the first ``limit`` of ``items`` (fetched with one more, to know if there is a
    next page); its cursor points after the last item shown."""
    shown = tuple(items[:limit])
    more = len(items) > limit and shown
    return Page(items=shown, next_cursor=cursor_of(shown[-1]) if more else None)


def next_fires(schedule: Schedule, after_ms: int, count: int) -> tuple[NextFire, ...]:
    """The next ``count`` occurrences of an ACTIVE ``schedule`` after ``after_ms`` (exclusive) and not
    before its version took effect, computed from its spec by the domain's time rules (the
    processor's own: ``compile_spec``, ``available_at``). Empty for any other state."""
    from scheduler.domain import available_at, compile_spec

    if schedule.state != ScheduleState.ACTIVE or count <= 0:
        return ()
    compiled = compile_spec(schedule.spec.to_domain())
    after_s = max(after_ms // 1000, schedule.effective_from_ms // 1000 - 1)
    window_s = schedule.spec.window_minutes * 60
    sid, version = schedule.schedule_id, schedule.version
    return tuple(
        NextFire(scheduled_for_ms=f * 1000,
                 available_at_ms=available_at(compiled, sid, version, f, window_s) * 1000)
        for f in compiled.fire_times_epoch(after_s, count)
    )
