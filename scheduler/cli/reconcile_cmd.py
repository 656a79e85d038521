"""``ksched reconcile``: prove that no expected occurrence of a closed window was lost (docs/reconcile.md).

Exit codes: 0 clean, 1 any GAP / UNEXPECTED / DUPLICATE, 2 a usage error or a window not
closed yet. ``--watch`` reconciles consecutive closed windows until Ctrl-C and serves
Prometheus metrics.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

WATCH_WINDOW_S = 60  # --watch: the length of each window reconciled


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "reconcile", help="recompute a tenant's expected occurrences and account for each from the records"
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--from", dest="t1", required=True, metavar="T1",
                   help="window start (scheduled_for), ISO 8601 (UTC if no offset) or epoch seconds")
    p.add_argument("--to", dest="t2", default="now", metavar="T2",
                   help="window end, exclusive (default now: clamped to what the processors have closed)")
    p.add_argument("--source", choices=("topics", "store"), default="topics",
                   help="replay the topics (default) or read the history store")
    p.add_argument("--dsn", default=None, help="the history store for --source store (default: history_dsn)")
    p.add_argument("--json", dest="json_file", type=Path, default=None, metavar="FILE",
                   help="write the counts and every gap, unexpected record and duplicate to FILE")
    p.add_argument("--watch", action="store_true",
                   help=f"reconcile closed {WATCH_WINDOW_S} s windows from T1 on, continuously, with metrics")
    p.add_argument("--interval", type=float, default=10.0, help="--watch: seconds between passes")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="--watch: serve /metrics here (default: setting metrics_port + 3)")
    p.set_defaults(handler=_run)


def parse_instant(flag: str, text: str) -> int:
    """Epoch seconds of ``text``: ``now``, an integer, or ISO 8601 (UTC when it has no offset)."""
    from scheduler.cli.instants import iso_utc

    if text == "now":
        return int(time.time())
    if text.lstrip("-").isdigit():
        return int(text)
    return int(iso_utc(flag, text, "an ISO-8601 datetime, epoch seconds or 'now'").timestamp())


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from scheduler.cli import UsageError
    from scheduler.reconcile.run import WindowNotClosed
    from scheduler.settings import load_settings

    settings = load_settings()
    t1, t2 = parse_instant("--from", args.t1), parse_instant("--to", args.t2)
    if t2 <= t1 and not args.watch:
        raise UsageError(f"--to {args.t2} is not after --from {args.t1}: give a window T1 < T2")
    console = Console()
    store = _store(settings, args) if args.source == "store" else None
    try:
        if args.watch:
            return _watch(settings, args, t1, store, console)
        try:
            outcome = _once(settings, args, t1, t2, store, console)
        except WindowNotClosed as exc:
            raise UsageError(str(exc)) from None
        except LookupError as exc:  # a topic that does not exist: names it and `ksched topics apply`
            raise UsageError(f"--tenant {args.tenant}: {exc}") from None
    finally:
        if store is not None:
            store.close()
    from scheduler.reconcile.report import show, write_json

    show(outcome, args.tenant, console)
    if args.json_file is not None:
        write_json(outcome, args.tenant, args.json_file)
    return 0 if outcome.verdict.clean else 1


def _store(settings: Any, args: argparse.Namespace) -> Any:
    from scheduler.cli import UsageError
    from scheduler.history import HistoryStoreError, open_store

    dsn = settings.history_dsn if args.dsn is None else args.dsn
    try:
        return open_store(dsn, settings.history_default_sqlite, read_only=True)  # it only reads
    except (HistoryStoreError, ValueError) as exc:
        raise UsageError(f"--dsn / history_dsn {dsn!r}: {exc}") from None


def _once(settings: Any, args: argparse.Namespace, t1: int, t2: int, store: Any, console: Any) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from scheduler.reconcile.run import reconcile

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(f"reading {args.source}", total=None)
        return reconcile(settings, args.tenant, t1, t2, source=args.source, store=store,
                         progress=lambda n: bar.advance(task, n))


def _watch(settings: Any, args: argparse.Namespace, t1: int, store: Any, console: Any) -> int:
    """Reconcile ``[t1, t1 + W)``, then the next window, each once it is closed; never returns but
    by Ctrl-C (130). A window with findings is shown and written to ``--json``; metrics count all."""
    import signal

    from scheduler.cli.worker_cmd import serve_metrics_or_exit
    from scheduler.reconcile.metrics import ReconcileMetrics
    from scheduler.reconcile.report import show, write_json
    from scheduler.reconcile.run import WindowNotClosed, reconcile

    metrics = ReconcileMetrics()
    port = settings.metrics_port + 3 if args.metrics_port is None else args.metrics_port
    serve_metrics_or_exit(settings, metrics.registry, "ksched-reconcile", port)
    console.print(f"reconciling {args.tenant} in {WATCH_WINDOW_S} s windows from {t1}; metrics on :{port}")
    # SIGTERM (docker stop, a supervisor) exits cleanly: atexit then removes the Prometheus target file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            try:
                o = reconcile(settings, args.tenant, t1, t1 + WATCH_WINDOW_S, source=args.source, store=store)
            except WindowNotClosed:
                time.sleep(args.interval)
                continue
            metrics.observe(args.tenant, o)
            if not o.verdict.clean:
                show(o, args.tenant, console)
                if args.json_file is not None:
                    write_json(o, args.tenant, args.json_file)
            else:
                console.print(f"{o.window.t1}..{o.window.t2}: {o.verdict.expected} expected, clean")
            t1 = o.window.t2
    except KeyboardInterrupt:
        return 130
