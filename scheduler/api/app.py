"""The FastAPI application: :func:`create_app` over the process's :class:`Services`.

:func:`start_services` makes them (the command router, the followed registry's key index, the
rate limiter) and :func:`create_app` serves them; a test passes its own. ``/healthz`` says the
process answers; ``/readyz`` that the broker and the history store do; ``/metrics`` is Prometheus;
``/console`` the read-only web console (scheduler/api/console.py).
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api import console, lag, problems, reads, schedules
from scheduler.api import models as m
from scheduler.api.deps import Services, services
from scheduler.api.guard import Guard
from scheduler.api.keys import KeyIndex, RateLimiter
from scheduler.api.router import CommandRouter
from scheduler.settings import Settings

VERSION = "1.0.0"
REQUESTS = Counter("ksched_api_requests_total", "HTTP requests answered", ["method", "route", "status"])
LATENCY = Histogram(
    "ksched_api_request_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
THREADS = 128  # request threads: the SDK's calls block (the processor's answer, the store's queries)


def start_services(
    settings: Settings, *, timeout_s: float = 5.0, rate_per_s: float | None = None
) -> Services:
    """The process's services; :class:`~scheduler.tenant_registry.RegistryMissing` without a registry."""
    keys = KeyIndex(settings)
    try:
        router = CommandRouter(settings, timeout_s=timeout_s)
    except BaseException:
        keys.close()
        raise
    rate = settings.api_rate_per_s if rate_per_s is None else rate_per_s
    return Services(settings=settings, router=router, keys=keys, limiter=RateLimiter(rate, 2 * rate))


def create_app(svc: Services, *, close_at_shutdown: bool = False) -> FastAPI:
    """The app over ``svc``; ``close_at_shutdown``: the app owns them (a worker of ``ksched api
    --workers N``), else its caller closes them."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        # The app, its models and the imported modules live as long as the process: out of the
        # cyclic GC's sight, its older generations' collections no longer traverse them mid-request.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            if close_at_shutdown:
                svc.close()

    app = FastAPI(
        title="ksched",
        version=VERSION,
        lifespan=lifespan,
        description="The HTTP control plane of ksched: a tenant's schedules, occurrences and dead "
        "letters. Authenticate with a tenant's API key (`Authorization: Bearer ksk_...`); "
        "errors are application/problem+json (RFC 9457). See docs/api.md.",
        docs_url="/docs",
        redoc_url=None,
        # No OpenTelemetry here (/metrics is Prometheus): otherwise FastAPI asks the global OTel
        # providers whether they are configured on every request (~2 % of a describe's CPU).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.services = svc
    problems.install(app)
    app.include_router(schedules.router)
    app.include_router(reads.router)
    app.include_router(lag.router)
    app.include_router(console.router)
    _ops(app)

    app.add_middleware(Measure)
    app.add_middleware(Guard)  # added last: the outermost
    return app


class Measure:
    """Each request's latency and status by route template, as a pure ASGI middleware: Starlette's
    ``@app.middleware("http")`` (BaseHTTPMiddleware) ran every request through a task group and a
    memory stream: its frames were in a quarter of the event loop's samples under ``ksched bench api``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0, status = time.perf_counter(), 500  # 500: the app raised before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")  # set by the router that matched
            LATENCY.labels(scope["method"], path).observe(time.perf_counter() - t0)
            REQUESTS.labels(scope["method"], path, str(status)).inc()


def _ops(app: FastAPI) -> None:
    @app.get(
        "/healthz",
        response_model=m.Health,
        tags=["operations"],
        summary="The process answers",
        responses={200: {"content": {"application/json": {"example": {"status": "ok", "checks": {}}}}}},
    )
    def healthz() -> Any:
        return {"status": "ok", "checks": {}}

    @app.get(
        "/readyz",
        response_model=m.Health,
        tags=["operations"],
        summary="The broker and the history store answer",
        responses={
            200: {
                "content": {
                    "application/json": {
                        "example": {"status": "ok", "checks": {"broker": "ok", "history_store": "ok"}}
                    }
                }
            },
            503: {
                "model": m.Health,
                "description": "a dependency does not answer",
                "content": {
                    "application/json": {
                        "example": {
                            "status": "unavailable",
                            "checks": {"broker": "ok", "history_store": "no history store (...)"},
                        }
                    }
                },
            },
        },
    )
    def readyz(request: Request) -> Any:
        svc = services(request)
        checks = {"broker": "ok" if svc.router.brokers_reachable() else "no answer to a metadata request"}
        try:  # reachable is ready: a store no indexer has fed yet (a new namespace) still answers
            svc.router.history.open()
            checks["history_store"] = "ok"
        except Exception as exc:  # any failure: not ready, and say why
            checks["history_store"] = str(exc)
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503
        )

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"example": "ksched_api_requests_total{...} 1.0"}}}},
    )
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
