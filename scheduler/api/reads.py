"""``/v1/occurrences``, ``/v1/dlq`` and ``/v1/preview``: the history store's occurrence queries, a
tenant's dead-letter queue (listed from the store, replayed by ``scheduler/dlq.py``) and the
preview of an unsaved spec (``ksched preview``'s own rows)."""

from __future__ import annotations

import argparse
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from scheduler.api import models as m
from scheduler.api.deps import Auth, answering, problem_responses, unavailable
from scheduler.api.problems import ApiProblem
from scheduler.cli import UsageError, render
from scheduler.cli.instants import iso_utc

router = APIRouter(prefix="/v1", tags=["occurrences"])
_DAY_MS = 86_400_000
OccState = Literal[
    "ENQUEUED", "RUNNING", "SUCCEEDED", "RETRY_WAIT", "DEAD", "MISSED", "CANCELED", "SKIPPED_OVERLAP"
]
_OCC_EX = {
    "occurrence_id": "o-5d1c2b",
    "schedule_id": "s-3f2a9c0d1e",
    "version": 1,
    "scheduled_for": "2026-03-09T08:00:00Z",
    "available_at": "2026-03-09T08:00:00Z",
    "enqueued_at": "2026-03-09T08:00:00.012Z",
    "lag_s": 0.012,
    "state": "SUCCEEDED",
    "state_at": "2026-03-09T08:00:01Z",
    "attempt_count": 1,
    "reason": None,
}


def _ms(name: str, text: str | None, default_ms: int) -> int:
    if text is None:
        return default_ms
    try:
        return int(iso_utc(name, text, "an ISO-8601 datetime, e.g. 2026-03-09T13:00:00Z").timestamp() * 1000)
    except (UsageError, ValueError, OverflowError) as exc:
        raise ApiProblem(422, "invalid-request", f"{exc}", field=name) from None


@router.get(
    "/occurrences",
    response_model=m.OccurrencePage,
    summary="List the tenant's occurrences",
    responses={
        200: {"content": {"application/json": {"example": {"items": [_OCC_EX], "next_cursor": None}}}},
        **problem_responses(503),
    },
)
def occurrences(
    caller: Auth,
    schedule_id: Annotated[str | None, Query(description="only this schedule's")] = None,
    from_: Annotated[
        str | None, Query(alias="from", description="scheduled_for >= this (default 24 h ago)")
    ] = None,
    to: Annotated[str | None, Query(description="scheduled_for < this (default: now)")] = None,
    state: OccState | None = None,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    tenant, svc = caller
    now = int(time.time() * 1000)
    lo, hi = _ms("from", from_, now - _DAY_MS), _ms("to", to, now)
    try:
        with answering():
            page = svc.router.occurrences(
                tenant, from_ms=lo, to_ms=hi, schedule_id=schedule_id, state=state, cursor=cursor, limit=limit
            )
    except ValueError as exc:
        raise ApiProblem(422, "invalid-request", f"{exc}", field="cursor" if cursor else "to") from None
    return {"items": [render.occurrence_json(o) for o in page.items], "next_cursor": page.next_cursor}


@router.get(
    "/occurrences/{occurrence_id}",
    response_model=m.OccurrenceDetailOut,
    summary="An occurrence and its attempts",
    responses={
        200: {"content": {"application/json": {"example": {**_OCC_EX, "attempts": []}}}},
        **problem_responses(404, 503),
    },
)
def occurrence(occurrence_id: Annotated[str, Path(examples=["o-5d1c2b"])], caller: Auth) -> Any:
    tenant, svc = caller
    with answering("occurrence_id", occurrence_id):
        return render.detail_json(svc.router.occurrence(tenant, occurrence_id))


@router.get(
    "/dlq",
    response_model=m.DlqPage,
    summary="The tenant's dead-letter queue, a page at a time",
    tags=["dlq"],
    responses={
        200: {"content": {"application/json": {"example": {"items": [], "next_cursor": None}}}},
        **problem_responses(503),
    },
)
def dlq(
    caller: Auth,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    tenant, svc = caller
    try:
        with answering():
            page = svc.router.history.store().dead_letters(tenant, cursor=cursor, limit=limit)
    except ValueError as exc:
        raise ApiProblem(422, "invalid-request", f"{exc}", field="cursor") from None
    return {"items": [render.dead_letter_json(d) for d in page.items], "next_cursor": page.next_cursor}


@router.post(
    "/dlq/{occurrence_id}:replay",
    response_model=m.Replayed,
    summary="Run a dead occurrence again",
    tags=["dlq"],
    responses={
        200: {
            "content": {
                "application/json": {
                    "example": {"occurrence_id": "o-5d1c2b", "schedule_id": "s-3f2a9c0d1e", "attempt": 4}
                }
            }
        },
        **problem_responses(404, 409, 503),
    },
)
def replay(occurrence_id: Annotated[str, Path(examples=["o-5d1c2b"])], caller: Auth) -> Any:
    tenant, svc = caller
    from scheduler.dlq import DlqNotIndexedYet, NotInDlq, find_dead
    from scheduler.dlq import replay as replay_entries
    from scheduler.principals import as_api

    conn = as_api(svc.settings)
    try:
        with answering("occurrence_id", occurrence_id):  # a store never fed: 503
            store = svc.router.history.store()
        latest = find_dead(svc.settings, store, tenant, occurrence_id, conn=conn)  # its latest death
        [occ] = replay_entries(svc.settings, [latest], int(time.time() * 1000), conn=conn)
    except NotInDlq as exc:
        raise ApiProblem(404, "not-found", f"{exc}: check the id (GET /v1/dlq lists them)",
                         field="occurrence_id") from None
    except DlqNotIndexedYet as exc:
        raise ApiProblem(409, "conflict", f"{exc}", field="occurrence_id",
                         headers={"Retry-After": "1"}) from None
    except (LookupError, TimeoutError) as exc:
        raise unavailable(exc) from None
    return {"occurrence_id": occ.occurrence_id, "schedule_id": occ.schedule_id, "attempt": occ.attempt}


@router.post(
    "/preview",
    response_model=m.Preview,
    summary="The next fire times of an unsaved spec",
    tags=["schedules"],
    responses={
        200: {
            "content": {
                "application/json": {
                    "example": {
                        "items": [
                            {
                                "n": 1,
                                "scheduled_for": "2026-03-09T13:00:00Z",
                                "local": "2026-03-09T09:00:00-04:00",
                            }
                        ]
                    }
                }
            }
        },
        **problem_responses(413, 415),
    },
)
def preview(body: m.PreviewIn, _caller: Auth) -> Any:  # the key is checked, no tenant data read
    from scheduler.cli.preview_cmd import rows

    if (body.cron is None) == (body.at is None):
        raise ApiProblem(
            422,
            "invalid-request",
            "cron/at: give exactly one of them (cron for a recurring schedule, at for a one-time one)",
            field="cron",
        )
    problem = m.timing_problem(body)
    if problem is not None:
        raise problem
    args = argparse.Namespace(
        cron=body.cron,
        at=body.at,
        tz=body.timezone,
        after=body.after,
        after_dt=None,
        count=body.count,
        nonexistent=body.nonexistent,
        repeated=body.repeated,
        window_minutes=body.window_minutes,
    )
    try:
        return {"items": rows(args)}
    except (UsageError, ValueError, OverflowError) as exc:
        text = str(exc)
        field = next(
            (
                f
                for f in ("count", "window-minutes", "after", "cron", "at", "timezone")
                if text.startswith((f, f"--{f}"))
            ),
            None,
        )
        raise ApiProblem(422, "invalid-request", text, field=field) from None
