"""``ksched api --workers N``'s sockets (scheduler/api/reuseport.py), without a broker: the port
checked before it is held, a worker that cannot listen stops the supervisor instead of being
restarted forever. (The workers serving on their own sockets: tests/test_api_e2e.py.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import uvicorn
from uvicorn.config import STARTUP_FAILURE

from scheduler.api.reuseport import OwnSocketProcess, bound_socket, supervise


def _listener(port: int = 0, *, reuseport: bool = False) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(8)
    return s


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    s = _listener()
    yield s
    s.close()


def _config(port: int) -> uvicorn.Config:
    return uvicorn.Config("scheduler.api.server:worker_app", factory=True, workers=2,
                          host="127.0.0.1", port=port)


def test_a_port_another_program_listens_on_is_a_one_line_exit(taken: socket.socket) -> None:
    port = taken.getsockname()[1]
    with pytest.raises(SystemExit) as exc:
        supervise(_config(port))
    assert str(exc.value).startswith(f"ksched api: cannot listen on 127.0.0.1:{port}: ")
    assert "choose another --port" in str(exc.value)


def test_another_ksched_api_on_the_port_is_refused_not_joined() -> None:
    """Its workers listen with SO_REUSEPORT: a second supervisor's own SO_REUSEPORT socket would
    join them and take half the connections; the check without it refuses."""
    other = _listener(reuseport=True)
    try:
        with pytest.raises(SystemExit, match="cannot listen on"):
            supervise(_config(other.getsockname()[1]))
    finally:
        other.close()


def test_a_worker_that_cannot_bind_exits_with_uvicorns_startup_failure() -> None:
    """Another program listens on the port between the supervisor's check and a worker's start:
    the worker exits with STARTUP_FAILURE, which makes uvicorn's supervisor stop rather than
    restart it (an exit status 1 was restarted four times a second, forever)."""
    held = bound_socket("127.0.0.1", 0)
    other = _listener(held.getsockname()[1])  # allowed: the held socket does not listen
    try:
        with pytest.raises(SystemExit) as exc:
            OwnSocketProcess.target(object.__new__(OwnSocketProcess), [held])
        assert exc.value.code == STARTUP_FAILURE
        assert held.fileno() == -1  # the supervisor's socket is not kept by the worker
    finally:
        other.close()
