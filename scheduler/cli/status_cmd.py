"""``ksched status [--json] [--watch SECONDS]``: is every shard owned and on time, and how each
tenant stands (:mod:`scheduler.status`). Exit 0 when healthy, 1 when a shard has no owner or lags
the clock past the limit, 2 when the broker cannot be asked."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "status", help="shard owners and watermark lag, tenants' worker lag and DLQ; exit 1 if unhealthy"
    )
    p.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    p.add_argument("--watch", type=float, metavar="SECONDS", default=None,
                   help="refresh every SECONDS until interrupted (the exit code is the last view's)")
    p.set_defaults(handler=_run)


def _view() -> Any:
    from confluent_kafka import KafkaException

    from scheduler.cli import UsageError
    from scheduler.settings import load_settings
    from scheduler.status.collect import collect

    settings = load_settings()
    try:
        return collect(settings)
    except (KafkaException, LookupError) as exc:
        raise UsageError(
            f"status: cannot read the cluster at {settings.bootstrap_servers} ({exc}): start it "
            "(`ksched kafka start`) and create the topics (`ksched topics apply`)"
        ) from None


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from scheduler.cli import UsageError
    from scheduler.status import problems, to_json
    from scheduler.status.render import render

    if args.watch is not None and args.watch <= 0:
        raise UsageError(f"--watch {args.watch:g}: give a positive number of seconds, e.g. --watch 2")
    view = _view()
    if args.json:
        print(json.dumps(to_json(view), indent=2))
    elif args.watch is None:
        Console().print(render(view))
    else:
        with Live(render(view), refresh_per_second=1) as live:
            try:
                while True:
                    time.sleep(args.watch)
                    view = _view()
                    live.update(render(view))
            except KeyboardInterrupt:
                pass
    return 1 if problems(view) else 0
