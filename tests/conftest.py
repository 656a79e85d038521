"""Test session harness.

One real Apache Kafka broker per test session, started through the same code
as ``ksched kafka start`` (or the cluster named by ``KSCHED_BOOTSTRAP``, with the
security settings of the environment). It is authenticated like every embedded
broker (SASL/SCRAM, ACLs, default deny); its credentials file is handed to every
client through ``KSCHED_CREDENTIALS_FILE``. It runs
on its own ports and data dir so a ``make run`` demo on the defaults is never
touched. Each run gets its own topic namespace. If the broker cannot start,
every Kafka test errors with the reason: nothing is skipped.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from scheduler.settings import Settings, load_settings

# The private PostgreSQL server of the idempotency tests: fixtures postgres_server, pg_dsn.
pytest_plugins = ["pg_fixture"]

TEST_KAFKA_PORT = int(os.environ.get("KSCHED_TEST_KAFKA_PORT", "19092"))


# Set by kafka_bootstrap for the embedded test broker: where its credentials are.
_BROKER_ENV: dict[str, str] = {}


# KSCHED_TEST_BROKER: the embedded broker (default), or the same broker config in an apache/kafka
# container started through testcontainers (needs Docker; tests/container_broker.py).
TEST_BROKERS = ("embedded", "testcontainers")


def broker_choice(env: Mapping[str, str]) -> str:
    """``KSCHED_TEST_BROKER`` (default embedded); anything else fails the session with one line."""
    choice = env.get("KSCHED_TEST_BROKER", "embedded")
    if choice not in TEST_BROKERS:
        pytest.fail(f"KSCHED_TEST_BROKER={choice!r}: not one of {', '.join(TEST_BROKERS)}", pytrace=False)
    return choice


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("KSCHED_BOOTSTRAP")
    if external:
        yield external
        return
    if broker_choice(os.environ) == "testcontainers":
        yield from _container_bootstrap(tmp_path_factory.mktemp("kafka-container"))
        return
    from scheduler.localbroker import BrokerConfig, LocalBroker, LocalBrokerError

    base = load_settings(env={})
    data_root = Path(os.environ.get("KSCHED_TEST_KAFKA_DATA", base.kafka_data_dir.parent / "test-kafka"))
    broker = LocalBroker(
        BrokerConfig(
            version=base.kafka_version,
            port=TEST_KAFKA_PORT,
            controller_port=TEST_KAFKA_PORT + 1,
            heap_mb=base.kafka_heap_mb,
            cache_dir=Path(os.environ.get("KSCHED_KAFKA_CACHE_DIR", base.kafka_cache_dir)),
            data_dir=data_root,
        )
    )
    was_running = broker.status().running
    try:
        # A broker this session starts starts from empty storage: test data is disposable, and
        # each session starts from the same state; one left running (KSCHED_TEST_KEEP_KAFKA) is reused.
        broker.start(fresh=not was_running)
    except LocalBrokerError as exc:
        pytest.fail(f"the test Kafka broker could not start: {exc}", pytrace=False)
    _BROKER_ENV.update(
        {
            "KSCHED_CREDENTIALS_FILE": str(broker.credentials_file),
            "KSCHED_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        }
    )
    yield broker.bootstrap
    if not was_running and os.environ.get("KSCHED_TEST_KEEP_KAFKA") != "1":
        broker.stop()


def _container_bootstrap(folder: Path) -> Iterator[str]:
    from container_broker import ContainerBrokerError, container_broker

    failure = ""
    try:
        with container_broker(folder, TEST_KAFKA_PORT, load_settings(env={}).kafka_version) as credentials:
            _BROKER_ENV.update({"KSCHED_CREDENTIALS_FILE": str(credentials),
                                "KSCHED_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
            yield f"127.0.0.1:{TEST_KAFKA_PORT}"
    except ContainerBrokerError as exc:
        failure = str(exc)
    if failure:  # outside the except block: one line, no chained exception
        pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="session")
def namespace() -> str:
    return f"kst-{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def kafka_settings(
    kafka_bootstrap: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """Settings for this run: the test broker, a fresh namespace, a temp tenants file."""
    tenants_file = tmp_path_factory.mktemp("tenants") / "tenants.toml"
    env = {
        "KSCHED_BOOTSTRAP": kafka_bootstrap,
        "KSCHED_NAMESPACE": namespace,
        "KSCHED_TENANTS_FILE": str(tenants_file),
        "KSCHED_PARTITIONS": "4",
        **_BROKER_ENV,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # subprocesses and CLI entry points see the same settings
    settings = load_settings()
    from scheduler.access_admin import ensure_services, forget_namespace

    ensure_services(settings)  # the processor's principal and ACLs: every test's processor runs as it
    yield settings
    from scheduler.kafka.admin import admin_client

    admin = admin_client(settings.kafka())
    names = [n for n in admin.list_topics(timeout=10).topics if n.startswith(namespace + ".")]
    if names:
        for f in admin.delete_topics(names, operation_timeout=30).values():
            f.result(60)  # wait: a client dropped at once may never send the request
    forget_namespace(settings)  # its principals' ACLs, credentials and kept passwords
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
