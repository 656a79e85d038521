"""Authentication and authorization failures as one-line, typed errors.

librdkafka reports a refused login only through the error callback (``_AUTHENTICATION``,
retried for ever) and a refused request as an error code on the topic, group or
transactional id (``*_AUTHORIZATION_FAILED``). The clients made from a
:class:`~scheduler.kafka.connection.KafkaConnection` turn the first into
:class:`AuthenticationFailed` raised from the next ``poll``/``flush``/``consume``, and
:func:`denied` turns the second into :class:`AccessDenied`. Both name the principal, the
resource and the fix; the CLI prints the message and exits 2, the SDK raises them as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

FIX_CREDENTIALS = (
    "check KSCHED_SASL_USERNAME / KSCHED_SASL_PASSWORD or the credentials file (KSCHED_CREDENTIALS_FILE); "
    "a tenant's password is renewed with `ksched tenants rotate-credentials NAME`"
)
FIX_ACL = (
    "use the credentials of the principal that owns it (a tenant may only touch its own "
    "topics, groups and transactional ids), or have the admin grant an ACL: docs/security.md"
)

_WHAT = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}


class AccessError(Exception):
    """The broker refused this principal: a wrong password or a missing ACL. One line, with the fix."""


class AuthenticationFailed(AccessError):
    """The broker refused the login (wrong user or password)."""


class AccessDenied(AccessError):
    """The broker refused a request on a resource this principal has no ACL for."""

    def __init__(self, message: str, *, principal: str = "", resource: str = "") -> None:
        super().__init__(message)
        self.principal, self.resource = principal, resource


def is_denial(err: KafkaError | None) -> bool:
    return err is not None and err.code() in _WHAT


def denied(who: str, err: KafkaError, resource: str, action: str = "use") -> AccessDenied:
    """The :class:`AccessDenied` for ``err`` (one of the ``*_AUTHORIZATION_FAILED`` codes) on
    ``resource`` (a name; the kind comes from the code) by ``who`` (``User:NAME at HOST``)."""
    kind = _WHAT.get(err.code(), "resource")
    return AccessDenied(
        f"{who or 'this client'} may not {action} {kind} {resource} ({err.name()}): {FIX_ACL}",
        principal=who, resource=f"{kind} {resource}",
    )


def auth_error_cb(who: str) -> Callable[[KafkaError], None]:
    """An ``error_cb`` raising :class:`AuthenticationFailed` on a refused login (confluent-kafka
    re-raises it from the client's next poll, flush or consume) instead of retrying quietly.
    Other client errors stay librdkafka's business (it retries transport errors itself)."""

    def on_error(err: KafkaError) -> None:
        # Only the broker's refusal: librdkafka also files a connection dropped mid-handshake
        # (a client closing, a broker restarting) under _AUTHENTICATION, and retries it rightly.
        if err.code() == KafkaError._AUTHENTICATION and "Authentication failed" in err.str():
            raise AuthenticationFailed(
                f"Kafka refused the login of {who}: {err.str().split(': ', 1)[-1]}; {FIX_CREDENTIALS}"
            )

    return on_error


def kafka_error(exc: BaseException) -> KafkaException | None:
    """``exc`` as the KafkaException it is or hides; None for any other error.

    It hides one when a Python delivery callback ran while a fatal producer error was pending
    (seen in flush() and commit_transaction() of a fenced transactional producer): the callback's
    first C call raises ``SystemError`` ("returned a result with an exception set") chained to it.
    """
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc, SystemError) and isinstance(exc.__cause__, KafkaException):
        return exc.__cause__
    return None
