"""Writing the tenant registry ``ksched.tenants``: what ``ksched tenants`` and ``ksched topics
apply`` do (the admin's side; :mod:`scheduler.tenant_registry` is the readers').

Every write is acknowledged by the broker (``acks=all``, idempotent producer) before it
returns; processors apply it from their next loop iteration. Two admins writing the same
tenant at once: the later record wins (last writer wins, as for any compacted key).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from scheduler.access_admin import ensure_services, ensure_tenants
from scheduler.apikeys import ApiKey, new_key, revoked
from scheduler.kafka.admin import admin_client, apply_topics, delete_topics
from scheduler.kafka.clients import producer
from scheduler.settings import Settings
from scheduler.tenant_registry import (
    RegistryMissing,
    TenantTable,
    encode_tenant,
    read_registry,
    tenants_topic,
)
from scheduler.tenants import Tenant, load_tenants
from scheduler.topology import desired_topics, topic_name


class TenantAdminError(RuntimeError):
    """The registry could not be read or written; the message names the topic and the fix."""


def current(settings: Settings) -> TenantTable:
    """The registry now: the topic read to its end over the seed file; a missing topic is an
    empty one (a fresh cluster before ``ksched topics apply``)."""
    try:
        return read_registry(settings)
    except RegistryMissing:
        return TenantTable({}, load_tenants(settings.tenants_file))
    except KafkaException as exc:
        raise TenantAdminError(_unreachable(settings, exc)) from None


def publish(settings: Settings, records: Iterable[tuple[str, Tenant | None]]) -> list[str]:
    """Write one record per ``(name, tenant)`` (None: a tombstone) and wait for the broker's
    acknowledgement; returns the names written. Raises :class:`TenantAdminError`."""
    records = list(records)
    if not records:
        return []
    topic = tenants_topic(settings)
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(f"{(msg.key() or b'').decode()}: {err.str()}")

    p = producer(settings.kafka(), **{"client.id": "ksched-tenants-admin", "linger.ms": 0})
    now_ms = int(time.time() * 1000)
    names: list[str] = []
    for name, tenant in records:
        value = None if tenant is None else encode_tenant(tenant, now_ms)
        p.produce(topic, value, name.encode(), on_delivery=delivered)
        names.append(name)
    left = p.flush(30)
    if failed or left:
        why = failed[0] if failed else f"{left} records not acknowledged within 30 s"
        raise TenantAdminError(
            f"writing {topic}: {why}: check the broker (`ksched kafka status`) and that the topic "
            "exists (`ksched topics apply`)"
        )
    return names


def seed(settings: Settings, table: TenantTable) -> list[str]:
    """Write the seed file's tenants that the topic has never mentioned (a tombstone counts: a
    removed tenant stays removed); returns their names. ``table`` then holds them as read."""
    todo = table.unseeded()
    names = publish(settings, [(t.name, t) for t in todo])
    for t in todo:
        table.apply(t.name.encode(), encode_tenant(t, 0))  # as a later read would see it
    return names


def put(settings: Settings, table: TenantTable, tenant: Tenant) -> None:
    """Seed what is unseeded, then write ``tenant``."""
    seed(settings, table)
    publish(settings, [(tenant.name, tenant)])


def create_api_key(
    settings: Settings, table: TenantTable, tenant: Tenant, label: str = ""
) -> tuple[str, ApiKey]:
    """Give ``tenant`` a new API key: ``(the key, shown once; its record, kept hashed)``."""
    key, record = new_key(label)
    put(settings, table, replace(tenant, api_keys=(*tenant.api_keys, record)))
    return key, record


def revoke_api_key(settings: Settings, table: TenantTable, tenant: Tenant, key_id: str) -> ApiKey:
    """Revoke ``tenant``'s key ``key_id`` (its record stays, with the time); returns it. Raises
    :class:`~scheduler.apikeys.ApiKeyError` when the tenant has no such key."""
    keys = revoked(tenant.api_keys, key_id)
    put(settings, table, replace(tenant, api_keys=keys))
    return next(k for k in keys if k.key_id == key_id)


# A removed tenant's inputs and answers: deleted with it, so that a client still sending for it
# is told at once that the tenant does not exist (its topics are missing) instead of waiting for
# an answer no processor gives (processors read only registered tenants' commands).
REMOVED_WITH_TENANT = ("commands", "results")


def remove(settings: Settings, table: TenantTable, name: str) -> None:
    """Seed what is unseeded, tombstone ``name``, then delete its commands and results topics
    (its dispatch, versions and DLQ topics are kept for operators)."""
    seed(settings, table)
    publish(settings, [(name, None)])
    try:
        delete_topics(admin_client(settings.kafka()),
                      [topic_name(settings, t, name) for t in REMOVED_WITH_TENANT])
    except KafkaException as exc:
        raise TenantAdminError(
            f"tenant {name} was removed but its commands and results topics were not deleted "
            f"({exc.args[0]}): run `ksched tenants remove {name}` again"
        ) from None


def apply_all(
    settings: Settings, *, dry_run: bool = False, extra: Iterable[str] = ()
) -> tuple[list[Any], list[str]]:
    """Create or fix every topic (the cluster's, and each registered tenant's and ``extra``'s),
    give the service principals and those tenants their ACLs (and, where ksched keeps the
    passwords, a credential to one that has none: docs/security.md), then seed the registry
    from the seed file. Returns (topic changes, tenants seeded).

    Topics first: a tenant's topics exist before any processor can see it registered (a
    dispatch to a missing topic would fail the shard's transaction)."""
    table = current(settings)
    names = set(table.target) | set(extra)
    try:
        changes = apply_topics(admin_client(settings.kafka()), desired_topics(settings, names),
                               dry_run=dry_run)
    except KafkaException as exc:
        raise TenantAdminError(_unreachable(settings, exc)) from None
    if not dry_run:
        ensure_services(settings)
        ensure_tenants(settings, sorted(names))
    seeded = [] if dry_run else seed(settings, table)
    return changes, seeded


def _unreachable(settings: Settings, exc: KafkaException) -> str:
    return (
        f"cannot read {tenants_topic(settings)} at {settings.bootstrap_servers}: {exc.args[0]}; "
        "start the broker (`ksched kafka start`) or set KSCHED_BOOTSTRAP"
    )
