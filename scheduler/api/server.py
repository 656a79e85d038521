"""Running the API under uvicorn, and the OpenAPI document committed at ``docs/openapi.json``."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def openapi_document() -> dict[str, Any]:
    """The spec the app serves, without starting anything (no broker, no store)."""
    from scheduler.api.app import create_app

    spec: dict[str, Any] = create_app(None).openapi()  # type: ignore[arg-type]
    return spec


def openapi_text() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def serve(port: int, *, host: str = "127.0.0.1", timeout_s: float = 5.0) -> None:
    """Serve until interrupted; the services are made before the socket opens (a missing registry
    or credential fails here, with its one-line error). Its ``/metrics`` is registered for
    Prometheus' file discovery as job ``ksched-api`` (metrics_endpoint.py), like every process."""
    import uvicorn

    from scheduler.api.app import create_app, start_services
    from scheduler.metrics_endpoint import register, unregister
    from scheduler.settings import load_settings

    # uvicorn stops on SIGTERM, then raises it again under the handler it found: a default one
    # would end the process before the ``finally`` below removes the target file.
    signal.signal(signal.SIGTERM, _exit)
    settings = load_settings()
    svc = start_services(settings, timeout_s=timeout_s)
    target = register(settings.prometheus_targets_dir, "ksched-api", port) if port else None
    try:
        # httptools and uvloop (C) parse HTTP and run the loop for a fraction of h11's and asyncio's
        # CPU: they were a quarter of the API's samples under `ksched bench api` (docs/decisions.md)
        uvicorn.run(create_app(svc), host=host, port=port, log_level="info", access_log=False,
                    http="httptools", loop="uvloop")
    finally:
        if target is not None:
            unregister(target)
        svc.close()


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)  # a stop request, as for every ksched process
