"""``ksched tenants add NAME | list``: register tenants and create their topics."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any


def register(sub: Any) -> None:
    from scheduler.tenants import Tenant

    p: argparse.ArgumentParser = sub.add_parser("tenants", help="register tenants and quotas")
    tsub = p.add_subparsers(dest="tenants_cmd", metavar="ACTION")
    tsub.required = True
    a = tsub.add_parser("add", help="register a tenant (or update its quotas) and create its topics")
    a.add_argument("name")
    for f in fields(Tenant):
        if f.name != "name":
            a.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=None)
    a.add_argument("--no-topics", action="store_true", help="only write the registry")
    a.set_defaults(handler=_add)
    ls = tsub.add_parser("list", help="list registered tenants and quotas")
    ls.set_defaults(handler=_list)


def _add(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.cli.topics_cmd import apply_all, print_changes
    from scheduler.kafka.admin import AdminError
    from scheduler.settings import load_settings
    from scheduler.tenants import Tenant, TenantError, add_tenant, load_tenants

    settings = load_settings()
    current = load_tenants(settings.tenants_file).get(args.name)
    quotas = {
        f.name: getattr(args, f.name)
        for f in fields(Tenant)
        if f.name != "name" and getattr(args, f.name) is not None
    }
    base = current or Tenant(name=args.name)
    try:
        tenant = Tenant(**{**{f.name: getattr(base, f.name) for f in fields(Tenant)}, **quotas})
        new = add_tenant(settings.tenants_file, tenant)
    except TenantError as exc:
        raise UsageError(str(exc)) from None
    print(f"tenant {args.name}: {'registered' if new else 'updated'} in {settings.tenants_file}")
    if not args.no_topics:
        try:
            print_changes(apply_all(), dry_run=False)
        except AdminError as exc:
            raise UsageError(str(exc)) from None
    return 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.settings import load_settings
    from scheduler.tenants import Tenant, load_tenants

    settings = load_settings()
    names = [f.name for f in fields(Tenant)]
    print("  ".join(names))
    for t in load_tenants(settings.tenants_file).values():
        print("  ".join(str(getattr(t, n)) for n in names))
    return 0
