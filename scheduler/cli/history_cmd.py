"""``ksched history``: the history indexer (docs/history.md) until SIGTERM/Ctrl-C.

Replays ``schedule-history``, ``schedules`` and every tenant's dispatch, occurrence-events and
commands topics into the history store (setting ``history_dsn``, or ``--dsn``), resuming from the
offsets stored in the database with the rows. ``--from-beginning`` empties the store first and
rebuilds it from the topics; ``--until-end`` returns once it has caught up (a one-shot rebuild).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "history", help="index the topics into the history store (SQLite or PostgreSQL)"
    )
    p.add_argument("--dsn", default=None,
                   help="the store: sqlite:///PATH, a file, or a PostgreSQL URL (default: history_dsn)")
    p.add_argument("--from-beginning", action="store_true",
                   help="empty the store and rebuild it by replaying the topics from their beginning")
    p.add_argument("--until-end", action="store_true",
                   help="exit once every partition is read to the end it had when assigned")
    p.add_argument("--group", default=None,
                   help="another set of indexers (another store): group <namespace>.history.GROUP "
                   "(default: <namespace>.history)")
    p.add_argument("--max-batch", type=int, default=16_000,
                   help="records per database transaction at most (default 16000)")
    metrics = p.add_mutually_exclusive_group()
    metrics.add_argument("--metrics-port", type=int, default=None,
                         help="serve /metrics here (default: setting metrics_port + 2; 0: any free port)")
    metrics.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    p.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import logging
    import signal

    from scheduler.cli import UsageError
    from scheduler.cli.worker_cmd import serve_metrics_or_exit
    from scheduler.history import HistoryStoreError, open_store
    from scheduler.history.indexer import Indexer
    from scheduler.history.metrics import HistoryMetrics
    from scheduler.settings import load_settings

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.max_batch < 1:
        raise UsageError(f"--max-batch {args.max_batch}: must be at least 1, e.g. --max-batch 16000")
    settings = load_settings()
    dsn = settings.history_dsn if args.dsn is None else args.dsn
    try:
        store = open_store(dsn, settings.history_default_sqlite)
    except (HistoryStoreError, ValueError) as exc:
        raise UsageError(f"--dsn / history_dsn {dsn!r}: {exc}") from None
    with store:
        if args.from_beginning:
            store.reset()
        metrics = HistoryMetrics()
        if not args.no_metrics:
            port = settings.metrics_port + 2 if args.metrics_port is None else args.metrics_port
            serve_metrics_or_exit(settings, metrics.registry, "ksched-history", port)
        indexer = Indexer(settings, store, group=args.group, max_batch=args.max_batch, metrics=metrics)
        signal.signal(signal.SIGTERM, lambda *_: indexer.stop())
        try:
            stats = indexer.run(until_end=args.until_end)
        except KeyboardInterrupt:
            indexer.stop()
            return 130
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(stats.skipped.items())) or "none"
        print(f"history: {stats.records} records in {stats.batches} batches; skipped: {skipped}; "
              f"rows: {store.counts()}")
    return 0

