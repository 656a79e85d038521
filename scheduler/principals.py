"""Each process connects as its own principal (docs/security.md): the one place that picks it.

The admin tools connect as ``admin``, the processor as ``<ns>.processor``, the history indexer as
``<ns>.history``, the HTTP API as ``<ns>.api``, a tenant's worker
and SDK client as ``<ns>.tenant.<T>`` (:mod:`scheduler.access`). An explicit
``sasl_username`` (``KSCHED_SASL_USERNAME``) wins over all of them (``Settings.kafka``); the
group prefix stays the role's, so ids stay inside the role's ACLs.
"""

from __future__ import annotations

from scheduler import access
from scheduler.kafka.connection import KafkaConnection
from scheduler.settings import Settings


def as_admin(settings: Settings) -> KafkaConnection:
    return settings.kafka(access.ADMIN_USER)


def as_processor(settings: Settings) -> KafkaConnection:
    p = access.processor(settings.namespace)
    return settings.kafka(p.user, group_prefix=p.group_prefix)


def as_history(settings: Settings) -> KafkaConnection:
    p = access.history(settings.namespace)
    return settings.kafka(p.user, group_prefix=p.group_prefix)


def as_api(settings: Settings) -> KafkaConnection:
    p = access.api(settings.namespace)
    return settings.kafka(p.user, group_prefix=p.group_prefix)


def as_tenant(settings: Settings, tenant: str) -> KafkaConnection:
    p = access.tenant(settings.namespace, tenant)
    return settings.kafka(p.user, group_prefix=p.group_prefix)
