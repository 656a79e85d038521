"""The outermost checks of every request (a pure ASGI middleware): the body's size and content
type, and the catch-all that turns an unexpected error into a 500 problem, never a traceback."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scheduler.api.problems import PROBLEM_JSON, TITLES, ApiProblem, ProblemHTTPException, internal_error

MAX_BODY_BYTES = 1024 * 1024  # a spec's payload is at most 256 KiB (domain bounds), base64 included
_WITH_BODY = ("POST", "PUT", "PATCH")
_JSON_TYPES = ("application/json", "application/merge-patch+json")


class Guard:
    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            problem = self._check(scope)
            if problem is not None:
                await _answer(scope, send, problem.status, problem)
                return
            await self.app(scope, self._counting(receive), sending)
        except ProblemHTTPException as e:  # raised outside FastAPI's handlers: nothing answered yet
            if not started:
                await _answer(scope, send, e.problem.status, e.problem)
        except Exception as exc:
            if not started:
                status, body = internal_error(scope["path"], scope["method"], exc)
                await _send(send, status, body, {})

    def _check(self, scope: Scope) -> ApiProblem | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max:
            return _too_large(int(length), self.max)
        has_body = (length not in (None, "0")) or "transfer-encoding" in headers
        if scope["method"] in _WITH_BODY and has_body:
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media not in _JSON_TYPES:
                return ApiProblem(
                    415,
                    "unsupported-media-type",
                    f"Content-Type: {media or 'none'!r} is not accepted: send the body as application/json",
                    field="Content-Type",
                )
        return None

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max:
                raise ProblemHTTPException(_too_large(seen, self.max))
            return message

        return counted


def _too_large(size: int, limit: int) -> ApiProblem:
    return ApiProblem(
        413,
        "body-too-large",
        f"body: {size} bytes is over the limit of {limit} bytes: send a smaller payload "
        "(a spec's payload is at most 256 KiB)",
        field="body",
    )


async def _answer(scope: Scope, send: Send, status: int, p: ApiProblem) -> None:
    import json

    body = {
        "type": f"urn:ksched:problem:{p.slug}",
        "title": TITLES[p.slug],
        "status": status,
        "detail": p.detail,
        "instance": scope["path"],
        **({"field": p.field} if p.field else {}),
    }
    await _send(send, status, json.dumps(body).encode(), p.headers)


async def _send(send: Send, status: int, body: bytes, headers: dict[str, Any]) -> None:
    raw = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), str(v).encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
