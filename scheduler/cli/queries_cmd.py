"""Queries on the history store (docs/history.md, "Queries"): no Kafka, the store of ``history_dsn``.

    ksched schedule get --tenant T ID                  # one JSON object (as before)
    ksched schedule list --tenant T [--state S] [--handler H] [--limit N] [--cursor C]
    ksched schedule describe --tenant T ID [--next N] [--last N] [--json]
    ksched occurrence get --tenant T OID [--json]
    ksched occurrences --tenant T [--schedule ID] [--from ISO] [--to ISO] [--state S]
                       [--limit N] [--cursor C] [--all] [--json]

``get`` and ``list`` print JSON lines (their output since issue 9); the others print rich tables,
or with ``--json`` one JSON document. A store that is not set up exits 2 naming the setting; an
unknown id (or another tenant's) exits 1 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from scheduler.cli import UsageError
from scheduler.cli.instants import iso_utc
from scheduler.vocabulary import OccurrenceState, ScheduleState

if TYPE_CHECKING:
    from scheduler.client import HistoryReader
    from scheduler.history.views import OccurrenceView

_T = TypeVar("_T")
_DAY_MS = 86_400_000


def register_schedule_queries(s: Any) -> None:
    """``get``, ``list`` and ``describe`` under ``ksched schedule`` (called by schedule_cmd)."""
    g = s.add_parser("get", help="the current schedule (JSON) from the history store")
    g.add_argument("--tenant", required=True)
    g.add_argument("schedule_id")
    g.set_defaults(handler=_get)
    ls = s.add_parser("list", help="the tenant's schedules (JSON lines), by id, from the history store")
    ls.add_argument("--tenant", required=True)
    ls.add_argument("--state", choices=[x.value for x in ScheduleState])
    ls.add_argument("--handler", dest="handler_name",
                    help="only schedules whose current spec targets this handler")
    _paging(ls)
    ls.set_defaults(handler=_list)
    d = s.add_parser("describe", help="spec, state, versions, next fire times and last occurrences")
    d.add_argument("--tenant", required=True)
    d.add_argument("schedule_id")
    d.add_argument("--next", type=int, default=5, metavar="N", help="next fire times to show (default 5)")
    d.add_argument("--last", type=int, default=10, metavar="N", help="last occurrences to show (default 10)")
    d.add_argument("--json", action="store_true", help="one JSON document")
    d.set_defaults(handler=_describe)


def register(sub: Any) -> None:
    o: argparse.ArgumentParser = sub.add_parser("occurrence", help="one occurrence and its attempts")
    os_ = o.add_subparsers(dest="occurrence_cmd", metavar="ACTION")
    os_.required = True
    g = os_.add_parser("get", help="an occurrence and its whole attempt history")
    g.add_argument("--tenant", required=True)
    g.add_argument("occurrence_id")
    g.add_argument("--json", action="store_true", help="one JSON document")
    g.set_defaults(handler=_occurrence)
    ls = sub.add_parser("occurrences", help="a tenant's occurrences in a time window, from the history store")
    ls.add_argument("--tenant", required=True)
    ls.add_argument("--schedule", metavar="ID", help="only this schedule's")
    ls.add_argument("--from", dest="from_", metavar="ISO", help="scheduled_for >= this (default: 24 h ago)")
    ls.add_argument("--to", metavar="ISO", help="scheduled_for < this (default: now); UTC unless an offset")
    ls.add_argument("--state", choices=[x.value for x in OccurrenceState if x != OccurrenceState.SCHEDULED])
    _paging(ls)
    ls.add_argument("--all", action="store_true", help="follow the cursors to the end of the window")
    ls.add_argument("--json", action="store_true", help="one JSON document {items, next_cursor}")
    ls.set_defaults(handler=_occurrences)


def _paging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=100, metavar="N", help="at most N per page (1-1000)")
    p.add_argument("--cursor", help="the next_cursor a previous page printed")


def _reader() -> HistoryReader:
    from scheduler.client import HistoryReader
    from scheduler.settings import load_settings

    return HistoryReader(load_settings())


def _answer(fn: Callable[[HistoryReader], _T]) -> _T | None:
    """Run a query; None (after one line on stderr) for an unknown id or a lagging store, UsageError
    for what the user must fix (the store's setting, a cursor, a limit, an id's format)."""
    from scheduler.client import HistoryLagging, HistoryUnavailable, OccurrenceNotFound, ScheduleNotFound
    from scheduler.domain import SpecError

    reader = _reader()
    try:
        return fn(reader)
    except (ScheduleNotFound, OccurrenceNotFound, HistoryLagging) as exc:
        print(f"ksched: error: {exc}", file=sys.stderr)
        return None
    except (HistoryUnavailable, SpecError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        reader.close()


def _instant(flag: str, text: str | None, default_ms: int) -> int:
    if text is None:
        return default_ms
    return int(iso_utc(flag, text, "an ISO-8601 datetime, e.g. 2026-03-09T13:00:00Z").timestamp() * 1000)


def _get(args: argparse.Namespace) -> int:
    from scheduler.cli.render import schedule_json
    from scheduler.client import HistoryNotIndexed, ScheduleNotFound, read_schedule
    from scheduler.settings import load_settings

    def get(r: HistoryReader) -> Any:
        try:
            r.store()
        except HistoryNotIndexed:  # the documented fallback: the id's one partition of the topic
            found = read_schedule(load_settings(), args.tenant, args.schedule_id)
            if found is None:
                raise ScheduleNotFound(f"schedule_id {args.schedule_id!r} not found for tenant "
                                       f"{args.tenant!r} (read from its topic: no history store is fed)"
                                       ) from None
            return found
        s = r.schedule(args.tenant, args.schedule_id)
        if s is None:
            raise r.not_found(args.tenant, args.schedule_id)
        return s

    s = _answer(get)
    if s is None:
        return 1
    print(json.dumps(schedule_json(s)))
    return 0


def _list(args: argparse.Namespace) -> int:
    from scheduler.cli.render import schedule_json

    page = _answer(lambda r: r.list(args.tenant, state=args.state, handler=args.handler_name,
                                    cursor=args.cursor, limit=args.limit))
    if page is None:
        return 1
    for s in page.items:
        print(json.dumps(schedule_json(s)))
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


def _describe(args: argparse.Namespace) -> int:
    from scheduler.cli import render

    if not 0 <= args.next <= 1000 or not 0 <= args.last <= 1000:
        raise UsageError(f"--next {args.next} / --last {args.last}: each must be 0 to 1000")
    d = _answer(lambda r: r.describe(args.tenant, args.schedule_id, next_count=args.next,
                                     last_count=args.last))
    return _show(d, args.json, render.description_json, render.print_description)


def _occurrence(args: argparse.Namespace) -> int:
    from scheduler.cli import render

    found = _answer(lambda r: r.occurrence(args.tenant, args.occurrence_id))
    return _show(found, args.json, render.detail_json, render.print_detail)


def _show(answer: _T | None, as_json: bool, to_json: Callable[[_T], Any], table: Callable[[_T], None]) -> int:
    """Print an answer as one JSON document or as tables; exit 1 when there was none."""
    if answer is None:
        return 1
    if as_json:
        print(json.dumps(to_json(answer)))
    else:
        table(answer)
    return 0


def _occurrences(args: argparse.Namespace) -> int:
    import time

    from scheduler.cli import render
    from scheduler.cli.render import iso

    now = int(time.time() * 1000)
    lo = _instant("--from", args.from_, now - _DAY_MS)
    hi = _instant("--to", args.to, now)

    def fetch(r: HistoryReader) -> tuple[list[OccurrenceView], str | None]:
        items: list[OccurrenceView] = []
        cursor = args.cursor
        while True:
            page = r.occurrences(args.tenant, schedule_id=args.schedule, from_ms=lo, to_ms=hi,
                                 state=args.state, cursor=cursor, limit=args.limit)
            items += page.items
            cursor = page.next_cursor
            if cursor is None or not args.all:
                return items, cursor

    got = _answer(fetch)
    if got is None:
        return 1
    items, cursor = got
    if args.json:
        print(json.dumps({"items": [render.occurrence_json(o) for o in items], "next_cursor": cursor}))
    else:
        render.print_occurrences(items, f"tenant {args.tenant}: occurrences {iso(lo)} .. {iso(hi)}", cursor)
    return 0
