"""``/v1/schedules``: create, list, describe, patch, replace, pause, resume, cancel.

Writes go through the processor as the SDK sends them (:class:`~scheduler.api.router.CommandRouter`):
the answer waits for the processor's result up to the router's deadline; without one it is 202
with the schedule's URL, never a 201 that may be false. Reads are the SDK's history queries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse

from scheduler.api import models as m
from scheduler.api.deps import (
    Auth,
    Caller,
    Services,
    answering,
    etag,
    if_match,
    not_found,
    problem_responses,
    rejected,
)
from scheduler.api.problems import ApiProblem
from scheduler.cli import render
from scheduler.client import Accepted, CommandRejected, PendingRequest, RequestTimeout
from scheduler.domain import SpecError
from scheduler.domain.bounds import check_key, check_schedule_id
from scheduler.history.views import ScheduleDescription
from scheduler.records import Schedule
from scheduler.vocabulary import CommandKind, OccurrenceState

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])
SID = Annotated[str, Path(description="the schedule's id", examples=["s-3f2a9c0d1e"])]
IF_MATCH = Annotated[str | None, Header(alias="If-Match", description='the ETag of a GET, e.g. "3"')]
MAY_STILL_RUN = (OccurrenceState.ENQUEUED, OccurrenceState.RUNNING, OccurrenceState.RETRY_WAIT)
# next + last of a describe answered on the event loop (the defaults' 15 and a little more): a
# thousand of each is milliseconds of Python, which would hold every other request up
_ON_LOOP_ROWS = 20
_WRITE = problem_responses(403, 404, 409, 412, 413, 415, 503)
_ACCEPTED_EX = {
    "schedule_id": "s-3f2a9c0d1e",
    "version": 2,
    "request_id": "9b0c5e1f",
    "status": "ACCEPTED",
    "status_url": "/v1/schedules/s-3f2a9c0d1e",
}
_PENDING: dict[int | str, dict[str, Any]] = {
    202: {
        "model": m.Accepted,
        "description": "no answer from the processor within the deadline: "
        "it may still be applied; GET status_url",
    }
}


def _example(example: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"example": example}}}


def _url(sid: str) -> str:
    return f"/v1/schedules/{sid}"


def _answer(acc: Accepted, status: int = 200) -> JSONResponse:
    body = m.Accepted(
        schedule_id=acc.schedule_id,
        version=acc.version,
        request_id=acc.request_id,
        status="ACCEPTED",
        status_url=_url(acc.schedule_id),
    )
    return JSONResponse(
        body.model_dump(),
        status_code=status,
        headers={"ETag": etag(acc.version), "Location": _url(acc.schedule_id)},
    )


def _pending(t: RequestTimeout) -> JSONResponse:
    p = t.pending
    body = m.Accepted(
        schedule_id=p.schedule_id,
        version=None,
        request_id=p.request_id,
        status="PENDING",
        status_url=_url(p.schedule_id),
    )
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": _url(p.schedule_id)})


def _sid(schedule_id: str) -> str:
    try:
        return check_schedule_id(schedule_id)
    except SpecError:
        raise not_found("schedule_id", schedule_id) from None


@router.post(
    "",
    status_code=201,
    response_model=m.Accepted,
    summary="Create a schedule",
    responses={
        201: {"content": {"application/json": {"example": {**_ACCEPTED_EX, "version": 1}}}},
        **_PENDING,
        **_WRITE,
    },
)
async def create(
    body: m.SpecIn,  # type: ignore[valid-type]
    caller: Auth,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", description="the same key and body answer the same schedule"),
    ] = None,
) -> Any:
    tenant, svc = caller
    spec = m.domain_spec(body)
    try:
        key = check_key(idempotency_key, "Idempotency-Key") if idempotency_key is not None else None
    except SpecError as exc:
        raise m.spec_problem(exc) from None

    def build() -> PendingRequest:
        return svc.router.create_request(tenant, spec, key=key)

    if key is None:
        return await _command(svc, "", build, 201)
    with svc.in_flight(tenant, key):
        return await _command(svc, "", build, 201)


@router.get(
    "",
    response_model=m.SchedulePage,
    summary="List the tenant's schedules",
    responses={
        200: {"content": {"application/json": {"example": {"items": [], "next_cursor": None}}}},
        **problem_responses(503),
    },
)
def list_schedules(
    caller: Auth,
    state: Literal["ACTIVE", "PAUSED", "CANCELED", "COMPLETED"] | None = None,
    handler: Annotated[str | None, Query(description="only schedules whose spec targets it")] = None,
    cursor: Annotated[str | None, Query(description="the next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    tenant, svc = caller
    try:
        with answering():
            page = svc.router.list(tenant, state=state, handler=handler, cursor=cursor, limit=limit)
    except ValueError as exc:
        raise ApiProblem(422, "invalid-request", f"cursor: {exc}", field="cursor") from None
    return {"items": [render.schedule_json(s) for s in page.items], "next_cursor": page.next_cursor}


@router.get(
    "/{schedule_id}",
    response_model=m.ScheduleDetail,
    summary="Describe a schedule",
    responses={
        200: {
            "content": {
                "application/json": {
                    "example": {
                        "schedule_id": "s-3f2a9c0d1e",
                        "tenant": "acme",
                        "version": 1,
                        "state": "ACTIVE",
                        "cron": "0 9 * * MON-FRI",
                        "at": None,
                        "timezone": "Europe/Berlin",
                        "handler": "send-report",
                        "spec": m.SPEC_EXAMPLE,
                        "versions": [],
                        "changes": [],
                        "next_fires": [
                            {"scheduled_for": "2026-03-09T08:00:00Z", "available_at": "2026-03-09T08:00:00Z"}
                        ],
                        "last_occurrences": [],
                    }
                }
            }
        },
        **problem_responses(404, 503),
    },
)
async def describe(
    schedule_id: SID,
    caller: Auth,
    next: Annotated[int, Query(ge=0, le=1000, description="next fire times to answer")] = 5,
    last: Annotated[int, Query(ge=0, le=1000, description="last occurrences to answer")] = 10,
) -> Any:
    tenant, svc = caller
    sid = _sid(schedule_id)

    def described() -> ScheduleDescription:
        with answering("schedule_id", sid):
            return svc.router.describe(tenant, sid, next_count=next, last_count=last)

    # A local SQLite store answers a describe's selects in well under a millisecond: on the
    # loop, without the thread pool's hop (64 threads waking and taking turns on the GIL: the
    # wall time py-spy saw in the selects, docs/decisions.md). A read that may wait (read-your-
    # writes, a PostgreSQL store) or many rows go to a thread.
    with answering("schedule_id", sid):
        at_once = next + last <= _ON_LOOP_ROWS and svc.router.history.answers_at_once(tenant, sid)
    d = described() if at_once else await anyio.to_thread.run_sync(described)
    # A Response skips FastAPI's second pass through response_model (validate, then dump): the dict
    # already has ScheduleDetail's shape (tests/test_api_e2e.py pins it), and the spec is unchanged.
    return JSONResponse(render.description_json(d), headers={"ETag": etag(d.schedule.version)})


async def _send(svc: Services, ident: str, build: Callable[[], PendingRequest]) -> Accepted | JSONResponse:
    """Send the command ``build`` makes (its validation errors answered too) and await its result
    on the event loop, not in a thread-pool thread (:meth:`CommandRouter.send`): the acceptance, or
    the 202 of a timeout; a rejection raises its problem (``ident``: the schedule id, "" for a
    create, whose id the command makes)."""
    try:
        with answering("schedule_id", ident):
            pending = build()
            return await svc.router.send(pending)
    except RequestTimeout as t:
        return _pending(t)
    except CommandRejected as r:
        raise rejected(r, create=pending.kind == CommandKind.CREATE) from None


async def _command(
    svc: Services, ident: str, build: Callable[[], PendingRequest], status: int = 200
) -> JSONResponse:
    got = await _send(svc, ident, build)
    return got if isinstance(got, JSONResponse) else _answer(got, status)


async def _change(caller: Caller, schedule_id: str, kind: CommandKind, match: str | None) -> JSONResponse:
    """A pause or resume (a cancel answers more: :func:`cancel`)."""
    tenant, svc = caller
    sid = _sid(schedule_id)
    version = if_match(match)
    return await _command(svc, sid, lambda: svc.router.change_request(tenant, sid, kind, version))


@router.patch(
    "/{schedule_id}",
    response_model=m.Accepted,
    summary="Change some fields of a schedule",
    responses={200: {"content": {"application/json": {"example": _ACCEPTED_EX}}}, **_PENDING, **_WRITE},
)
async def patch(
    schedule_id: SID,
    body: m.SpecPatch,  # type: ignore[valid-type]
    caller: Auth,
    match: IF_MATCH = None,
) -> Any:
    tenant, svc = caller
    sid = _sid(schedule_id)
    want = if_match(match)

    def read() -> Schedule | None:  # may wait for this process's own writes: in a thread
        with answering("schedule_id", sid):
            return svc.router.history.schedule(tenant, sid)

    current = await anyio.to_thread.run_sync(read)
    if current is None:
        raise not_found("schedule_id", sid)
    if want is not None and want != current.version:
        raise ApiProblem(
            412,
            "stale-version",
            f"If-Match: version {want} is not the current version "
            f"{current.version}: GET the schedule and apply the change again",
            field="If-Match",
        )
    spec = m.domain_spec(body, current.spec.to_domain())
    return await _command(
        svc, sid, lambda: svc.router.update_request(tenant, sid, spec, expected_version=current.version)
    )


@router.put(
    "/{schedule_id}",
    response_model=m.Accepted,
    summary="Replace a schedule's spec",
    responses={200: _example(_ACCEPTED_EX), **_PENDING, **_WRITE},
)
async def replace(
    schedule_id: SID,
    body: m.SpecIn,  # type: ignore[valid-type]
    caller: Auth,
    match: IF_MATCH = None,
) -> Any:
    tenant, svc = caller
    sid = _sid(schedule_id)
    spec = m.domain_spec(body)
    version = if_match(match)
    return await _command(
        svc, sid, lambda: svc.router.update_request(tenant, sid, spec, expected_version=version)
    )


@router.post(
    "/{schedule_id}:pause",
    response_model=m.Accepted,
    summary="Pause a schedule",
    responses={200: _example(_ACCEPTED_EX), **_PENDING, **_WRITE},
)
async def pause(schedule_id: SID, caller: Auth, match: IF_MATCH = None) -> Any:
    return await _change(caller, schedule_id, CommandKind.PAUSE, match)


@router.post(
    "/{schedule_id}:resume",
    response_model=m.Accepted,
    summary="Resume a paused schedule",
    responses={200: _example(_ACCEPTED_EX), **_PENDING, **_WRITE},
)
async def resume(schedule_id: SID, caller: Auth, match: IF_MATCH = None) -> Any:
    return await _change(caller, schedule_id, CommandKind.RESUME, match)


@router.delete(
    "/{schedule_id}",
    response_model=m.Canceled,
    summary="Cancel a schedule",
    responses={
        200: {"content": {"application/json": {"example": {**_ACCEPTED_EX, "may_still_run": []}}}},
        **_PENDING,
        **_WRITE,
    },
)
async def cancel(schedule_id: SID, caller: Auth, match: IF_MATCH = None) -> Any:
    tenant, svc = caller
    sid = _sid(schedule_id)
    version = if_match(match)
    got = await _send(svc, sid, lambda: svc.router.change_request(tenant, sid, CommandKind.CANCEL, version))
    if isinstance(got, JSONResponse):
        return got

    def may_still_run() -> list[dict[str, Any]]:  # store reads: in a thread
        running: list[dict[str, Any]] = []
        with answering("schedule_id", sid):
            for state in MAY_STILL_RUN:
                page = svc.router.history.occurrences(
                    tenant, schedule_id=sid, state=state, from_ms=0, to_ms=2**62, limit=1000
                )
                running += [render.occurrence_json(o) for o in page.items]
        return running

    running = await anyio.to_thread.run_sync(may_still_run)
    answer = _answer(got)
    body = m.Canceled(
        schedule_id=got.schedule_id,
        version=got.version,
        request_id=got.request_id,
        status="ACCEPTED",
        status_url=_url(sid),
        may_still_run=running,  # type: ignore[arg-type]
    )
    return JSONResponse(body.model_dump(), headers={k: answer.headers[k] for k in ("etag", "location")})
