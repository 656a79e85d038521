"""Tenants and their quotas; the TOML seed file (setting ``tenants_file``).

Pure data, no Kafka. The registry of record is the compacted topic ``ksched.tenants``
(:mod:`scheduler.tenant_registry` follows it, :mod:`scheduler.tenant_admin` writes it); the
TOML file seeds it: a tenant the file names and the topic has never mentioned is served
from the file, and ``ksched topics apply`` / ``ksched tenants`` write it to the topic.
A command for a tenant that is in neither is rejected with ``UNKNOWN_TENANT``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from scheduler.apikeys import ApiKey
from scheduler.domain.bounds import TENANT_NAME
from scheduler.vocabulary import TenantState

_NAME = TENANT_NAME  # one rule for the registry, the SDK and the CLI


class TenantError(ValueError):
    """A tenant name or quota is invalid; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A tenant and its quotas. Rates are per second; throttled work is delayed, never dropped.

    Every quota is cluster-wide (docs/schedules.md); 0 means no limit for the rates and for
    ``max_running`` (dispatched and not finished occurrences, all shards and workers together).
    """

    name: str
    trigger_rate_per_s: int = 20_000
    catch_up_rate_per_s: int = 1_000
    max_running: int = 0  # occurrences in flight at once, cluster-wide; 0: no limit
    retry_budget_per_min: int = 600
    max_schedules: int = 1_000_000
    state: TenantState = TenantState.ACTIVE
    api_keys: tuple[ApiKey, ...] = ()  # its HTTP API keys, hashed (scheduler.apikeys)

    @property
    def active(self) -> bool:
        return self.state == TenantState.ACTIVE


QUOTAS: tuple[str, ...] = tuple(
    f.name for f in fields(Tenant) if f.name not in ("name", "state", "api_keys")
)
"""The quota fields of :class:`Tenant`, in order (the TOML keys and the CLI's ``--flags``)."""


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise TenantError(
            f"tenant name {name!r} is invalid: use 1-40 characters, lower-case letters, "
            "digits and '-', starting with a letter"
        )
    return name


_MAX_QUOTA = (1 << 63) - 1  # an Avro long (TenantRecord)


def check_quota(key: str, value: object, where: str = "") -> int:
    """``value`` as the quota ``key``: a non-negative integer that fits an Avro long; TenantError
    naming the field, the value and the fix otherwise (``where`` prefixes the message)."""
    if key not in QUOTAS:
        raise TenantError(f"{where}unknown quota {key!r}; known: {', '.join(QUOTAS)}")
    if type(value) is not int or not 0 <= value <= _MAX_QUOTA:
        raise TenantError(f"{where}{key} = {value!r} must be a non-negative integer (0: no limit for a rate)")
    return value


def load_tenants(path: Path) -> dict[str, Tenant]:
    """Read the seed file; a missing file seeds nothing."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TenantError(f"tenants file {path}: {exc}") from None
    out: dict[str, Tenant] = {}
    for name, quotas in data.get("tenants", {}).items():
        validate_name(name)
        for key in sorted(quotas):
            check_quota(key, quotas[key], f"tenants file {path}: tenant {name}: ")
        out[name] = Tenant(name=name, **quotas)
    return out


def save_tenants(path: Path, tenants: dict[str, Tenant]) -> None:
    """Write the seed file atomically (write a temp file, then rename); quotas only."""
    lines = ["# ksched tenants and their quotas: the seed of the registry topic (`ksched topics apply`).", ""]
    for name in sorted(tenants):
        lines.append(f"[tenants.{name}]")
        for q in QUOTAS:
            lines.append(f"{q} = {getattr(tenants[name], q)}")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tenants.")
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines))
    os.replace(tmp, path)


def add_tenant(path: Path, tenant: Tenant) -> bool:
    """Add ``tenant`` to the seed file ``path`` (replacing its quotas if present; a seeded tenant
    is changed through the registry topic instead). Returns True if it was new."""
    validate_name(tenant.name)
    tenants = load_tenants(path)
    new = tenant.name not in tenants
    tenants[tenant.name] = dataclasses.replace(tenant)
    save_tenants(path, tenants)
    return new
