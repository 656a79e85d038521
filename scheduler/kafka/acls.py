"""Applying principals to a cluster: SCRAM credentials and ACLs through confluent-kafka's AdminClient.

Knows Kafka and nothing of the domain: the caller passes bindings (anything with
``principal``, ``resource_type``, ``pattern``, ``name``, ``operation`` as Kafka's names,
e.g. :class:`scheduler.access.Binding`). Every call waits for the broker's answer and raises
:class:`~scheduler.kafka.admin.AdminError` naming the user or binding and the broker's error.
Creating an ACL that exists, or upserting a credential, is idempotent on the broker.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from scheduler.kafka.admin import AdminError
from scheduler.kafka.connection import KafkaConnection

SCRAM_ITERATIONS = 8192


class BindingLike(Protocol):
    @property
    def principal(self) -> str: ...
    @property
    def resource_type(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def operation(self) -> str: ...


def _mechanism(name: str) -> ScramMechanism:
    return ScramMechanism.SCRAM_SHA_256 if name == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512


def create_acls(admin: AdminClient, bindings: Iterable[BindingLike], timeout_s: float = 30) -> int:
    """ALLOW each binding from any host; returns how many were sent (existing ones included)."""
    wanted = list(bindings)
    acls = [
        AclBinding(b.resource_type, b.name, b.pattern, b.principal, "*", b.operation, "ALLOW")
        for b in wanted
    ]
    if not acls:
        return 0
    futures = admin.create_acls(acls, request_timeout=timeout_s)
    for b, acl in zip(wanted, acls, strict=True):
        try:
            futures[acl].result(timeout_s)
        except KafkaException as exc:
            raise AdminError(
                f"create ACL {b.operation} on {b.resource_type} {b.name} ({b.pattern}) for "
                f"{b.principal}: {exc.args[0]}"
            ) from None
    return len(acls)


def delete_principal_acls(admin: AdminClient, principal: str, timeout_s: float = 30) -> int:
    """Delete every ACL of ``principal`` (``User:NAME``); returns how many were deleted.

    Returns once the broker answering ``describe_acls`` no longer lists any: the controller
    acknowledges a deletion before the brokers' authorizers apply it, and until then the principal
    is still let in (a test that revoked and tried at once saw its request accepted under load)."""
    # None matches any name and host (confluent-kafka's documented filter; its stubs say str).
    flt = AclBindingFilter("ANY", None, "ANY", principal, None, "ANY", "ANY")  # type: ignore[arg-type]
    deleted = 0
    for fut in admin.delete_acls([flt], request_timeout=timeout_s).values():
        try:
            deleted += len(fut.result(timeout_s))
        except KafkaException as exc:
            raise AdminError(f"delete the ACLs of {principal}: {exc.args[0]}") from None
    deadline = time.monotonic() + timeout_s
    while deleted and time.monotonic() < deadline:
        try:
            if not admin.describe_acls(flt, request_timeout=timeout_s).result(timeout_s):
                break
        except KafkaException:
            pass  # asked again: the deletion itself was acknowledged
        time.sleep(0.1)
    return deleted


def upsert_scram(admin: AdminClient, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                 timeout_s: float = 30) -> None:
    """Create or replace ``user``'s SCRAM credential (the old password stops working)."""
    info = ScramCredentialInfo(_mechanism(mechanism), SCRAM_ITERATIONS)
    change = UserScramCredentialUpsertion(user, info, password.encode())
    for name, fut in admin.alter_user_scram_credentials([change], request_timeout=timeout_s).items():
        try:
            fut.result(timeout_s)
        except KafkaException as exc:
            raise AdminError(f"set the SCRAM credential of user {name}: {exc.args[0]}") from None


def revoke_scram(
    admin: AdminClient, user: str, mechanism: str = "SCRAM-SHA-512", timeout_s: float = 30
) -> None:
    """Revoke ``user``'s SCRAM credential: replace it with a random secret nobody keeps.

    Never a deletion: Kafka 4.1-4.4 (``ScramDelta.apply``) drop every SCRAM user of a mechanism
    when a restart replays, from an empty image, a metadata log holding a deleted user; the
    broker then refuses even the admin (docs/decisions.md). An upsert cannot trigger it.
    """
    upsert_scram(admin, user, secrets.token_urlsafe(32), mechanism, timeout_s)


def await_login(conn: KafkaConnection, timeout_s: float = 30) -> bool:
    """Wait until ``conn``'s user logs in to every broker of the cluster (True), or ``timeout_s``.

    The controller acknowledges a new SCRAM credential once it is in the metadata log; each broker
    applies it to its login cache a moment later -- under load, seconds later. A credential handed
    out before then is refused at its first login, so whoever issues one waits here.
    """
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    pending, first = [conn.bootstrap], True
    while pending and time.monotonic() < deadline:
        # One broker at a time: metadata needs a login, so an answer means this broker knows the user.
        admin = AdminClient({**conn.config(log_level=0, **{"socket.timeout.ms": 3000}),
                             "bootstrap.servers": pending[0]})
        try:
            md = admin.list_topics(timeout=3)
        except KafkaException:
            time.sleep(0.2)
            continue
        pending.pop(0)
        if first:  # the bootstrap answered: now every broker it lists
            first = False
            pending = [f"{b.host}:{b.port}" for b in md.brokers.values()]
    return not pending
