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
    """Apply the topics of every registered tenant; returns the changes."""
    from scheduler.kafka.admin import admin_client, apply_topics
    from scheduler.settings import load_settings
    from scheduler.tenants import load_tenants
    from scheduler.topology import desired_topics

    settings = load_settings()
    tenants = load_tenants(settings.tenants_file)
    plans = desired_topics(settings, tenants)
    return apply_topics(admin_client(settings.bootstrap_servers), plans, dry_run=dry_run)


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

    try:
        changes = apply_all(dry_run=args.dry_run)
    except AdminError as exc:
        raise UsageError(str(exc)) from None
    print_changes(changes, args.dry_run)
    return 1 if any(c.action == "drift" for c in changes) else 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.kafka.admin import admin_client
    from scheduler.settings import load_settings
    from scheduler.tenants import load_tenants
    from scheduler.topology import desired_topics

    settings = load_settings()
    plans = desired_topics(settings, load_tenants(settings.tenants_file))
    existing = admin_client(settings.bootstrap_servers).list_topics(timeout=10).topics
    for plan in plans:
        state = "present" if plan.name in existing else "missing"
        print(f"{plan.name:50} {plan.partitions:3}p  {state}")
    return 0
