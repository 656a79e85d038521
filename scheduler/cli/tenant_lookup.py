"""The tenant a ``ksched tenants …`` command names: checked, with the registry read (shared by
:mod:`scheduler.cli.tenants_cmd` and :mod:`scheduler.cli.apikey_cmd`)."""

from __future__ import annotations

from typing import Any


def settings_and_table(name: str) -> tuple[Any, Any]:
    from scheduler.cli import UsageError
    from scheduler.settings import load_settings
    from scheduler.tenant_admin import TenantAdminError, current
    from scheduler.tenants import TenantError, validate_name

    try:
        validate_name(name)
    except TenantError as exc:
        raise UsageError(str(exc)) from None
    settings = load_settings()
    try:
        return settings, current(settings)
    except TenantAdminError as exc:
        raise UsageError(str(exc)) from None


def registered(table: Any, name: str) -> Any:
    from scheduler.cli import UsageError

    t = table.target.get(name)
    if t is None:
        raise UsageError(f"tenant {name!r} is not registered: add it with `ksched tenants add {name}`")
    return t
