"""``ksched api --workers N``: uvicorn's supervisor, each worker on a listening socket of its own.

On the one socket uvicorn shares between its workers, the worker that wakes first drains the
whole accept queue: 64 connections opened at once split 43 / 21 under ``ksched bench api``, and
the busier worker's queue set the latency percentiles (docs/api.md). Here the supervisor holds
the port with a bound socket that never listens, and each worker (started and restarted by
uvicorn's ``Multiprocess``, signals and health checks included) listens on its own socket bound
with SO_REUSEPORT: the kernel spreads the connections over the workers by their addresses.
"""

from __future__ import annotations

import socket
from typing import Any

from uvicorn.supervisors import Multiprocess, multiprocess


def supervise(config: Any) -> None:
    """Run ``config``'s workers until the supervisor is stopped. Where the platform has no
    SO_REUSEPORT, the workers share the supervisor's socket, as with ``uvicorn.run``."""
    if not hasattr(socket, "SO_REUSEPORT"):
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    held = listening_socket(config.host, config.port, listen=False)
    spawn = multiprocess.Process
    # The one name Multiprocess starts and restarts its workers by; replaced in this supervisor
    # process only (a worker unpickles OwnSocketProcess from this module).
    setattr(multiprocess, "Process", OwnSocketProcess)  # noqa: B010
    try:
        Multiprocess(config, sockets=[held]).run()
    finally:
        setattr(multiprocess, "Process", spawn)  # noqa: B010
        held.close()


def listening_socket(host: str, port: int, *, listen: bool) -> socket.socket:
    """A TCP socket on ``host:port`` with SO_REUSEPORT (bound only, or listening too); a port held
    by another program is a one-line exit naming the fix."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(
            f"ksched api: cannot listen on {host}:{port}: {exc.strerror}: choose another --port "
            "or stop the program that holds it"
        ) from None
    if listen:
        sock.listen(2048)  # uvicorn's default backlog
    sock.set_inheritable(True)
    return sock


class OwnSocketProcess(multiprocess.Process):  # type: ignore[misc]
    """A uvicorn worker serving on its own SO_REUSEPORT socket at the held socket's address."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        assert sockets, "the supervisor hands its held socket to every worker"
        host, port = sockets[0].getsockname()[:2]
        for held in sockets:
            held.close()  # bound but not listening: the kernel gives it no connections anyway
        super().target([listening_socket(host, port, listen=True)])
