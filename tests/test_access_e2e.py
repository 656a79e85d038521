"""Tenancy enforced by the real, authenticated broker (docs/security.md): tenant alpha's
principal is refused everything of tenant bravo's, of the processor's and of the cluster's; it may
do its own. Prefixes end with a delimiter (acme never sees acme-corp's). Rotation kills the old
password. Errors are one line naming the principal, the resource and the fix (CLI exit 2, SDK
typed exceptions), quickly."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclBinding, AclBindingFilter, NewTopic
from namespaces import own_namespace

from scheduler.cli import main
from scheduler.client import AccessDenied, AccessError, AuthenticationFailed, SchedulerClient
from scheduler.domain import ScheduleSpec
from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import consumer_config, producer_config
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.errors import auth_error_cb
from scheduler.kafka.reader import all_partitions
from scheduler.principals import as_admin, as_tenant
from scheduler.settings import Settings

TENANTS = ("alpha", "bravo", "acme", "acme-corp", "acmecorp")
PER_TENANT = ("commands", "results", "schedules", "dispatch", "versions", "occurrence-events", "dlq")
TENANT_READS = PER_TENANT[1:]


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A namespace of its own (the session's has tenants of these names) with the tenants, each
    with its principal and ACLs; every per-tenant topic exists (commands and results too, whichever
    topology the topics file declares, so the test pins the names). The CLI sees it through the
    environment for the module."""
    with own_namespace(kafka_settings, "acl", tmp_path_factory.mktemp("acl") / "tenants.toml") as settings:
        for t in TENANTS:
            assert main(["tenants", "add", t]) == 0
        ns = settings.namespace
        admin = admin_client(as_admin(settings))
        have = admin.list_topics(timeout=10).topics
        names = [f"{ns}.{k}.{t}" for k in PER_TENANT for t in TENANTS]
        new = [NewTopic(n, 1, 1) for n in names if n not in have]
        if new:
            for f in admin.create_topics(new, operation_timeout=30).values():
                f.result(60)
        yield settings


def _code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return int(exc.args[0].code())


def _produce_error(conn: KafkaConnection, topic: str) -> int | None:
    """The delivery error code of one record to ``topic`` as ``conn`` (None: written)."""
    p = Producer(producer_config(conn, **{"message.timeout.ms": 10_000}))
    seen: list[KafkaError | None] = []
    p.produce(topic, b"x", b"k", on_delivery=lambda err, _m: seen.append(err))
    p.flush(15)
    assert seen, "no delivery report"
    return None if seen[0] is None else int(seen[0].code())


def _consume_error(conn: KafkaConnection, topic: str, group: str | None = None) -> int | None:
    """The first error a consumer subscribed to ``topic`` in ``group`` (default: a group of
    ``conn``'s own) gets, or None once it was given partitions. (An assign()-only reader of a
    topic it may not describe just never gets a leader: the broker's answer is in the metadata,
    checked too.)"""
    c = Consumer(consumer_config(conn, group or f"{conn.group_prefix}probe-{uuid.uuid4().hex[:8]}",
                                 **{"session.timeout.ms": 6000}))
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            assert meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, meta.error
        c.subscribe([topic])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                return int(m.error().code())
            if c.assignment():
                assert meta.error is None
                return None  # joined and was given partitions
        raise AssertionError(f"neither an error nor partitions for {topic} within 20 s")
    finally:
        c.close()


def test_alpha_may_not_touch_bravos_topics(cluster: Settings) -> None:
    ns, alpha = cluster.namespace, as_tenant(cluster, "alpha")
    assert _produce_error(alpha, f"{ns}.commands.bravo") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    for kind in TENANT_READS:
        assert _consume_error(alpha, f"{ns}.{kind}.bravo") == KafkaError.TOPIC_AUTHORIZATION_FAILED, kind
    # the cluster's own topics are the processor's
    for name in ("schedules", "state", "schedule-history", "shards"):
        assert _consume_error(alpha, f"{ns}.{name}") == KafkaError.TOPIC_AUTHORIZATION_FAILED, name


