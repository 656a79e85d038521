"""Errors as ``application/problem+json`` (RFC 9457): every error the API answers, one shape.

``type`` is ``urn:ksched:problem:<slug>``, ``title`` the slug's fixed summary, ``detail`` one
line naming the field, the value and the fix; ``field`` (an extension member) names the field
when there is one. Nothing else reaches a client: the catch-all handler answers 500 with an
error id that is logged with the traceback.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException

log = logging.getLogger("ksched.api")
PROBLEM_JSON = "application/problem+json"

TITLES: dict[str, str] = {
    "unauthorized": "Missing, malformed, unknown or revoked API key",
    "forbidden": "The tenant may not do this",
    "not-found": "No such resource for this tenant",
    "method-not-allowed": "Method not allowed on this resource",
    "conflict": "Conflicts with the resource's current state",
    "in-flight": "A request with this Idempotency-Key is still being processed",
    "stale-version": "If-Match names a version that is no longer current",
    "body-too-large": "Request body too large",
    "unsupported-media-type": "Unsupported content type",
    "invalid-request": "The request is invalid",
    "quota-exceeded": "Over the tenant's quota",
    "rate-limited": "Too many requests for this tenant",
    "unavailable": "A dependency is unavailable",
    "internal": "Internal error",
}


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "urn:ksched:problem:invalid-request",
                    "title": TITLES["invalid-request"],
                    "status": 422,
                    "detail": "timezone: 'Mars/Olympus' is not a known IANA zone: use e.g. 'Europe/Berlin'",
                    "field": "timezone",
                    "instance": "/v1/schedules",
                }
            ]
        }
    )

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = None


class ApiProblem(Exception):
    """Raise to answer a problem: ``status``, ``slug`` (a key of :data:`TITLES`), ``detail``."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.slug, self.detail, self.field = status, slug, detail, field
        self.headers = headers or {}


class ProblemHTTPException(HTTPException):
    """An :class:`ApiProblem` raised where FastAPI turns any other exception into a 400: while it
    reads the body (the guard's size limit)."""

    def __init__(self, problem: ApiProblem) -> None:
        super().__init__(problem.status, problem.detail)
        self.problem = problem


def problem_response(request: Request, p: ApiProblem) -> JSONResponse:
    body = Problem(
        type=f"urn:ksched:problem:{p.slug}",
        title=TITLES[p.slug],
        status=p.status,
        detail=p.detail,
        instance=request.url.path,
        field=p.field,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=p.status, media_type=PROBLEM_JSON, headers=p.headers
    )


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(x) for x in loc if x not in ("body",)]
    return ".".join(parts) or "body"


def validation_problem(exc: RequestValidationError) -> ApiProblem:
    """The first error pydantic found, as one line: the field, the value, what is allowed."""
    errors = exc.errors()
    if not errors:
        return ApiProblem(422, "invalid-request", "the request is invalid")
    e = errors[0]
    where = _where(tuple(e.get("loc", ())))
    value = repr(e.get("input"))[:200]
    if e.get("type") == "extra_forbidden":
        fix = "remove it (GET /openapi.json lists the fields)"
        return ApiProblem(
            422, "invalid-request", f"{where}: unknown field (value {value}): {fix}", field=where
        )
    if e.get("type") == "json_invalid":
        return ApiProblem(
            422,
            "invalid-request",
            f"body: not valid JSON ({e.get('msg')}): send one JSON object",
            field="body",
        )
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ApiProblem(422, "invalid-request", f"{where}: {e.get('msg')} (value {value}){more}", field=where)


def install(app: FastAPI) -> None:
    """The handlers: ours, pydantic's validation and Starlette's HTTP errors (the catch-all is
    :func:`internal_error`, called by the guard middleware: ``scheduler/api/guard.py``)."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return problem_response(request, exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(request, validation_problem(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        if isinstance(exc, ProblemHTTPException):
            return problem_response(request, exc.problem)
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "invalid-request")
        detail = (
            f"{request.method} {request.url.path}: no such route: see GET /openapi.json"
            if exc.status_code == 404
            else f"{request.method} {request.url.path}: {exc.detail}"
        )
        return problem_response(
            request, ApiProblem(exc.status_code, slug, detail, headers=dict(exc.headers or {}))
        )

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)


def internal_error(path: str, method: str, exc: BaseException) -> tuple[int, bytes]:
    """The 500 problem of an unexpected error (status, body); the traceback goes to the log only."""
    error_id = uuid.uuid4().hex[:12]
    log.error("error %s on %s %s", error_id, method, path, exc_info=exc)
    body = Problem(
        type="urn:ksched:problem:internal",
        title=TITLES["internal"],
        status=500,
        detail=f"an internal error occurred (error id {error_id}, in the API's log): retry; "
        "report the id if it persists",
        instance=path,
    )
    return 500, body.model_dump_json(exclude_none=True).encode()
