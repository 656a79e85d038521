"""The read-only web console: one static page and its script on the JSON API (``/console``).

No server-side rendering and no build step: the page calls ``/v1/*`` with the tenant's key like any
client, so it can show nothing the API would not (docs/decisions.md). Not an API operation: left
out of the OpenAPI document.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).resolve().parent / "static"
_TYPES = {
    "console.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# Only this origin's files run or load; no framing; the fragment carrying a key is never a referrer.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return (STATIC / name).read_bytes()


def _file(name: str) -> Response:
    return Response(_read(name), media_type=_TYPES[name], headers=_HEADERS)


@router.get("/console")
def page() -> Response:
    return _file("console.html")


@router.get("/console/console.js")
def script() -> Response:
    return _file("console.js")


@router.get("/console/console.css")
def style() -> Response:
    return _file("console.css")
