"""``ksched api --workers N``: uvicorn's supervisor, each worker on a listening socket of its own.

On the one socket uvicorn shares between its workers, the worker that wakes first drains the
whole accept queue: 64 connections opened at once split 43 / 21 under ``ksched bench api``, and
the busier worker's queue set the latency percentiles (docs/api.md). Here the supervisor checks
that the port is free, then holds it with a socket bound with SO_REUSEPORT that never listens;
each worker (started and restarted by uvicorn's ``Multiprocess``, signals and health checks
included) binds its own SO_REUSEPORT socket at that address, and uvicorn makes it listen once
the worker's app has started: the kernel spreads connections over the listening workers by
their addresses, and gives none to a worker still starting.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any

from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess, multiprocess

log = logging.getLogger("uvicorn.error")


class PortTaken(OSError):
    """``host:port`` cannot be bound or listened on (the message names the fix)."""


def supervise(config: Any) -> None:
    """Run ``config``'s workers until the supervisor is stopped. Where the platform has no
    SO_REUSEPORT, the workers share the supervisor's socket, as with ``uvicorn.run``."""
    if not hasattr(socket, "SO_REUSEPORT"):
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    try:
        _check_free(config.host, config.port)
        held = bound_socket(config.host, config.port)
    except PortTaken as exc:
        raise SystemExit(f"ksched api: {exc}") from None
    host, port = held.getsockname()[:2]
    log.info("ksched api on http://%s:%d, %d workers, a socket each", host, port, config.workers)
    spawn = multiprocess.Process
    # The one name Multiprocess starts and restarts its workers by; replaced in this supervisor
    # process only (a worker unpickles OwnSocketProcess from this module).
    setattr(multiprocess, "Process", OwnSocketProcess)  # noqa: B010
    try:
        Multiprocess(config, sockets=[held]).run()
    finally:
        setattr(multiprocess, "Process", spawn)  # noqa: B010
        held.close()


def _check_free(host: str, port: int) -> None:
    """A socket without SO_REUSEPORT listens on ``host:port`` for a moment: another program's
    server, or another ``ksched api`` whose workers listen there, makes it fail (a socket bound
    with SO_REUSEPORT alone would join theirs)."""
    if port == 0:
        return
    with socket.socket(_family(host)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError as exc:
            raise PortTaken(_taken(host, port, exc)) from None


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with SO_REUSEPORT, not listening (a bound socket that
    does not listen is given no connections)."""
    sock = socket.socket(_family(host))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortTaken(_taken(host, port, exc)) from None
    sock.set_inheritable(True)
    return sock


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _taken(host: str, port: int, exc: OSError) -> str:
    return (f"cannot listen on {host}:{port}: {exc.strerror or exc}: choose another --port (or "
            "--host), or stop the program that listens there")


class OwnSocketProcess(multiprocess.Process):  # type: ignore[misc]
    """A uvicorn worker serving on its own SO_REUSEPORT socket at the held socket's address."""

    def target(self, sockets: list[socket.socket] | None = None) -> None:  # pragma: no cover
        assert sockets, "the supervisor hands its held socket to every worker"
        host, port = sockets[0].getsockname()[:2]
        for held in sockets:
            held.close()
        try:
            own = bound_socket(host, port)  # uvicorn listens on it once the app has started
        except PortTaken as exc:
            log.error("ksched api worker: %s", exc)
            # uvicorn's code for "failed before serving": the supervisor stops instead of
            # restarting a worker that would fail the same way
            sys.exit(STARTUP_FAILURE)
        super().target([own])
