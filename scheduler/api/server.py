"""Running the API under uvicorn, and the OpenAPI document committed at ``docs/openapi.json``."""

from __future__ import annotations

import json
from pathlib import Path
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
    or credential fails here, with its one-line error)."""
    import uvicorn

    from scheduler.api.app import create_app, start_services
    from scheduler.settings import load_settings

    svc = start_services(load_settings(), timeout_s=timeout_s)
    try:
        uvicorn.run(create_app(svc), host=host, port=port, log_level="info", access_log=False)
    finally:
        svc.close()
