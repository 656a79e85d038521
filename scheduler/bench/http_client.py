"""A minimal keep-alive HTTP/1.1 client on asyncio streams, for the benches that load the API.

httpx spent more CPU per request than the API it measured (``ksched bench api``: ~3.3 ms of the
client's against ~2.6 ms of the server's), on the same two cores: this one writes the request in
one buffer and reads the answer by its Content-Length, nothing more (no redirects, no chunked
bodies, no TLS, no pooling: one connection per instance, one request at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


class HttpError(RuntimeError):
    """The server's answer is not one this client reads (no Content-Length, a closed connection)."""


class Connection:
    """One keep-alive connection to ``host:port``; ``headers`` go with every request."""

    def __init__(self, host: str, port: int, headers: dict[str, str] | None = None) -> None:
        self.host, self.port = host, port
        fixed = {"Host": f"{host}:{port}", **(headers or {})}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):  # the server closed first: nothing left to close
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of one request; the connection is opened (again) as needed."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        extra = "" if body is None else f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self._writer.write(f"{method} {path} HTTP/1.1\r\n{self._head}{extra}\r\n".encode("latin-1")
                           + (body or b""))
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            await self.close()
            raise HttpError(f"{method} {path}: the server closed the connection before answering") from None
        status, length, close = _parse_head(head)
        if length is None:
            await self.close()
            raise HttpError(f"{method} {path}: an answer without Content-Length (status {status})")
        data = await self._reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return status, data

    async def get(self, path: str) -> tuple[int, bytes]:
        return await self.request("GET", path)

    async def post_json(self, path: str, doc: Any) -> tuple[int, bytes]:
        return await self.request("POST", path, json.dumps(doc).encode())


def _parse_head(head: bytes) -> tuple[int, int | None, bool]:
    """``(status, Content-Length or None, whether the server closes)`` of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length: int | None = None
    close = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            close = value.strip().lower() == "close"
    return status, length, close
