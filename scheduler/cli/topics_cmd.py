"""``ksched topics apply [--dry-run]``: make the cluster's topics match topics/topics.toml."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("topics", help="manage ksched's Kafka topics")
    tsub = p.add_subparsers(dest="topics_cmd", metavar="ACTION")
    tsub.required = True
    a = tsub.add_parser("apply", help="create missing topics, report and fix drift")
    a.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    a.set_defaults(handler=_apply)
    ls = tsub.add_parser("list", help="list the topics ksched expects and whether they exist")
    ls.set_defaults(handler=_list)


def apply_all(dry_run: bool = False) -> list[Any]:
    """Apply the topics of every registered tenant, then seed the tenant registry from the seed
    file (:func:`scheduler.tenant_admin.apply_all`); returns the topic changes."""
    from scheduler.settings import load_settings
    from scheduler.tenant_admin import apply_all as apply_and_seed

    changes, seeded = apply_and_seed(load_settings(), dry_run=dry_run)
    for name in seeded:
        print(f"tenant {name}: seeded from the tenants file into the registry")
    return changes


def print_changes(changes: list[Any], dry_run: bool) -> None:
    if not changes:
        print("topics: up to date, no change")
        return
    for c in changes:
        mark = "would " if dry_run and c.action != "drift" else ""
        print(f"{mark}{c.action:6} {c.topic}: {c.detail}")


def _apply(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.kafka.admin import AdminError
    from scheduler.tenant_admin import TenantAdminError

    try:
        changes = apply_all(dry_run=args.dry_run)
    except (AdminError, TenantAdminError) as exc:
        raise UsageError(str(exc)) from None
    print_changes(changes, args.dry_run)
    return 1 if any(c.action == "drift" for c in changes) else 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.kafka.admin import admin_client
    from scheduler.settings import load_settings
    from scheduler.tenant_admin import TenantAdminError, current
    from scheduler.topology import desired_topics

    settings = load_settings()
    try:
        plans = desired_topics(settings, current(settings).target)
    except TenantAdminError as exc:
        raise UsageError(str(exc)) from None
    existing = admin_client(settings.kafka()).list_topics(timeout=10).topics
    for plan in plans:
        state = "present" if plan.name in existing else "missing"
        print(f"{plan.name:50} {plan.partitions:3}p  {state}")
    return 0
