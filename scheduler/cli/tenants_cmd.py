"""``ksched tenants add | update | list | disable | enable | remove | rotate-credentials | api-key``.

The registry is the compacted topic ``<namespace>.tenants``; every command reads it to its end
and writes it (:mod:`scheduler.tenant_admin`). Running processors apply a change from their
next loop iteration, no restart. The tenants file (setting ``tenants_file``) is only a seed:
each write first copies into the topic the file's tenants the topic has never mentioned.

Access (docs/security.md): ``add`` also gives the tenant its principal — a SCRAM credential with
a random password and its ACLs — and hands the password out once (kept in the credentials file,
written with ``--credentials-out``, else printed); ``rotate-credentials`` replaces the password;
``remove`` deletes the principal's ACLs and revokes its credential. ``api-key`` makes, lists and
revokes the tenant's HTTP API keys (:mod:`scheduler.cli.apikey_cmd`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from scheduler.cli.tenant_lookup import registered, settings_and_table

_QUOTA_HELP = {
    "trigger_rate_per_s": "on-time occurrences emitted per second, cluster-wide (0: no limit)",
    "catch_up_rate_per_s": "late (catch-up) occurrences emitted per second, cluster-wide (0: no limit)",
    "max_running": "occurrences dispatched and not finished at once, cluster-wide (0: no limit); "
    "also each worker's default --concurrency",
    "retry_budget_per_min": "retries emitted per minute, cluster-wide (0: no limit)",
    "max_schedules": "active or paused schedules the tenant may hold",
}


def register(sub: Any) -> None:
    from scheduler.tenants import QUOTAS

    p: argparse.ArgumentParser = sub.add_parser("tenants", help="the tenant registry: quotas and state")
    tsub = p.add_subparsers(dest="tenants_cmd", metavar="ACTION")
    tsub.required = True
    a = tsub.add_parser("add", help="register a tenant (quotas not given: defaults) and create its topics")
    u = tsub.add_parser("update", help="change a registered tenant's quotas (in force within seconds)")
    for cmd in (a, u):
        cmd.add_argument("name")
        for q in QUOTAS:
            cmd.add_argument(f"--{q.replace('_', '-')}", dest=q, type=int, default=None, help=_QUOTA_HELP[q])
    a.add_argument("--no-topics", action="store_true",
                   help="only write the registry (its topics must exist before its first command)")
    rot = tsub.add_parser(
        "rotate-credentials", help="replace a tenant's Kafka password (the old one stops working)"
    )
    rot.add_argument("name")
    rot.set_defaults(handler=_rotate)
    for cmd in (a, rot):
        cmd.add_argument("--credentials-out", metavar="FILE", default=None,
                         help="write the tenant's Kafka settings (a KSCHED_CONFIG file) to FILE, mode 0600")
    a.set_defaults(handler=_add)
    u.set_defaults(handler=_update)
    for action, helptext, handler in (
        ("disable", "refuse the tenant's commands; its due occurrences are recorded MISSED", _disable),
        ("enable", "serve a disabled tenant again (its schedules fire from their next time)", _enable),
        ("remove", "remove a disabled tenant (its commands and results topics are deleted)", _remove),
    ):
        c = tsub.add_parser(action, help=helptext)
        c.add_argument("name")
        c.set_defaults(handler=handler)
    ls = tsub.add_parser("list", help="list registered tenants, their state and quotas")
    ls.set_defaults(handler=_list)
    from scheduler.cli import apikey_cmd

    apikey_cmd.register(tsub)


def _quotas(args: argparse.Namespace) -> dict[str, Any]:
    """The quota flags given, checked (the message names the flag, the value and the fix)."""
    from scheduler.cli import UsageError
    from scheduler.tenants import QUOTAS, TenantError, check_quota

    out: dict[str, Any] = {}
    for q in QUOTAS:
        value = getattr(args, q)
        if value is not None:
            try:
                out[q] = check_quota(q, value, f"--{q.replace('_', '-')}: ")
            except TenantError as exc:
                raise UsageError(str(exc)) from None
    return out


def _write(settings: Any, table: Any, name: str, tenant: Any) -> None:
    """Write ``tenant`` (None: remove ``name``), as a usage error when the registry cannot be written."""
    from scheduler.cli import UsageError
    from scheduler.tenant_admin import TenantAdminError, put, remove

    try:
        if tenant is None:
            remove(settings, table, name)
        else:
            put(settings, table, tenant)
    except TenantAdminError as exc:
        raise UsageError(str(exc)) from None


def _add(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.cli.topics_cmd import print_changes
    from scheduler.kafka.admin import AdminError
    from scheduler.tenant_admin import TenantAdminError, apply_all
    from scheduler.tenants import Tenant

    settings, table = settings_and_table(args.name)
    quotas = _quotas(args)
    have = table.target.get(args.name)
    if have is not None:
        raise UsageError(
            f"tenant {args.name!r} is already registered ({have.state}): change its quotas with "
            f"`ksched tenants update {args.name} --<quota> N`"
        )
    if not args.no_topics:  # topics first: no processor may see the tenant before they exist
        try:
            changes, _ = apply_all(settings, extra=[args.name])
        except (AdminError, TenantAdminError) as exc:
            raise UsageError(str(exc)) from None
        print_changes(changes, dry_run=False)
    _write(settings, table, args.name, Tenant(name=args.name, **quotas))
    print(f"tenant {args.name}: registered in {table_topic(settings)}")
    from scheduler.access_admin import add_tenant

    _hand_out(settings, args, add_tenant(settings, args.name))
    return 0


def _rotate(args: argparse.Namespace) -> int:
    from scheduler.access_admin import rotate_tenant

    settings, table = settings_and_table(args.name)
    registered(table, args.name)
    _hand_out(settings, args, rotate_tenant(settings, args.name))
    return 0


def _hand_out(settings: Any, args: argparse.Namespace, issued: Any) -> None:
    """Say where the new password is — once: the credentials file, ``--credentials-out``, or stdout."""
    from pathlib import Path

    from scheduler.kafka.credentials import write_secret_file

    if issued is None:
        print(f"tenant {args.name}: security_protocol {settings.security_protocol}: no credential to issue")
        return
    if args.credentials_out:
        path = Path(args.credentials_out)
        write_secret_file(path, "".join(f'{k} = "{v}"\n' for k, v in (
            ("bootstrap", settings.bootstrap_servers), ("namespace", settings.namespace),
            ("security_protocol", settings.security_protocol), ("sasl_mechanism", settings.sasl_mechanism),
            ("sasl_username", issued.user), ("sasl_password", issued.password))))
        print(f"tenant {args.name}: Kafka user {issued.user}; its settings are in {path} (mode 0600, "
              f"use it as KSCHED_CONFIG)")
    if issued.stored:
        print(f"tenant {args.name}: Kafka user {issued.user}; password kept in {settings.credentials_path} "
              "(mode 0600): its workers and SDK clients find it there")
    elif not args.credentials_out:
        print(f"tenant {args.name}: Kafka user {issued.user} password {issued.password} "
              "(shown once: give it to the tenant; `ksched tenants rotate-credentials` issues a new one)")


def _update(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError

    quotas = _quotas(args)
    if not quotas:
        raise UsageError(f"tenants update {args.name}: give a quota to change, e.g. --trigger-rate-per-s 500")
    settings, table = settings_and_table(args.name)
    before = registered(table, args.name)
    _write(settings, table, args.name, replace(before, **quotas))
    changed = ", ".join(f"{q} {getattr(before, q)} -> {v}" for q, v in quotas.items())
    print(f"tenant {args.name}: {changed}")
    return 0


def _set_state(args: argparse.Namespace, active: bool) -> int:
    from scheduler.vocabulary import TenantState

    settings, table = settings_and_table(args.name)
    before = registered(table, args.name)
    word = "enabled" if active else "disabled"
    if before.active == active:
        print(f"tenant {args.name}: already {word}")
        return 0
    state = TenantState.ACTIVE if active else TenantState.DISABLED
    _write(settings, table, args.name, replace(before, state=state))
    if active:
        print(f"tenant {args.name}: enabled; its schedules fire again from their next time")
    else:
        print(f"tenant {args.name}: disabled; its commands are refused (TENANT_DISABLED) and each of its "
              f"due occurrences is recorded MISSED until `ksched tenants enable {args.name}`")
    return 0


def _disable(args: argparse.Namespace) -> int:
    return _set_state(args, active=False)


def _enable(args: argparse.Namespace) -> int:
    return _set_state(args, active=True)


def _remove(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError

    settings, table = settings_and_table(args.name)
    before = registered(table, args.name)
    if before.active:
        # The registry cannot tell cheaply whether the tenant still has schedules (they live in
        # the shards): a tenant is removed only once an admin has stopped it on purpose.
        raise UsageError(
            f"tenant {args.name!r} is ACTIVE: disable it first (`ksched tenants disable {args.name}`), "
            "cancel its schedules, then remove it"
        )
    _write(settings, table, args.name, None)
    from scheduler.access_admin import remove_tenant

    acls = remove_tenant(settings, args.name)
    print(f"tenant {args.name}: removed; its commands and results topics are deleted. Its dispatch, "
          "versions and DLQ topics are kept (delete them with your Kafka tools once their data is no "
          "longer needed)")
    print(f"tenant {args.name}: its {acls} ACLs are deleted and its Kafka credential revoked")
    return 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.settings import load_settings
    from scheduler.tenant_admin import TenantAdminError, current
    from scheduler.tenants import QUOTAS

    settings = load_settings()
    try:
        table = current(settings)
    except TenantAdminError as exc:
        from scheduler.cli import UsageError

        raise UsageError(str(exc)) from None
    print("  ".join(["name", "state", *QUOTAS, "source"]))
    for name, t in sorted(table.target.items()):
        source = "registry" if name in table.topic else "seed file only (run `ksched topics apply`)"
        print("  ".join([name, str(t.state), *(str(getattr(t, q)) for q in QUOTAS), source]))
    return 0


def table_topic(settings: Any) -> str:
    from scheduler.tenant_registry import tenants_topic

    return tenants_topic(settings)
