"""``ksched demo``: the full demo on the local broker (what ``make run`` starts)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo", help="processor, workers, sample schedules and a live view (Ctrl-C stops)"
    )
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--no-live", action="store_true", help="print a summary line every 10 s instead")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from scheduler.demo.run import run_demo

    return run_demo(args.duration, live=not args.no_live)
