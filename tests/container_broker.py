"""The test session's broker in a container (``KSCHED_TEST_BROKER=testcontainers``).

The official ``apache/kafka`` image of the setting ``kafka_version``, started through the
``testcontainers`` package, running the files ``scheduler.localbroker.container`` writes: the
embedded broker's ``server.properties`` (SASL/SCRAM, ACLs, default deny) and its admin SCRAM user
created at format time, so the suite gets the same authenticated broker and credentials file as
with the embedded one. The container listens on the test port inside and on 127.0.0.1 outside
(the same number, so the advertised 127.0.0.1:port works from both sides) and runs as the caller's
uid, which owns the mounted folder and its 0600 files.

Without Docker this fails with one line (:class:`ContainerBrokerError`), never a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scheduler.localbroker.container import COMMAND, MOUNT, image, write_container_files
from scheduler.settings import load_settings

CHOICE = "KSCHED_TEST_BROKER=testcontainers"


class ContainerBrokerError(RuntimeError):
    """The container broker cannot start; one line naming the reason and the fix."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def container_broker(folder: Path, port: int, version: str, timeout_s: float = 180) -> Iterator[Path]:
    """Run the broker until the block ends; yields its credentials file. Bootstrap: 127.0.0.1:port."""
    try:
        from docker.errors import DockerException
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise ContainerBrokerError(
            f"{CHOICE}: {exc.name} is not installed; run `make install` (the dev extra pins it)"
        ) from None
    credentials = write_container_files(folder, version=version, advertised_host="127.0.0.1",
                                        port=port, controller_port=port + 1)
    try:
        kafka = (
            DockerContainer(image(version))
            .with_bind_ports(port, ("127.0.0.1", port))
            .with_volume_mapping(str(folder), MOUNT, "rw")
            .with_command(list(COMMAND))
            .with_kwargs(user=f"{os.getuid()}:{os.getgid()}")
        )
        kafka.start()
    except DockerException as exc:
        raise ContainerBrokerError(
            f"{CHOICE}: Docker is not reachable ({_first_line(exc)}); start Docker (or set DOCKER_HOST), "
            "or unset KSCHED_TEST_BROKER to use the embedded broker"
        ) from None
    try:
        _wait_ready(f"127.0.0.1:{port}", credentials, timeout_s, folder)
        yield credentials
    finally:
        kafka.stop()


def _wait_ready(bootstrap: str, credentials: Path, timeout_s: float, folder: Path) -> None:
    """Until the admin logs in over SASL and lists the topics (the broker is up and its SCRAM user exists)."""
    from scheduler.kafka.admin import admin_client

    settings = load_settings(env={"KSCHED_BOOTSTRAP": bootstrap, "KSCHED_CREDENTIALS_FILE": str(credentials)})
    deadline = time.monotonic() + timeout_s
    while True:
        try:  # a new client each time: its creation checks the login, which fails until the broker is up
            admin_client(settings.kafka(), log_level=0).list_topics(timeout=5)
            return
        except Exception as exc:  # any failure until the deadline means "not yet"
            if time.monotonic() > deadline:
                raise ContainerBrokerError(
                    f"{CHOICE}: the broker did not serve {bootstrap} within {timeout_s:.0f} s "
                    f"({_first_line(exc)}); its log is in {folder / 'logs'}"
                ) from None
            time.sleep(1)
