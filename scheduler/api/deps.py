"""What every route shares: the process's services, the tenant of the request (its API key and
rate), the ETag of a version, and the mapping of SDK errors to problems."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, NamedTuple

import anyio.to_thread
from fastapi import Request, Security
from fastapi.security import HTTPBearer

from scheduler.api.keys import KeyIndex, RateLimiter
from scheduler.api.problems import ApiProblem
from scheduler.api.router import CommandRouter
from scheduler.client import (
    CommandRejected,
    HistoryLagging,
    HistoryUnavailable,
    OccurrenceNotFound,
    PublishError,
    ScheduleNotFound,
)
from scheduler.kafka.errors import AccessError
from scheduler.settings import Settings


@dataclass
class Services:
    """One API process's shared parts (made by ``scheduler.api.app.start_services``)."""

    settings: Settings
    router: CommandRouter
    keys: KeyIndex
    limiter: RateLimiter
    _in_flight: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def in_flight(self, tenant: str, key: str) -> Iterator[None]:
        """Hold ``key`` while its create is processed here; 409 while another request holds it."""
        with self._lock:
            if (tenant, key) in self._in_flight:
                raise ApiProblem(
                    409,
                    "in-flight",
                    f"Idempotency-Key {key!r}: a create with this key is "
                    "still being processed: retry in a moment (the same body answers the same "
                    "schedule)",
                    field="Idempotency-Key",
                    headers={"Retry-After": "1"},
                )
            self._in_flight.add((tenant, key))
        try:
            yield
        finally:
            with self._lock:
                self._in_flight.discard((tenant, key))

    def close(self) -> None:
        self.keys.close()
        self.router.close()


def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


class Caller(NamedTuple):
    """Who a request is for: the tenant of its API key, and this process's services."""

    tenant: str
    svc: Services


class TenantKey(HTTPBearer):
    """The tenant whose active API key the request carries (401 otherwise), within its rate (429);
    a key not checked lately is hashed (scrypt, ~50 ms) in the thread pool, not on the loop.

    The bearer scheme itself resolves the tenant and hands the services with it: one dependency
    where a function depending on ``HTTPBearer`` and a services dependency made three, and
    FastAPI's resolution of each (a cache key, four parameter passes) was ~17 % of an API
    worker's CPU under creates (docs/decisions.md). OpenAPI sees the same ``HTTPBearer``
    scheme."""

    async def __call__(self, request: Request) -> Caller:  # type: ignore[override]
        cred = await super().__call__(request)
        svc = services(request)
        challenge = {"WWW-Authenticate": "Bearer"}
        if cred is None:
            raise ApiProblem(
                401,
                "unauthorized",
                "Authorization: no API key: send 'Authorization: Bearer "
                "ksk_...' (make one with `ksched tenants api-key create <tenant>`)",
                field="Authorization",
                headers=challenge,
            )
        answered, tenant = svc.keys.checker.without_hashing(cred.credentials)
        if not answered:
            tenant = await anyio.to_thread.run_sync(svc.keys.checker.tenant_of, cred.credentials)
        if tenant is None:
            raise ApiProblem(
                401,
                "unauthorized",
                "Authorization: the API key is malformed, unknown or revoked: "
                "use an active key (`ksched tenants api-key list <tenant>`)",
                field="Authorization",
                headers=challenge,
            )
        wait = svc.limiter.take(tenant)
        if wait:
            raise ApiProblem(
                429,
                "rate-limited",
                f"tenant {tenant}: over {svc.limiter.rate:g} requests/s on this "
                f"API instance: retry after {wait}s",
                headers={"Retry-After": str(wait)},
            )
        return Caller(tenant, svc)


tenant_key = TenantKey(auto_error=False, scheme_name="HTTPBearer",
                       description="a tenant's API key: `ksched tenants api-key create T`")


Auth = Annotated[Caller, Security(tenant_key)]


def etag(version: int) -> str:
    return f'"{version}"'


def if_match(header: str | None) -> int | None:
    """The version an ``If-Match`` names (``"3"``, ``W/"3"`` or ``3``); 412 for anything else."""
    if header is None:
        return None
    raw = header.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise ApiProblem(
            412,
            "stale-version",
            f"If-Match: {header!r} is not a version ETag: send the ETag "
            "of GET /v1/schedules/{id}, e.g. '\"3\"'",
            field="If-Match",
        )
    return int(raw)


def not_found(kind: str, ident: str) -> ApiProblem:
    """The same answer for an unknown id and another tenant's: nothing leaks that it exists."""
    return ApiProblem(
        404,
        "not-found",
        f"{kind}: {ident!r} not found for this tenant: check the id "
        f"(GET /v1/{'schedules' if kind == 'schedule_id' else 'occurrences'} lists them)",
        field=kind,
    )


_REJECTED: dict[str, tuple[int, str]] = {
    "INVALID_SPEC": (422, "invalid-request"),
    "INVALID_COMMAND": (422, "invalid-request"),
    "STALE_VERSION": (412, "stale-version"),
    "QUOTA_EXCEEDED": (403, "quota-exceeded"),
    "NOT_FOUND": (404, "not-found"),
    "TERMINAL": (409, "conflict"),
    "CONFLICT": (409, "conflict"),
    "TENANT_DISABLED": (403, "forbidden"),
    "UNKNOWN_TENANT": (503, "unavailable"),
}


def rejected(exc: CommandRejected, *, create: bool = False) -> ApiProblem:
    """The problem of a processor's rejection; a create's CONFLICT (its key with another body) is 422."""
    code = exc.code or "INTERNAL"
    status, slug = _REJECTED.get(code, (500, "internal"))
    if create and code == "CONFLICT":
        status, slug = 422, "invalid-request"
    fld = {"STALE_VERSION": "If-Match", "CONFLICT": "Idempotency-Key"}.get(code)
    return ApiProblem(status, slug, f"{code}: {exc.result.reason}", field=fld)


def unavailable(exc: Exception) -> ApiProblem:
    return ApiProblem(503, "unavailable", f"{exc}", headers={"Retry-After": "1"})


@contextmanager
def answering(kind: str = "schedule_id", ident: str = "") -> Iterator[None]:
    """SDK errors → problems: unknown ids 404, a lagging or missing store or broker 503."""
    try:
        yield
    except (ScheduleNotFound, OccurrenceNotFound):
        raise not_found(kind, ident) from None
    except (HistoryLagging, HistoryUnavailable, PublishError, AccessError) as exc:
        raise unavailable(exc) from None


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of an operation for its problem statuses (all application/problem+json)."""
    from scheduler.api.problems import TITLES, Problem

    out: dict[int | str, dict[str, Any]] = {}
    for s in (401, 422, 429, *statuses):
        out[s] = {
            "model": Problem,
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
            "description": _DESCRIPTIONS.get(s, TITLES["internal"]),
        }
    return out


_DESCRIPTIONS = {
    401: "no, a wrong or a revoked API key",
    403: "over a quota, or the tenant is disabled",
    404: "no such resource for this tenant",
    409: "conflicts with the current state",
    412: "If-Match names a stale version",
    413: "body over the limit",
    415: "not application/json",
    422: "invalid input: the field, the value and the fix",
    429: "over the tenant's request rate (Retry-After)",
    503: "broker or history store unavailable",
}
