"""``ksched dlq list|replay``: a tenant's dead occurrences, and running them again."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("dlq", help="list or replay a tenant's dead occurrences")
    s = p.add_subparsers(dest="dlq_cmd", metavar="ACTION")
    s.required = True
    ls = s.add_parser("list", help="the tenant's dead-letter entries, oldest first")
    ls.add_argument("--tenant", required=True)
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.set_defaults(handler=_list)
    rp = s.add_parser("replay", help="dispatch dead occurrences again (same occurrence id); --occurrence "
                      "finds each through the history store (`ksched history` must be indexing)")
    rp.add_argument("--tenant", required=True)
    g = rp.add_mutually_exclusive_group(required=True)
    g.add_argument("--occurrence", action="append", metavar="OID", help="an occurrence id (repeatable)")
    g.add_argument("--all", action="store_true", help="every entry in the tenant's DLQ")
    rp.set_defaults(handler=_replay)


def _entries(args: argparse.Namespace) -> list[Any]:
    from scheduler.cli import UsageError
    from scheduler.dlq import read_dlq
    from scheduler.settings import load_settings

    try:
        return read_dlq(load_settings(), args.tenant)
    except LookupError as exc:
        raise UsageError(f"{exc} (is {args.tenant!r} a registered tenant?)") from None


def _list(args: argparse.Namespace) -> int:
    for d in _entries(args):
        row = {
            "occurrence_id": d.occurrence_id,
            "schedule_id": d.schedule_id,
            "scheduled_for": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(d.scheduled_for_ms / 1000)),
            "attempts": d.attempts,
            "handler": d.handler,
            "error": f"{d.last_error_class}: {d.last_error_message}",
        }
        print(json.dumps(row) if args.json else "  ".join(str(v) for v in row.values()))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from scheduler.dlq import replay
    from scheduler.settings import load_settings

    if args.all:
        entries = list({d.occurrence_id: d for d in _entries(args)}.values())  # the latest death of each
    else:
        entries = _found(args, load_settings())
    for occ in replay(load_settings(), entries, int(time.time() * 1000)):
        print(f"replayed {occ.occurrence_id} (schedule {occ.schedule_id}) as attempt {occ.attempt}")
    return 0


def _found(args: argparse.Namespace, settings: Any) -> list[Any]:
    """Each ``--occurrence``'s latest entry, found through the history store (one record read
    each, not the whole topic)."""
    from scheduler.cli import UsageError
    from scheduler.client.errors import HistoryUnavailable
    from scheduler.client.queries import HistoryReader
    from scheduler.dlq import DlqNotIndexedYet, NotInDlq, find_dead

    reader = HistoryReader(settings)
    try:
        store = reader.store()
        return [find_dead(settings, store, args.tenant, oid) for oid in dict.fromkeys(args.occurrence)]
    except HistoryUnavailable as exc:
        raise UsageError(f"{exc} (--all reads the DLQ topic itself)") from None
    except (NotInDlq, DlqNotIndexedYet) as exc:
        raise UsageError(f"{exc}") from None
    except LookupError as exc:
        raise UsageError(f"{exc} (is {args.tenant!r} a registered tenant?)") from None
    finally:
        reader.close()
