"""``ksched preview``: the next N fire times of a spec, before it is saved (DESIGN §2).

    ksched preview (--cron EXPR | --at LOCAL_ISO) --tz ZONE [--after ISO_UTC] [--count N]
                   [--nonexistent skip|shift] [--repeated once|all] [--window-minutes W] [--json]

``--after`` is exclusive (default: now). Human output is a table with the UTC
and the local time; ``--json`` prints one object per line::

    {"n": 1, "scheduled_for": "2026-03-09T13:00:00Z", "local": "2026-03-09T09:00:00-04:00"}

plus ``"available_at"`` (same Z format) when ``--window-minutes`` is given:
the processor's own definition (:func:`scheduler.domain.fire.available_at`),
so the jitter is capped at the gap to the next fire as it will be once saved.
A preview has no schedule id yet, so its jitter is computed for the fixed id
``"preview"``, version 1 (:data:`PREVIEW_SCHEDULE_ID`, :data:`PREVIEW_VERSION`):
a saved schedule hashes its own id, so its flexible ``available_at`` differs --
what carries over is the window and its cap (``scheduled_for <= available_at <
scheduled_for + min(window, gap to the next fire)``). A preview has no start,
end or max_runs, so a cron fire always has a next one to cap against; a saved
schedule's last permitted run (and any one-time fire) has none and is uncapped.
Invalid input exits 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from scheduler.cli import UsageError
from scheduler.cli.instants import iso_utc

PREVIEW_SCHEDULE_ID = "preview"
PREVIEW_VERSION = 1
MAX_COUNT = 1000


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "preview", help="show the next fire times of a cron or one-time spec",
        description="Show the next fire times of a spec (nothing is saved).",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", metavar="EXPR", help="5-field cron expression or @macro")
    what.add_argument("--at", metavar="LOCAL_ISO",
                      help="one-time local datetime, e.g. 2026-11-01T01:30 (offset optional)")
    p.add_argument("--tz", required=True, metavar="ZONE", help="IANA zone, e.g. Europe/Berlin")
    p.add_argument("--after", metavar="ISO_UTC",
                   help="list fire times strictly after this instant (default: now)")
    p.add_argument("--count", type=int, default=10, metavar="N", help="how many (default 10)")
    p.add_argument("--nonexistent", choices=("skip", "shift"), default="skip",
                   help="spring-forward gap: skip (default) or shift to the gap's end")
    p.add_argument("--repeated", choices=("once", "all"), default="once",
                   help="fall-back repeat: once (first instant, default) or all")
    p.add_argument("--window-minutes", type=int, default=0, metavar="W",
                   help="flexible window: also show the jittered available_at")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=run)


def _parse_after(text: str | None) -> dt.datetime:
    if text is None:
        return dt.datetime.now(dt.UTC).replace(microsecond=0)
    return iso_utc("--after", text)  # documented: a naive --after is UTC


def _z(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The preview rows for parsed arguments; :class:`UsageError` on invalid input."""
    from scheduler.domain import SpecError, available_at
    from scheduler.domain.compiled import compile_timing
    from scheduler.domain.spec import MAX_WINDOW_MINUTES
    from scheduler.domain.zones import from_epoch, load_zone, to_epoch

    if not 1 <= args.count <= MAX_COUNT:
        raise UsageError(f"--count: {args.count} is out of range 1-{MAX_COUNT}")
    if not 0 <= args.window_minutes <= MAX_WINDOW_MINUTES:
        raise UsageError(
            f"--window-minutes: {args.window_minutes} is out of range 0-{MAX_WINDOW_MINUTES}")
    after = args.after_dt if getattr(args, "after_dt", None) else _parse_after(args.after)
    try:
        compiled = compile_timing(
            kind="cron" if args.cron is not None else "once", cron=args.cron, at=args.at,
            timezone=args.tz, nonexistent=args.nonexistent, repeated=args.repeated,
        )
        zone = load_zone(args.tz)
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    window_s = args.window_minutes * 60
    out: list[dict[str, Any]] = []
    for n, f in enumerate(compiled.fire_times_epoch(to_epoch(after, "after"), args.count), 1):
        t = from_epoch(f)
        row: dict[str, Any] = {"n": n, "scheduled_for": _z(t), "local": t.astimezone(zone).isoformat()}
        if window_s:
            avail = available_at(compiled, PREVIEW_SCHEDULE_ID, PREVIEW_VERSION, f, window_s)
            row["available_at"] = _z(from_epoch(avail))
        out.append(row)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        args.after_dt = _parse_after(args.after)
        result = rows(args)
    except UsageError as exc:
        print(f"ksched: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for row in result:
            print(json.dumps(row))
        return 0
    from rich.console import Console
    from rich.table import Table

    what = f"cron {args.cron!r}" if args.cron is not None else f"at {args.at}"
    table = Table(title=f"{what} in {args.tz} after {_z(args.after_dt)}")
    table.add_column("#", justify="right")
    table.add_column("scheduled_for (UTC)")
    table.add_column(f"local ({args.tz})")
    if args.window_minutes:
        table.add_column(f"available_at (UTC, window {args.window_minutes} min)")
    for row in result:
        cells = [str(row["n"]), row["scheduled_for"], row["local"]]
        if args.window_minutes:
            cells.append(row["available_at"])
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if not result:
        console.print("no fire times after this instant")
    return 0
