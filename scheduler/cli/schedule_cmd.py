"""``ksched schedule create|get|list|update|pause|resume|cancel`` on top of the SDK."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("schedule", help="create and manage schedules")
    s = p.add_subparsers(dest="schedule_cmd", metavar="ACTION")
    s.required = True
    for name in ("create", "update"):
        c = s.add_parser(name)
        c.add_argument("--tenant", required=True)
        if name == "update":
            c.add_argument("schedule_id")
            c.add_argument("--expected-version", type=int)
        else:
            c.add_argument("--key", help="idempotency key: the same key creates once")
        g = c.add_mutually_exclusive_group(required=True)
        g.add_argument("--cron")
        g.add_argument("--at", help="one-time local ISO datetime")
        c.add_argument("--tz", required=True)
        c.add_argument("--handler", dest="job_handler", required=True, help="the handler name workers run")
        c.add_argument("--payload", default="")
        c.add_argument("--window-minutes", type=int, default=0)
        c.add_argument("--misfire", default="FIRE_ONCE", choices=["SKIP", "FIRE_ONCE", "CATCH_UP"])
        c.add_argument("--catch-up-limit", type=int, default=0)
        c.add_argument("--overlap", default="ALLOW", choices=["ALLOW", "SKIP_IF_RUNNING", "QUEUE_ONE"])
        c.add_argument("--max-lateness-s", type=int, default=60, help="later than this counts as a misfire")
        c.add_argument("--retry-max-attempts", type=int, default=3)
        c.add_argument("--retry-backoff-base-s", type=float, default=1.0)
        c.add_argument("--retry-backoff-cap-s", type=float, default=300.0)
        c.add_argument("--retry-deadline-s", type=int, default=None, help="no retry later than this after")
        c.set_defaults(handler=_create if name == "create" else _update)
    for name in ("pause", "resume", "cancel"):
        c = s.add_parser(name)
        c.add_argument("--tenant", required=True)
        c.add_argument("schedule_id")
        c.add_argument("--expected-version", type=int)
        c.set_defaults(handler=_state, action=name)
    g2 = s.add_parser("get")
    g2.add_argument("--tenant", required=True)
    g2.add_argument("schedule_id")
    g2.set_defaults(handler=_get)
    ls = s.add_parser("list")
    ls.add_argument("--tenant", required=True)
    ls.set_defaults(handler=_list)


def _spec(args: argparse.Namespace) -> Any:
    from scheduler.cli import UsageError
    from scheduler.domain import ScheduleSpec, SpecError, compile_spec

    try:
        spec = ScheduleSpec(
            kind="cron" if args.cron else "once",
            cron=args.cron,
            at=args.at,
            timezone=args.tz,
            handler=args.job_handler,
            payload=args.payload.encode(),
            window_minutes=args.window_minutes,
            misfire=args.misfire,
            catch_up_limit=args.catch_up_limit,
            overlap=args.overlap,
            max_lateness_s=args.max_lateness_s,
            retry_max_attempts=args.retry_max_attempts,
            retry_backoff_base_s=args.retry_backoff_base_s,
            retry_backoff_cap_s=args.retry_backoff_cap_s,
            retry_deadline_s=args.retry_deadline_s,
        )
        compile_spec(spec)
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    return spec


def _call(fn: Any) -> int:
    from scheduler.client import CommandRejected

    try:
        acc = fn()
    except CommandRejected as exc:
        print(f"rejected: {exc}")
        return 1
    except TimeoutError as exc:
        print(f"ksched: error: {exc}")
        return 1
    print(json.dumps({"schedule_id": acc.schedule_id, "version": acc.version, "status": "ACCEPTED"}))
    return 0


def _create(args: argparse.Namespace) -> int:
    from scheduler.client import SchedulerClient

    spec = _spec(args)
    with SchedulerClient() as c:
        return _call(lambda: c.create(args.tenant, spec, key=args.key))


def _update(args: argparse.Namespace) -> int:
    from scheduler.client import SchedulerClient

    spec = _spec(args)
    with SchedulerClient() as c:
        return _call(
            lambda: c.update(args.tenant, args.schedule_id, spec, expected_version=args.expected_version)
        )


def _state(args: argparse.Namespace) -> int:
    from scheduler.client import SchedulerClient

    with SchedulerClient() as c:
        fn = getattr(c, args.action)
        return _call(lambda: fn(args.tenant, args.schedule_id, expected_version=args.expected_version))


def _show(s: Any) -> dict[str, Any]:
    return {
        "schedule_id": s.schedule_id,
        "tenant": s.tenant,
        "version": s.version,
        "state": s.state,
        "cron": s.spec.cron,
        "at": s.spec.at,
        "timezone": s.spec.timezone,
        "handler": s.spec.handler,
    }


def _get(args: argparse.Namespace) -> int:
    from scheduler.client import read_schedules
    from scheduler.settings import load_settings

    s = read_schedules(load_settings(), args.tenant).get(args.schedule_id)
    if s is None:
        print(f"ksched: error: schedule {args.schedule_id} not found for tenant {args.tenant}")
        return 1
    print(json.dumps(_show(s)))
    return 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.client import read_schedules
    from scheduler.settings import load_settings

    for s in read_schedules(load_settings(), args.tenant).values():
        print(json.dumps(_show(s)))
    return 0