def test_alpha_may_use_its_own(cluster: Settings) -> None:
    ns, alpha = cluster.namespace, as_tenant(cluster, "alpha")
    assert _produce_error(alpha, f"{ns}.commands.alpha") is None
    for kind in TENANT_READS:
        c = Consumer(consumer_config(alpha))
        try:
            assert all_partitions(c, f"{ns}.{kind}.alpha")
        finally:
            c.close()
    assert _consume_error(alpha, f"{ns}.dispatch.alpha", f"{ns}.tenant.alpha.worker") is None
    p = Producer(producer_config(alpha, **{"transactional.id": f"{ns}.tenant.alpha.tx"}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(f"{ns}.commands.alpha", b"x", b"k")
    p.commit_transaction(30)


def test_alpha_may_not_join_bravos_group_nor_use_foreign_transactional_ids(cluster: Settings) -> None:
    ns, alpha = cluster.namespace, as_tenant(cluster, "alpha")
    got = _consume_error(alpha, f"{ns}.dispatch.alpha", f"{ns}.tenant.bravo.worker")
    assert got == KafkaError.GROUP_AUTHORIZATION_FAILED
    for tid in (f"{ns}.processor.shard-0", f"{ns}.tenant.bravo.x"):
        p = Producer(producer_config(alpha, **{"transactional.id": tid}))
        with pytest.raises(KafkaException) as info:
            p.init_transactions(20)
        assert _code(info.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, tid


def test_alpha_may_not_create_or_delete_topics_nor_alter_acls(cluster: Settings) -> None:
    ns, alpha = cluster.namespace, as_tenant(cluster, "alpha")
    admin = admin_client(alpha)
    denied = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    for f in admin.create_topics([NewTopic(f"{ns}.dispatch.alpha2", 1, 1)], operation_timeout=10).values():
        with pytest.raises(KafkaException) as info:
            f.result(30)
        assert _code(info.value) in denied
    for topic in (f"{ns}.dispatch.bravo", f"{ns}.dispatch.alpha"):
        for f in admin.delete_topics([topic], operation_timeout=10).values():
            with pytest.raises(KafkaException) as info:
                f.result(30)
            assert _code(info.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
    grant = AclBinding("TOPIC", f"{ns}.dispatch.bravo", "LITERAL", "User:x", "*", "READ", "ALLOW")
    for f in admin.create_acls([grant]).values():
        with pytest.raises(KafkaException) as info:
            f.result(30)
        assert _code(info.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    anything: Any = AclBindingFilter("ANY", None, "ANY", None, None, "ANY", "ANY")  # type: ignore[arg-type]
    for f in admin.delete_acls([anything]).values():
        with pytest.raises(KafkaException) as info:
            f.result(30)
        assert _code(info.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_prefixes_end_with_a_delimiter(cluster: Settings) -> None:
    ns = cluster.namespace
    for me, other in (("acme", "acme-corp"), ("acme", "acmecorp"), ("acme-corp", "acme")):
        conn = as_tenant(cluster, me)
        assert _consume_error(conn, f"{ns}.dispatch.{other}") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        got = _consume_error(conn, f"{ns}.dispatch.{me}", f"{ns}.tenant.{other}.worker")
        assert got == KafkaError.GROUP_AUTHORIZATION_FAILED, (me, other)


def _logs_in(conn: KafkaConnection, timeout_s: float = 10) -> bool:
    """True once a fresh client as ``conn`` gets metadata; False when the broker refuses its login."""
    p = Producer(conn.config(log_level=0, error_cb=auth_error_cb(conn.who)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            p.list_topics(timeout=0.5)
            return True
        except KafkaException:
            try:
                p.poll(0.1)
            except AuthenticationFailed:
                return False
    raise AssertionError("neither logged in nor refused")


def test_rotation_kills_the_old_password(cluster: Settings) -> None:
    old = as_tenant(cluster, "bravo")
    assert _logs_in(old)
    assert main(["tenants", "rotate-credentials", "bravo"]) == 0
    new = as_tenant(cluster, "bravo")
    assert new.security["sasl.password"] != old.security["sasl.password"]
    assert _logs_in(new)
    assert not _logs_in(old)


# -- clear errors (issue 11 item 6) ----------------------------------------------------------------
def _as(cluster: Settings, user: str, password: str) -> Settings:
    return cluster.replace(sasl_username=user, sasl_password=password)


def test_sdk_wrong_password_is_one_typed_error_quickly(cluster: Settings) -> None:
    user = f"{cluster.namespace}.tenant.alpha"
    t0 = time.monotonic()
    with pytest.raises(AuthenticationFailed) as info:
        SchedulerClient(_as(cluster, user, "not-the-password"), tenant="alpha")
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert "\n" not in msg and f"User:{user}" in msg and "rotate-credentials" in msg
    assert isinstance(info.value, AccessError)


def test_sdk_touching_another_tenant_is_access_denied(cluster: Settings) -> None:
    with SchedulerClient(cluster, tenant="alpha", timeout_s=5) as client:
        with pytest.raises(AccessDenied, match=r"tenant alpha's client and may not send tenant bravo's"):
            client.create("bravo", ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h"))
        assert client.get("alpha", "s" * 32) is None  # its own schedules copy: readable
        with pytest.raises(AccessDenied) as info:  # bravo's schedules (and payloads) are not
            client.get("bravo", "s" * 32)
    msg = str(info.value)
    assert f"User:{cluster.namespace}.tenant.alpha" in msg and f"{cluster.namespace}.schedules.bravo" in msg
    assert "TOPIC_AUTHORIZATION_FAILED" in msg and "docs/security.md" in msg


def test_cli_access_errors_are_one_line_and_exit_2(
    cluster: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = f"{cluster.namespace}.tenant.alpha"
    monkeypatch.setenv("KSCHED_SASL_USERNAME", user)
    monkeypatch.setenv("KSCHED_SASL_PASSWORD", as_tenant(cluster, "alpha").security["sasl.password"])
    capsys.readouterr()
    assert main(["dlq", "list", "--tenant", "bravo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"User:{user}" in err and f"{cluster.namespace}.dlq.bravo" in err
    assert "Traceback" not in err
    monkeypatch.setenv("KSCHED_SASL_PASSWORD", "wrong")
    t0 = time.monotonic()
    assert main(["dlq", "list", "--tenant", "alpha"]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - t0 < 10
    assert "\n" not in err and "refused the login" in err and f"User:{user}" in err


def test_sdk_whose_acls_are_taken_away_gets_access_denied_every_time(cluster: Settings) -> None:
    """The second refusal may come from ``produce`` itself (librdkafka caches the topic's refusal),
    the first from the delivery report: both are the same one-line AccessDenied."""
    from scheduler.access import tenant as tenant_principal
    from scheduler.kafka.acls import delete_principal_acls

    assert main(["tenants", "add", "gone-acls"]) == 0
    with SchedulerClient(cluster, tenant="gone-acls", timeout_s=5) as client:
        spec = ScheduleSpec(kind="cron", cron="* * * * *", timezone="UTC", handler="h")
        assert client.get("gone-acls", "s" * 32) is None  # its ACLs work
        principal = tenant_principal(cluster.namespace, "gone-acls").kafka_principal
        assert delete_principal_acls(admin_client(as_admin(cluster)), principal) > 0
        for attempt in range(3):
            with pytest.raises(AccessDenied, match=rf"{cluster.namespace}\.commands\.gone-acls"):
                client.create("gone-acls", spec, key=f"after-{attempt}")
