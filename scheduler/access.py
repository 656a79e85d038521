"""Who may do what on the cluster: the principals and their ACL bindings (docs/security.md).

Pure data — no Kafka import: the kafka layer (:mod:`scheduler.kafka.acls`) applies what this
module returns. One principal per role:

- ``admin`` — the super user (``super.users``): topics, tenants, ACLs, SCRAM credentials. No ACL.
- ``<ns>.processor`` — the processors: read every tenant's commands, write every tenant's
  results, schedules copy, versions, dispatch, occurrence events and DLQ, own the cluster's
  state topics, its own group and transactional ids.
- ``<ns>.history`` — the history indexers: read every tenant's commands, dispatch, occurrence
  events, dead letters and the cluster's schedules and schedule history, in their own group. Nothing else.
- ``<ns>.api`` — the HTTP API instances (``ksched api``): write every tenant's commands, read
  every tenant's results and DLQ, write every tenant's dispatch (a DLQ replay), read the tenant
  registry (its API keys), in its own groups. It reads no schedule or occurrence topic: its
  queries go to the history store. The tenant of a request comes from its API key.
- ``<ns>.tenant.<T>`` — one per tenant: write its commands, read its results, schedules,
  versions, dispatch, occurrence events and DLQ and the tenant registry, use groups and
  transactional ids under ``<ns>.tenant.<T>.`` — nothing else.

Principals carry the namespace, so two deployments (or test runs) on one cluster never share
one. Every PREFIXED pattern ends with ``.``, which neither a namespace nor a tenant name may
contain: ``<ns>.dispatch.acme`` as a prefix would also match ``acmecorp``; ``<ns>.tenant.acme.``
cannot. Tenants READ ``<ns>.tenants``: a worker checks there at start that its tenant is
registered and enabled and takes its ``max_running`` (DESIGN.md §3: every process reads the
registry). It holds names, states and quotas, no secret; the price is that a tenant can list the
other tenants and their quotas (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.domain.bounds import TENANT_NAME

ADMIN_USER = "admin"
# A tenant's own topics: it writes the first, reads the others; the processor the other way round.
TENANT_INPUT = "commands"
TENANT_OUTPUTS = ("results", "schedules", "versions", "dispatch", "occurrence-events", "dlq")
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
TOPIC, GROUP, TRANSACTIONAL_ID = "TOPIC", "GROUP", "TRANSACTIONAL_ID"


@dataclass(frozen=True, order=True)
class Binding:
    """One ALLOW ACL: ``principal`` (``User:NAME``) may do ``operation`` on the resource(s)
    of ``resource_type`` named ``name`` (LITERAL) or starting with it (PREFIXED), from any host."""

    principal: str
    resource_type: str  # TOPIC | GROUP | TRANSACTIONAL_ID
    pattern: str  # LITERAL | PREFIXED
    name: str
    operation: str  # READ | WRITE | DESCRIBE


@dataclass(frozen=True)
class Principal:
    """A SCRAM user and the prefix its consumer group ids (and transactional ids) must start with."""

    user: str
    group_prefix: str

    @property
    def kafka_principal(self) -> str:
        return f"User:{self.user}"


def admin() -> Principal:
    return Principal(ADMIN_USER, "ksched-")


def processor(namespace: str) -> Principal:
    return Principal(f"{namespace}.processor", f"{namespace}.processor.")


def history(namespace: str) -> Principal:
    return Principal(f"{namespace}.history", f"{namespace}.history.")


def api(namespace: str) -> Principal:
    return Principal(f"{namespace}.api", f"{namespace}.api.")


def tenant(namespace: str, name: str) -> Principal:
    """Tenant ``name``'s principal. Pre: ``name`` matches :data:`TENANT_NAME` (else ValueError)."""
    if not TENANT_NAME.match(name):
        raise ValueError(f"tenant {name!r}: a tenant name matches {TENANT_NAME.pattern}")
    return Principal(f"{namespace}.tenant.{name}", f"{namespace}.tenant.{name}.")


def tenant_of(namespace: str, user: str) -> str | None:
    """The tenant whose principal ``user`` is, else None."""
    head = f"{namespace}.tenant."
    rest = user[len(head):] if user.startswith(head) else ""
    return rest if TENANT_NAME.match(rest) else None


def _grant(p: Principal, rtype: str, pattern: str, name: str, ops: Iterable[str]) -> list[Binding]:
    return [Binding(p.kafka_principal, rtype, pattern, name, op) for op in ops]


