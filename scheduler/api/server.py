"""Running the API under uvicorn, and the OpenAPI document committed at ``docs/openapi.json``.

``serve(workers=N)``: N processes accept on one socket (uvicorn's supervisor binds it and spawns
them); each is one API *instance* with services of its own (:func:`worker_app`): its command
router and results consumer, its key index, its rate limiter (``api_rate_per_s`` per tenant per
process) and its ``/metrics`` (the counters of the process that accepted the scrape's connection).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
# How the supervisor hands ``--timeout`` to its spawned workers (they start from an import string)
_TIMEOUT_ENV = "_KSCHED_API_WORKER_TIMEOUT_S"


def openapi_document() -> dict[str, Any]:
    """The spec the app serves, without starting anything (no broker, no store)."""
    from scheduler.api.app import create_app

    spec: dict[str, Any] = create_app(None).openapi()  # type: ignore[arg-type]
    return spec


def openapi_text() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def serve(port: int, *, host: str = "127.0.0.1", timeout_s: float = 5.0, workers: int = 1) -> None:
    """Serve until interrupted; the services are made before the socket opens (a missing registry
    or credential fails here, with its one-line error). Its ``/metrics`` is registered for
    Prometheus' file discovery as job ``ksched-api`` (metrics_endpoint.py), like every process;
    with ``workers`` > 1 the supervisor registers the port once (a scrape reaches one worker).
    SIGTERM stops the supervisor, which stops every worker (each closes its services)."""
    import uvicorn

    from scheduler.api.app import create_app, start_services
    from scheduler.metrics_endpoint import register, unregister
    from scheduler.settings import load_settings

    if workers < 1:
        raise ValueError(f"workers: {workers} must be 1 or more (e.g. the number of cores)")
    # uvicorn stops on SIGTERM, then raises it again under the handler it found: a default one
    # would end the process before the ``finally`` below removes the target file.
    signal.signal(signal.SIGTERM, _exit)
    settings = load_settings()
    svc = start_services(settings, timeout_s=timeout_s)
    if workers > 1:  # the check above done, each worker makes its own
        svc.close()
    target = register(settings.prometheus_targets_dir, "ksched-api", port) if port else None
    # httptools and uvloop (C) parse HTTP and run the loop for a fraction of h11's and asyncio's
    # CPU: they were a quarter of the API's samples under `ksched bench api` (docs/decisions.md)
    options: dict[str, Any] = dict(host=host, port=port, log_level="info", access_log=False,
                                   http="httptools", loop="uvloop")
    try:
        if workers == 1:
            uvicorn.run(create_app(svc), **options)
        else:
            os.environ[_TIMEOUT_ENV] = repr(timeout_s)  # inherited by the spawned workers
            from scheduler.api.reuseport import supervise

            supervise(uvicorn.Config(f"{__name__}:worker_app", factory=True, workers=workers, **options))
    finally:
        if target is not None:
            unregister(target)
        if workers == 1:
            svc.close()


def worker_app() -> FastAPI:
    """The app of one worker process of ``serve(workers=N)``: its own services, made on import by
    uvicorn's worker and closed at the app's shutdown (before uvicorn re-raises the SIGTERM)."""
    from scheduler.api.app import create_app, start_services
    from scheduler.settings import load_settings

    svc = start_services(load_settings(), timeout_s=float(os.environ.get(_TIMEOUT_ENV, "5")))
    return create_app(svc, close_at_shutdown=True)


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)  # a stop request, as for every ksched process
