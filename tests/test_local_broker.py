"""The embedded local broker: one-line errors (pure) and a real start/stop cycle (``kafka``).

The integration test starts a broker of its own on free ports with a temporary
data dir (sharing the real jar cache), so it never touches one on 9092 nor the
session broker of conftest. It starts a broker twice: ``start`` and ``--fresh``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.localbroker import (
    BrokerConfig,
    LocalBroker,
    LocalBrokerError,
    find_java,
    kafka_uuid,
    last_maven_error,
    parse_java_major,
    port_in_use,
    server_properties,
)
from scheduler.settings import load_settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _broker(tmp_path: Path, port: int, controller_port: int, **kw: object) -> LocalBroker:
    return LocalBroker(
        BrokerConfig(
            port=port,
            controller_port=controller_port,
            cache_dir=Path(kw.pop("cache_dir", tmp_path / "cache")),  # type: ignore[arg-type]
            data_dir=tmp_path / "data",
            **kw,  # type: ignore[arg-type]
        )
    )


# ------------------------------------------------------------------ Java


def _fake_java_home(tmp_path: Path, version_line: str) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return home


def test_old_java_from_java_home_names_version_path_and_fix(tmp_path: Path) -> None:
    home = _fake_java_home(tmp_path, 'openjdk version "11.0.20" 2023-07-18')
    with pytest.raises(LocalBrokerError) as err:
        find_java({"JAVA_HOME": str(home), "PATH": os.environ.get("PATH", "")})
    msg = str(err.value)
    assert msg == (
        f"Java 17+ is required: found 11 at {home}/bin/java; install openjdk-17-jre or set JAVA_HOME"
    )
    assert "\n" not in msg


def test_java_8_version_scheme_is_understood(tmp_path: Path) -> None:
    home = _fake_java_home(tmp_path, 'java version "1.8.0_292"')
    with pytest.raises(LocalBrokerError, match=r"found 8 at"):
        find_java({"JAVA_HOME": str(home)})


def test_java_home_without_java(tmp_path: Path) -> None:
    with pytest.raises(LocalBrokerError, match=r"has no bin/java; point JAVA_HOME"):
        find_java({"JAVA_HOME": str(tmp_path)})


def test_no_java_on_path(tmp_path: Path) -> None:
    with pytest.raises(LocalBrokerError, match=r"no java is on PATH; install openjdk-17"):
        find_java({"PATH": str(tmp_path)})


def test_new_enough_java_from_java_home_is_accepted(tmp_path: Path) -> None:
    home = _fake_java_home(tmp_path, 'openjdk version "25" 2025-09-16')
    assert find_java({"JAVA_HOME": str(home)}) == (home / "bin" / "java", 25)


@pytest.mark.parametrize(
    ("text", "major"), [("17.0.15", 17), ("1.8.0_292", 8), ("21", 21), ("25-ea", 25), ("x", None)]
)
def test_parse_java_major(text: str, major: int | None) -> None:
    assert parse_java_major(text) == major


# ------------------------------------------------------------------ ports


def test_port_taken_by_another_process_is_named_before_anything_is_fetched(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert port_in_use(port)
        broker = _broker(tmp_path, port, _free_port())
        with pytest.raises(LocalBrokerError) as err:
            broker.start(timeout_s=5)
    msg = str(err.value)
    assert f"port {port} (listener) on 127.0.0.1 is already in use by pid {os.getpid()}" in msg
    assert "KSCHED_KAFKA_PORT" in msg and "\n" not in msg
    assert not (tmp_path / "cache").exists()  # failed before Maven
    assert not port_in_use(port)


def test_controller_port_taken(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        cport = holder.getsockname()[1]
        with pytest.raises(
            LocalBrokerError, match=rf"port {cport} \(controller\).*KSCHED_KAFKA_CONTROLLER_PORT"
        ):
            _broker(tmp_path, _free_port(), cport).start(timeout_s=5)


# ------------------------------------------------------------------ Maven and the cache


def test_maven_missing_is_one_line_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither mvn nor java
    with pytest.raises(LocalBrokerError) as err:
        _broker(tmp_path, _free_port(), _free_port()).ensure_artifacts()
    assert str(err.value).startswith("Maven is required once to fetch Kafka 4.1.1 into ")
    assert str(err.value).endswith("install maven (apt-get install maven) and retry")


MVN_FAILURE = """\
\x1b[0m[ERROR] Failed to execute goal on project ksched-local-kafka: Could not resolve dependencies for \
project dev.ksched.local:ksched-local-kafka:pom:9.9.9: Could not find artifact \
org.apache.kafka:kafka_2.13:jar:9.9.9 in central (https://repo.maven.apache.org/maven2) -> [Help 1]
[ERROR]\x20
[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.
[ERROR] Re-run Maven using the -X switch to enable full debug logging.
[ERROR]\x20
[ERROR] For more information about the errors and possible solutions, please read the following articles:
[ERROR] [Help 1] http://cwiki.apache.org/confluence/display/MAVEN/DependencyResolutionException
"""


def test_last_meaningful_maven_line() -> None:
    line = last_maven_error(MVN_FAILURE)
    assert line.startswith("Failed to execute goal on project ksched-local-kafka")
    assert line.endswith("Could not find artifact org.apache.kafka:kafka_2.13:jar:9.9.9 in central "
                         "(https://repo.maven.apache.org/maven2)")  # fmt: skip


def test_partial_download_is_not_reused(tmp_path: Path) -> None:
    broker = _broker(tmp_path, _free_port(), _free_port())
    broker.libs_dir.mkdir(parents=True)
    (broker.libs_dir / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    assert not broker.artifacts_ready()  # no marker
    broker.marker.write_text(json.dumps({"jars": ["kafka_2.13-4.1.1.jar", "kafka-clients-4.1.1.jar"]}))
    assert not broker.artifacts_ready()  # a listed jar is missing
    (broker.libs_dir / "kafka-clients-4.1.1.jar").write_bytes(b"")
    assert broker.artifacts_ready()


# ------------------------------------------------------------------ stop safety and config


def test_stop_never_signals_a_pid_that_is_not_our_broker(tmp_path: Path) -> None:
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        broker = _broker(tmp_path, _free_port(), _free_port())
        broker.data_dir.mkdir(parents=True)
        broker.pid_file.write_text(f"{stranger.pid}\n")
        assert broker.stop(timeout_s=1) is False
        assert stranger.poll() is None
        assert not broker.status().running
        assert not broker.pid_file.exists()  # the stale pid file is dropped, the process left alone
    finally:
        stranger.kill()
        stranger.wait()


def test_server_properties_single_node_kraft_on_loopback(tmp_path: Path) -> None:
    cfg = BrokerConfig(port=1234, controller_port=1235, cache_dir=tmp_path, data_dir=tmp_path)
    props = dict(
        line.split("=", 1)
        for line in server_properties(cfg, tmp_path / "kraft").splitlines()
        if line and not line.startswith("#")
    )
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:1234,CONTROLLER://127.0.0.1:1235"
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:1235"
    assert "controller.quorum.voters" not in props  # rejected together with --standalone
    for key in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert props[f"{key}.replication.factor"] == "1"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_cluster_id_has_kafka_uuid_shape() -> None:
    ids = {kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    for i in ids:
        assert len(i) == 22 and not i.startswith("-")
        assert set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


# ------------------------------------------------------------------ a real broker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    cache = Path(os.environ.get("KSCHED_KAFKA_CACHE_DIR") or load_settings(env={}).kafka_cache_dir)
    broker = _broker(tmp_path, _free_port(), _free_port(), cache_dir=cache, heap_mb=512)
    assert broker.config.port != 9092
    yield broker
    broker.stop(timeout_s=10)


@pytest.mark.kafka
def test_start_status_idempotent_stop_and_fresh(own_broker: LocalBroker) -> None:
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = own_broker
    st = b.start(timeout_s=180)
    assert st.running and st.healthy, st.detail
    assert st.version is not None and st.version.startswith("4.")
    assert st.listener == f"127.0.0.1:{b.config.port}" == b.bootstrap
    assert st.data_dir == b.data_dir and (b.data_dir / "kraft" / "meta.properties").is_file()
    pid = st.pid
    assert pid is not None and b.pid_file.read_text().strip() == str(pid)

    t0 = time.monotonic()
    again = b.start()
    assert again.pid == pid and again.healthy
    assert time.monotonic() - t0 < 5, "a second start must reuse the running broker"

    with pytest.raises(KafkaException):  # no credentials, no metadata: the listener is SASL only
        AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0}).list_topics(timeout=3)
    conn = b.connection()  # the admin, from the credentials file written at first start
    assert (b.credentials_file.stat().st_mode & 0o777) == 0o600
    assert (b.server_properties.stat().st_mode & 0o777) == 0o600
    admin = AdminClient(conn.config())
    for f in admin.create_topics([NewTopic("probe", 1, 1)], operation_timeout=30).values():
        f.result()
    p = Producer(conn.config(**{"transactional.id": "probe-tx"}))
    t0 = time.monotonic()
    p.init_transactions(30)  # the first one creates __transaction_state (about 1-2 s)
    assert time.monotonic() - t0 < 20
    p.begin_transaction()
    p.produce("probe", value=b"x")
    p.commit_transaction(30)
    assert "probe" in b.status().topics
    assert "Kafka Server started" in b.logs(400)

    assert b.stop(timeout_s=30) is True
    after = b.status()
    assert not after.running and not after.healthy and after.pid is None
    assert not b.pid_file.exists()
    assert b.stop() is False

    fresh = b.start(fresh=True, timeout_s=120)
    assert fresh.healthy and fresh.pid != pid
    assert "probe" not in fresh.topics


@pytest.mark.kafka
def test_restart_after_revoking_users_keeps_every_credential(own_broker: LocalBroker) -> None:
    """Kafka 4.1-4.4 lost every SCRAM user when a restart replayed a metadata log holding a deleted
    one from an empty image (the suite's removed tenants did it: the admin was refused after a
    restart). ksched revokes instead of deleting; the restart here comes before the first
    metadata snapshot, so the whole log is replayed."""
    from confluent_kafka.admin import AdminClient

    from scheduler.kafka.acls import revoke_scram, upsert_scram

    b = own_broker
    b.start(timeout_s=180)
    admin = AdminClient(b.connection().config())
    users = {f"user-{i:03d}": f"pw-{i:03d}-secret" for i in range(30)}
    for user, password in users.items():
        upsert_scram(admin, user, password)
    revoked = sorted(users)[::2]
    assert "user-012" in revoked
    for user in revoked:
        revoke_scram(admin, user)
    assert b.stop(timeout_s=30)
    b.start(timeout_s=120)  # logs in as the admin: raised before the fix

    def login(user: str) -> bool:
        conf = {**b.connection().config(), "sasl.username": user, "sasl.password": users[user]}
        try:
            AdminClient({**conf, "log_level": 0}).list_topics(timeout=5)
            return True
        except Exception:
            return False

    kept = next(u for u in users if u not in revoked)
    assert login(kept), "a user that was never revoked must still log in after the restart"
    assert not login(revoked[0]), "a revoked user's old password must stay refused"


def test_a_data_dir_formatted_without_authentication_is_detected(tmp_path: Path) -> None:
    """An older ksched formatted storage with no SCRAM user: start() wipes and reformats it."""
    from scheduler.localbroker.config import AUTH_MARKER
    from scheduler.localbroker.storage import DataDir

    cfg = BrokerConfig(port=1234, controller_port=1235, cache_dir=tmp_path, data_dir=tmp_path / "d")
    store = DataDir(tmp_path / "d", cfg)
    assert not store.unauthenticated()  # never formatted: nothing to detect
    (store.kraft_dir).mkdir(parents=True)
    (store.kraft_dir / "meta.properties").write_text("version=1\n")
    store.meta_file.write_text('{"cluster_id": "x", "port": 1234, "controller_port": 1235}')
    assert store.unauthenticated()  # the old broker.json: no auth marker
    assert "wiping it (local dev data)" in store.legacy_notice(None)
    with pytest.raises(LocalBrokerError, match=r"\(pid 4242\) was started without authentication"):
        store.legacy_notice(4242)  # its old broker still runs: refused, never stopped behind its back
    store.meta_file.write_text(f'{{"controller_port": 1235, "auth": "{AUTH_MARKER}"}}')
    assert store.unauthenticated()  # marked, but its credentials file is gone: nobody could log in
    assert store.admin_password() and store.credentials_file.is_file()
    assert (store.credentials_file.stat().st_mode & 0o777) == 0o600
    assert not store.unauthenticated()
    assert store.admin_password() == store.admin_password()  # generated once, then reused
    store.wipe()
    assert not store.credentials_file.exists()
