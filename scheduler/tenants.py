"""Tenants and their quotas, kept in a TOML file (setting ``tenants_file``).

Pure data, no Kafka. The processor reads the registry at start; a command
for a tenant that is not in it is rejected with ``UNKNOWN_TENANT``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from scheduler.domain.bounds import TENANT_NAME

_NAME = TENANT_NAME  # one rule for the registry, the SDK and the CLI


class TenantError(ValueError):
    """A tenant name or quota is invalid; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A tenant and its quotas. Rates are per second; throttled work is delayed, never dropped."""

    name: str
    trigger_rate_per_s: int = 20_000
    catch_up_rate_per_s: int = 1_000
    max_running: int = 64
    retry_budget_per_min: int = 600
    max_schedules: int = 1_000_000


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise TenantError(
            f"tenant name {name!r} is invalid: use 1-40 characters, lower-case letters, "
            "digits and '-', starting with a letter"
        )
    return name


def load_tenants(path: Path) -> dict[str, Tenant]:
    """Read the registry; a missing file is an empty registry."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TenantError(f"tenants file {path}: {exc}") from None
    known = {f.name for f in fields(Tenant)} - {"name"}
    out: dict[str, Tenant] = {}
    for name, quotas in data.get("tenants", {}).items():
        validate_name(name)
        unknown = set(quotas) - known
        if unknown:
            raise TenantError(
                f"tenants file {path}: tenant {name}: unknown quota {sorted(unknown)[0]!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        for key, value in quotas.items():
            if not isinstance(value, int) or value < 0:
                raise TenantError(
                    f"tenants file {path}: tenant {name}: {key} = {value!r} must be a "
                    "non-negative integer"
                )
        out[name] = Tenant(name=name, **quotas)
    return out


def save_tenants(path: Path, tenants: dict[str, Tenant]) -> None:
    """Write the registry atomically (write a temp file, then rename)."""
    lines = ["# ksched tenants and their quotas; `ksched tenants add NAME` appends here.", ""]
    for name in sorted(tenants):
        lines.append(f"[tenants.{name}]")
        for f in fields(Tenant):
            if f.name != "name":
                lines.append(f"{f.name} = {getattr(tenants[name], f.name)}")
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tenants.")
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines))
    os.replace(tmp, path)


def add_tenant(path: Path, tenant: Tenant) -> bool:
    """Register ``tenant`` (replacing its quotas if present). Returns True if it was new."""
    validate_name(tenant.name)
    tenants = load_tenants(path)
    new = tenant.name not in tenants
    tenants[tenant.name] = dataclasses.replace(tenant)
    save_tenants(path, tenants)
    return new
