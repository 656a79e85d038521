"""``ksched schedule create|update|pause|resume|cancel`` on top of the SDK (``get|list|describe``:
``queries_cmd.py``)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from scheduler.cli import UsageError
from scheduler.spec_fields import CLEARABLE, SPEC_FIELDS
from scheduler.vocabulary import CommandStatus, ScheduleKind

if TYPE_CHECKING:
    from scheduler.client import SchedulerClient
    from scheduler.domain import ScheduleSpec

_T = TypeVar("_T")


# CLI flag (argparse dest) -> spec field, for every field except ``kind`` (implied by --cron / --at).
SPEC_FLAGS: dict[str, str] = {f.cli_dest: f.name for f in SPEC_FIELDS if f.flag is not None}
_FLAG_OF: dict[str, str] = {f.name: f.flag for f in SPEC_FIELDS if f.flag is not None}


def _spec_flags(c: argparse.ArgumentParser, *, create: bool) -> None:
    """Every spec field as a flag (``scheduler.spec_fields``); unset flags stay None (create: spec
    default, update: kept). On create, one of --cron/--at and every required field must be given."""
    g = c.add_mutually_exclusive_group(required=create)
    # The flags a create needs come first in --help, the rest in spec field order.
    for f in sorted(SPEC_FIELDS, key=lambda f: not (f.timing or f.required)):
        if f.flag is None:
            continue
        kw: dict[str, Any] = {"type": f.cli_type} if f.cli_type is not None else {}
        (g if f.timing else c).add_argument(
            f.flag, dest=f.cli_dest, choices=f.cli_choices, required=create and f.required, help=f.help, **kw
        )


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("schedule", help="create and manage schedules")
    s = p.add_subparsers(dest="schedule_cmd", metavar="ACTION")
    s.required = True
    c = s.add_parser("create", help="create a schedule (the same --key creates once)")
    c.add_argument("--tenant", required=True)
    c.add_argument("--key", help="idempotency key: the same key creates once")
    _spec_flags(c, create=True)
    c.set_defaults(handler=_create)
    u = s.add_parser(
        "update", help="change the given fields of a schedule; every other field is kept",
        description="Patch a schedule: only the flags given change; the update carries the version "
        "read, so a concurrent update is refused (STALE_VERSION) instead of overwritten.",
    )
    u.add_argument("--tenant", required=True)
    u.add_argument("schedule_id")
    u.add_argument("--expected-version", type=int, help="refuse unless the schedule is at this version")
    u.add_argument("--clear", action="append", choices=CLEARABLE, default=[], metavar="FIELD",
                   help=f"reset an optional field to empty ({', '.join(CLEARABLE)}); repeatable")
    _spec_flags(u, create=False)
    u.set_defaults(handler=_update)
    for name in ("pause", "resume", "cancel"):
        c = s.add_parser(name)
        c.add_argument("--tenant", required=True)
        c.add_argument("schedule_id")
        c.add_argument("--expected-version", type=int)
        c.set_defaults(handler=_state, action=name)
    from scheduler.cli.queries_cmd import register_schedule_queries

    register_schedule_queries(s)  # get, list, describe: the history store


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields given on the command line (plus --clear), in ``ScheduleSpec.from_dict`` form."""
    out: dict[str, Any] = {
        field: getattr(args, flag) for flag, field in SPEC_FLAGS.items() if getattr(args, flag) is not None
    }
    for field in getattr(args, "clear", []):
        if field in out:
            raise UsageError(f"--clear {field}: the same command also sets {_FLAG_OF[field]}")
        out[field] = None
    return out


def _checked(fn: Callable[[], _T]) -> _T:
    """Run a validation step; a SpecError becomes the one-line UsageError (exit 2)."""
    from scheduler.domain import SpecError

    try:
        return fn()
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def _spec(args: argparse.Namespace) -> ScheduleSpec:
    from scheduler.domain import ScheduleSpec, compile_spec

    def build() -> ScheduleSpec:
        kind = ScheduleKind.CRON if args.cron is not None else ScheduleKind.ONCE
        spec = ScheduleSpec.from_dict({"kind": kind, **_changes(args)})
        compile_spec(spec)
        return spec

    return _checked(build)


def _call(fn: Callable[[], Any]) -> int:
    """Run an SDK call; expected failures are one line on stdout/stderr and exit 1, never a traceback."""
    from confluent_kafka import KafkaException

    from scheduler.client import CommandRejected, PublishError, RequestTimeout, ScheduleNotFound

    try:
        acc = _checked(fn)
    except CommandRejected as exc:
        print(f"rejected: {exc}")
        return 1
    except RequestTimeout as exc:
        p = exc.pending
        print(f"ksched: error: {exc}", file=sys.stderr)
        print(json.dumps({"schedule_id": p.schedule_id, "request_id": p.request_id,
                          "key": p.idempotency_key, "status": "PENDING"}))
        return 1
    except (TimeoutError, PublishError, ScheduleNotFound, KafkaException, LookupError) as exc:
        print(f"ksched: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"schedule_id": acc.schedule_id, "version": acc.version,
                      "status": CommandStatus.ACCEPTED.value}))
    return 0


def _ids(args: argparse.Namespace) -> None:
    """Tenant, key and schedule id are checked before anything connects to Kafka."""
    from scheduler.domain.bounds import check_key, check_schedule_id, check_tenant

    _checked(lambda: check_tenant(args.tenant))
    if getattr(args, "key", None) is not None:
        _checked(lambda: check_key(args.key))
    if getattr(args, "schedule_id", None) is not None:
        _checked(lambda: check_schedule_id(args.schedule_id))


def _create(args: argparse.Namespace) -> int:
    from scheduler.client import SchedulerClient

    _ids(args)
    spec = _spec(args)
    return _call(lambda: _with_client(SchedulerClient, lambda c: c.create(args.tenant, spec, key=args.key)))


def _update(args: argparse.Namespace) -> int:
    """A PATCH: only the flags given change (SchedulerClient.patch); every other field is kept."""
    from scheduler.client import SchedulerClient

    _ids(args)
    from scheduler.domain.bounds import check_field

    changes = _changes(args)
    if not changes:
        raise UsageError("update: give at least one field to change (see `ksched schedule update --help`)")
    for name, value in changes.items():
        _checked(functools.partial(check_field, name, value))
    return _call(lambda: _with_client(
        SchedulerClient,
        lambda c: c.patch(args.tenant, args.schedule_id, expected_version=args.expected_version, **changes),
    ))


def _with_client(factory: Callable[[], SchedulerClient], fn: Callable[[SchedulerClient], _T]) -> _T:
    with factory() as c:
        return fn(c)


def _state(args: argparse.Namespace) -> int:
    from scheduler.client import SchedulerClient

    _ids(args)
    return _call(lambda: _with_client(
        SchedulerClient,
        lambda c: getattr(c, args.action)(
            args.tenant, args.schedule_id, expected_version=args.expected_version
        ),
    ))
