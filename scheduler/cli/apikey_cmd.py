"""``ksched tenants api-key create | list | revoke``: a tenant's keys for the HTTP API.

A key (``ksk_<id>_<secret>``) is printed once, when it is made; the registry keeps only its
id and a scrypt hash of its secret (:mod:`scheduler.apikeys`). Revoking keeps the record with
its time; every API instance follows the registry and refuses the key within seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def register(tsub: Any) -> None:
    p: argparse.ArgumentParser = tsub.add_parser(
        "api-key", help="a tenant's HTTP API keys: create, list, revoke"
    )
    ksub = p.add_subparsers(dest="apikey_cmd", metavar="ACTION")
    ksub.required = True
    c = ksub.add_parser("create", help="make a key for the tenant (printed once; only its hash is kept)")
    c.add_argument("name", help="the tenant")
    c.add_argument("--label", default="", help="what the key is for (shown by list)")
    c.set_defaults(handler=_create)
    ls = ksub.add_parser("list", help="the tenant's keys: id, label, created, revoked (never a secret)")
    ls.add_argument("name", help="the tenant")
    ls.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    ls.set_defaults(handler=_list)
    r = ksub.add_parser("revoke", help="revoke a key (refused by every API instance within seconds)")
    r.add_argument("name", help="the tenant")
    r.add_argument("key_id", help="the key's id (12 hex digits, from list)")
    r.set_defaults(handler=_revoke)


def _tenant(name: str) -> tuple[Any, Any, Any]:
    from scheduler.cli.tenant_lookup import registered, settings_and_table

    settings, table = settings_and_table(name)
    return settings, table, registered(table, name)


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _create(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.tenant_admin import TenantAdminError, create_api_key

    settings, table, tenant = _tenant(args.name)
    try:
        key, record = create_api_key(settings, table, tenant, args.label)
    except TenantAdminError as exc:
        raise UsageError(str(exc)) from None
    print(f"tenant {args.name}: API key {record.key_id} created; the key (shown once, only a hash is kept):")
    print(key)
    return 0


def _list(args: argparse.Namespace) -> int:
    _, _, tenant = _tenant(args.name)
    rows = [{"key_id": k.key_id, "label": k.label, "created": _when(k.created_at_ms),
             "revoked": _when(k.revoked_at_ms), "active": k.active} for k in tenant.api_keys]
    if args.json:
        print(json.dumps({"tenant": args.name, "api_keys": rows}, indent=2))
        return 0
    if not rows:
        print(f"tenant {args.name}: no API keys (make one with `ksched tenants api-key create {args.name}`)")
        return 0
    print("  ".join(["key_id", "created", "revoked", "label"]))
    for r in rows:
        print("  ".join([str(r["key_id"]), str(r["created"]), str(r["revoked"]), str(r["label"])]))
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from scheduler.apikeys import ApiKeyError
    from scheduler.cli import UsageError
    from scheduler.tenant_admin import TenantAdminError, revoke_api_key

    settings, table, tenant = _tenant(args.name)
    try:
        record = revoke_api_key(settings, table, tenant, args.key_id)
    except (ApiKeyError, TenantAdminError) as exc:
        raise UsageError(f"tenant {args.name}: {exc}") from None
    print(f"tenant {args.name}: API key {record.key_id} revoked at {_when(record.revoked_at_ms)}")
    return 0
