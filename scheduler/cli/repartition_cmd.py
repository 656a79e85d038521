"""``ksched repartition``: copy the namespace into a new one with more shards at a cutover instant
(blue/green; the procedure is in docs/operations.md). Exit codes: 0 done (or, with ``--check``,
the old side is at the cutover), 1 ``--check`` found it not there yet, 2 refused."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "repartition",
        help="move every schedule to a new namespace with more shards, exactly once around a cutover",
    )
    p.add_argument("--to", dest="target", required=True, metavar="NAMESPACE", help="the new namespace")
    p.add_argument("--partitions", type=int, required=True, help="its shard count (at least the current one)")
    p.add_argument("--cutover", required=True, metavar="C",
                   help="the instant the old processors stop at (their KSCHED_EMIT_UNTIL), "
                   "ISO 8601 or epoch seconds")
    p.add_argument("--check", action="store_true",
                   help="only report whether every old shard has reached the cutover")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.cli.reconcile_cmd import parse_instant
    from scheduler.repartition import RepartitionError, cursor_problems, repartition
    from scheduler.settings import load_settings

    settings = load_settings()
    cutover = parse_instant("--cutover", args.cutover)
    if args.check:
        problems = cursor_problems(settings, cutover)
        for line in problems:
            print(line)
        if not problems:
            print(f"every shard of {settings.namespace} is at the cutover {cutover}: stop its processors")
        return 1 if problems else 0
    try:
        plan = repartition(settings, args.target, args.partitions, cutover, say=print)
    except RepartitionError as exc:
        raise UsageError(str(exc)) from None
    print(f"done: {plan.schedules} schedules in {args.target}; start its processors and point clients "
          f"and workers at it (KSCHED_NAMESPACE={args.target}, KSCHED_PARTITIONS={args.partitions})")
    return 0
