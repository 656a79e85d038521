"""Where a client connects and as whom: the one place a Kafka client's security config is built.

A :class:`KafkaConnection` is the bootstrap list plus the librdkafka security keys of one
principal. Every producer, consumer and AdminClient ksched creates starts from
:meth:`KafkaConnection.config` (``scheduler.kafka.clients`` and ``scheduler.kafka.admin``
take a connection, never a bare bootstrap string), so no client can forget the credentials.

:func:`resolve` turns plain settings values into a connection: an explicit username and
password win; otherwise the principal's password is read from the credentials file
(:mod:`scheduler.kafka.credentials`). Knows no domain and imports no confluent_kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.kafka.credentials import CredentialsError, read_users

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


@dataclass(frozen=True)
class KafkaConnection:
    """Bootstrap servers and the security keys of one principal (``principal`` is '' without SASL).

    ``group_prefix``: the consumer group ids this principal may use start with it (its ACLs);
    a reader that needs no group of its own gets a random one under it."""

    bootstrap: str
    security: Mapping[str, str] = field(default_factory=dict)
    principal: str = ""
    group_prefix: str = "ksched-"

    def __hash__(self) -> int:  # usable as a cache key (the security dict is never mutated)
        return hash((self.bootstrap, self.principal, tuple(sorted(self.security.items()))))

    def config(self, **extra: Any) -> dict[str, Any]:
        """A librdkafka config: bootstrap, security, then ``extra`` (which may override neither)."""
        return {**extra, "bootstrap.servers": self.bootstrap, **self.security}

    @property
    def who(self) -> str:
        """How error messages name the caller: ``User:NAME at HOST:PORT``."""
        return f"User:{self.principal} at {self.bootstrap}" if self.principal else self.bootstrap

    def as_user(self, principal: str, password: str) -> KafkaConnection:
        """The same cluster and protocol as another SASL user."""
        return KafkaConnection(
            self.bootstrap,
            {**self.security, "sasl.username": principal, "sasl.password": password},
            principal,
            self.group_prefix,
        )


def security_config(
    protocol: str, mechanism: str, username: str, password: str, ssl_ca_location: str
) -> dict[str, str]:
    """The librdkafka security keys for these values (PLAINTEXT: none)."""
    cfg: dict[str, str] = {}
    if protocol != "PLAINTEXT":
        cfg["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        cfg.update({"sasl.mechanism": mechanism, "sasl.username": username, "sasl.password": password})
    if protocol in ("SSL", "SASL_SSL") and ssl_ca_location:
        cfg["ssl.ca.location"] = ssl_ca_location
    return cfg


def resolve(
    bootstrap: str,
    *,
    protocol: str,
    mechanism: str,
    username: str,
    password: str,
    ssl_ca_location: str,
    credentials_file: Path,
    principal: str,
    group_prefix: str = "ksched-",
) -> KafkaConnection:
    """The connection of ``principal`` (or of ``username`` when it is set: explicit settings win).

    Pre: ``protocol`` is one of :data:`PROTOCOLS`. Without SASL nobody is named. With SASL and no
    ``password``, the user's password comes from ``credentials_file``; a missing file or user
    raises :class:`CredentialsError` naming the file, the user and the fix.
    """
    if not protocol.startswith("SASL_"):
        return KafkaConnection(
            bootstrap, security_config(protocol, mechanism, "", "", ssl_ca_location), "", group_prefix
        )
    user = username or principal
    if not password:
        users = read_users(credentials_file)
        if user not in users:
            raise CredentialsError(
                f"no password for Kafka user {user!r} in {credentials_file}; for a tenant run "
                f"`ksched tenants add NAME` (or `ksched tenants rotate-credentials NAME`), for the "
                "embedded broker `ksched kafka start`, or set KSCHED_SASL_USERNAME and KSCHED_SASL_PASSWORD"
            )
        password = users[user]
    return KafkaConnection(
        bootstrap, security_config(protocol, mechanism, user, password, ssl_ca_location), user, group_prefix
    )
