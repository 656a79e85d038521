"""``ksched dlq list|replay``: a tenant's dead occurrences, and running them again.

Both answer from the history store (``dlq_entries``), never by reading the whole DLQ topic
(DESIGN.md §6): first the topic's end offsets are read as the caller (Kafka's ACLs decide: a
refusal is one line, exit 2), then the store must have indexed the topic to them, else exit 2
"not indexed yet" (a list is never silently short). A replay reads each entry's one record.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.dlq import DlqTopic
    from scheduler.history import HistoryStore
    from scheduler.history.views import DeadLetterView
    from scheduler.settings import Settings

# --all reads and replays this many entries at a time (bounds the payloads held at once)
_REPLAY_CHUNK = 1000


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dlq", help="list or replay a tenant's dead occurrences (through the history store: "
        "`ksched history` must be indexing)")
    s = p.add_subparsers(dest="dlq_cmd", metavar="ACTION")
    s.required = True
    ls = s.add_parser("list", help="the tenant's dead occurrences (each one's latest death), oldest "
                      "death first, a page at a time")
    ls.add_argument("--tenant", required=True)
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.add_argument("--limit", type=int, default=100, metavar="N", help="at most N per page (1-1000)")
    ls.add_argument("--after", "--cursor", dest="cursor", metavar="CURSOR",
                    help="the cursor a previous page printed (`more: --after CURSOR` on stderr)")
    ls.set_defaults(handler=_list)
    rp = s.add_parser("replay", help="dispatch dead occurrences again (same occurrence id, next attempt)")
    rp.add_argument("--tenant", required=True)
    g = rp.add_mutually_exclusive_group(required=True)
    g.add_argument("--occurrence", action="append", metavar="OID", help="an occurrence id (repeatable)")
    g.add_argument("--all", action="store_true", help="every entry `dlq list` lists")
    rp.set_defaults(handler=_replay)


@contextmanager
def _indexed(settings: Settings, tenant: str) -> Iterator[tuple[DlqTopic, HistoryStore]]:
    """The tenant's DLQ topic (its end offsets read first, as the caller's principal) and the history
    store, once the store has indexed the topic to those ends; UsageError (exit 2) otherwise."""
    from scheduler.cli import UsageError
    from scheduler.client.errors import HistoryUnavailable
    from scheduler.client.queries import HistoryReader
    from scheduler.dlq import DlqNotIndexedYet, DlqTopic

    try:
        dlq = DlqTopic(settings, tenant)  # Kafka decides first: AccessDenied / a refused login
    except LookupError as exc:
        raise UsageError(f"{exc} (is {tenant!r} a registered tenant?)") from None
    reader = HistoryReader(settings)
    try:
        store = reader.store()
        dlq.wait_indexed(store)
        yield dlq, store
    except (HistoryUnavailable, DlqNotIndexedYet) as exc:
        raise UsageError(f"{exc}") from None
    finally:
        reader.close()
        dlq.close()


def _row(d: DeadLetterView) -> dict[str, Any]:
    """``GET /v1/dlq``'s item, plus this command's older ``error`` and where the record is."""
    from scheduler.cli.render import dead_letter_json

    return {**dead_letter_json(d), "error": f"{d.last_error_class}: {d.last_error_message}",
            "dlq_partition": d.dlq_partition, "dlq_offset": d.dlq_offset}


_TEXT_KEYS = ("occurrence_id", "schedule_id", "scheduled_for", "attempts", "handler", "error")


def _list(args: argparse.Namespace) -> int:
    from scheduler.cli import UsageError
    from scheduler.settings import load_settings

    with _indexed(load_settings(), args.tenant) as (_, store):
        try:
            page = store.dead_letters(args.tenant, cursor=args.cursor, limit=args.limit)
        except ValueError as exc:  # a cursor of another listing, a limit out of range
            raise UsageError(f"{exc}") from None
    for d in page.items:
        row = _row(d)
        print(json.dumps(row) if args.json else "  ".join(str(row[k]) for k in _TEXT_KEYS))
    if page.next_cursor:
        print(f"more: --after {page.next_cursor}", file=sys.stderr)
    return 0


def _replay(args: argparse.Namespace) -> int:
    """Replay; exit 1 (one stderr line each) when some listed entry's record is gone (retention)."""
    from scheduler.cli import UsageError
    from scheduler.dlq import DlqNotIndexedYet, NotInDlq, every_dead, replay
    from scheduler.settings import load_settings

    settings = load_settings()
    gone = 0
    with _indexed(settings, args.tenant) as (dlq, store):
        if args.all:
            where = [(d.occurrence_id, d.dlq_partition, d.dlq_offset) for d in every_dead(dlq, store)]
            for i in range(0, len(where), _REPLAY_CHUNK):
                entries = []
                for oid, partition, offset in where[i:i + _REPLAY_CHUNK]:
                    try:
                        entries.append(dlq.entry(oid, partition, offset))
                    except NotInDlq as exc:
                        print(f"ksched: error: {exc}: not replayed", file=sys.stderr)
                        gone += 1
                _print_replayed(replay(settings, entries, _now_ms()))
            return 1 if gone else 0
        try:
            found = [dlq.find(store, oid) for oid in dict.fromkeys(args.occurrence)]
        except (NotInDlq, DlqNotIndexedYet) as exc:
            raise UsageError(f"{exc}") from None
    _print_replayed(replay(settings, found, _now_ms()))
    return 0


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _print_replayed(sent: list[Any]) -> None:
    for occ in sent:
        print(f"replayed {occ.occurrence_id} (schedule {occ.schedule_id}) as attempt {occ.attempt}")
