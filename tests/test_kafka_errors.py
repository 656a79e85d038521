"""``scheduler.kafka.errors``: which client errors become typed access errors (no broker)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from scheduler.kafka.errors import AccessDenied, AuthenticationFailed, auth_error_cb, denied, is_denial

REFUSED = (
    "sasl_plaintext://127.0.0.1:9092/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
    "(after 315ms in state AUTH_REQ)"
)
DROPPED = (
    "GroupCoordinator: SASL authentication error: SaslAuthenticateRequest failed: Local: Broker transport "
    "failure (after 0ms in state DOWN)"
)


def test_a_refused_login_raises_one_line_naming_the_principal_and_the_fix() -> None:
    cb = auth_error_cb("User:ns.tenant.acme at 127.0.0.1:9092")
    with pytest.raises(AuthenticationFailed) as info:
        cb(KafkaError(KafkaError._AUTHENTICATION, REFUSED))
    msg = str(info.value)
    assert "\n" not in msg and "User:ns.tenant.acme" in msg and "invalid credentials" in msg
    assert "rotate-credentials" in msg and "KSCHED_SASL_PASSWORD" in msg


def test_a_dropped_handshake_and_other_errors_are_left_to_librdkafka() -> None:
    cb = auth_error_cb("User:x at h:1")
    cb(KafkaError(KafkaError._AUTHENTICATION, DROPPED))  # a client closing, a broker restarting
    cb(KafkaError(KafkaError._TRANSPORT, "1/1 brokers are down"))
    cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"))


def test_authorization_codes_become_access_denied_naming_the_resource() -> None:
    for code, kind in (
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "topic"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "consumer group"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional id"),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "cluster"),
    ):
        err = KafkaError(code)
        assert is_denial(err)
        exc = denied("User:a at h:1", err, "ns.dispatch.b", "read")
        assert isinstance(exc, AccessDenied) and exc.resource == f"{kind} ns.dispatch.b"
        assert str(exc).startswith(f"User:a at h:1 may not read {kind} ns.dispatch.b (")
        assert "docs/security.md" in str(exc)
    assert not is_denial(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)) and not is_denial(None)