def tenant_bindings(namespace: str, name: str) -> list[Binding]:
    """Tenant ``name``'s ACLs (DESIGN.md §8)."""
    p, ns = tenant(namespace, name), namespace
    out = _grant(p, TOPIC, LITERAL, f"{ns}.{TENANT_INPUT}.{name}", ("WRITE", "DESCRIBE"))
    for t in TENANT_OUTPUTS:
        out += _grant(p, TOPIC, LITERAL, f"{ns}.{t}.{name}", ("READ", "DESCRIBE"))
    out += _grant(p, TOPIC, LITERAL, f"{ns}.tenants", ("READ", "DESCRIBE"))  # the worker's start check
    out += _grant(p, GROUP, PREFIXED, p.group_prefix, ("READ", "DESCRIBE"))
    out += _grant(p, TRANSACTIONAL_ID, PREFIXED, p.group_prefix, ("WRITE", "DESCRIBE"))
    return out


def processor_bindings(namespace: str) -> list[Binding]:
    """The processor's ACLs: every tenant's topics by prefix (ending in ``.``), the cluster's own."""
    p, ns = processor(namespace), namespace
    out = _grant(p, TOPIC, LITERAL, f"{ns}.shards", ("READ", "DESCRIBE"))
    out += _grant(p, TOPIC, PREFIXED, f"{ns}.{TENANT_INPUT}.", ("READ", "DESCRIBE"))
    for t in TENANT_OUTPUTS:
        out += _grant(p, TOPIC, PREFIXED, f"{ns}.{t}.", ("WRITE", "DESCRIBE"))
    for t in ("schedules", "state", "schedule-history", "quota-demand"):  # quota-demand: quota_feed.py
        out += _grant(p, TOPIC, LITERAL, f"{ns}.{t}", ("READ", "WRITE", "DESCRIBE"))
    out += _grant(p, TOPIC, LITERAL, f"{ns}.tenants", ("READ", "DESCRIBE"))
    out += _grant(p, GROUP, LITERAL, f"{ns}.processor", ("READ", "DESCRIBE"))
    out += _grant(p, GROUP, PREFIXED, p.group_prefix, ("READ", "DESCRIBE"))  # readers (restore, registry)
    out += _grant(p, TRANSACTIONAL_ID, PREFIXED, p.group_prefix, ("WRITE", "DESCRIBE"))
    return out


def history_bindings(namespace: str) -> list[Binding]:
    """The history indexers' ACLs: read only (docs/history.md), in group ``<ns>.history``."""
    p, ns = history(namespace), namespace
    out: list[Binding] = []
    for t in (TENANT_INPUT, "dispatch", "occurrence-events", "dlq"):
        out += _grant(p, TOPIC, PREFIXED, f"{ns}.{t}.", ("READ", "DESCRIBE"))
    for t in ("schedules", "schedule-history"):
        out += _grant(p, TOPIC, LITERAL, f"{ns}.{t}", ("READ", "DESCRIBE"))
    out += _grant(p, GROUP, LITERAL, f"{ns}.history", ("READ", "DESCRIBE"))
    out += _grant(p, GROUP, PREFIXED, p.group_prefix, ("READ", "DESCRIBE"))
    return out


def api_bindings(namespace: str) -> list[Binding]:
    """The HTTP API's ACLs: a tenant's SDK rights over every tenant (it authenticates the tenant by
    API key and scopes each request to it), minus what it does not read, plus a DLQ replay's write."""
    p, ns = api(namespace), namespace
    out = _grant(p, TOPIC, PREFIXED, f"{ns}.{TENANT_INPUT}.", ("WRITE", "DESCRIBE"))
    for t in ("results", "dlq"):
        out += _grant(p, TOPIC, PREFIXED, f"{ns}.{t}.", ("READ", "DESCRIBE"))
    out += _grant(p, TOPIC, PREFIXED, f"{ns}.dispatch.", ("WRITE", "DESCRIBE"))  # POST /v1/dlq/{oid}:replay
    out += _grant(p, TOPIC, LITERAL, f"{ns}.tenants", ("READ", "DESCRIBE"))  # the API keys, followed
    out += _grant(p, GROUP, PREFIXED, p.group_prefix, ("READ", "DESCRIBE"))
    return out


def service_principals(namespace: str) -> list[tuple[Principal, list[Binding]]]:
    """The service roles ``ksched kafka start`` / ``ksched topics apply`` create, with their ACLs."""
    return [
        (processor(namespace), processor_bindings(namespace)),
        (history(namespace), history_bindings(namespace)),
        (api(namespace), api_bindings(namespace)),
    ]
