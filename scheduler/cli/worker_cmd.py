"""``ksched worker``: run a tenant's handlers until SIGTERM/Ctrl-C.

``--handlers module[:attr]`` names a :class:`scheduler.worker.Handlers` (or a
plain dict of name -> callable); ``attr`` defaults to ``handlers`` and the
module is imported with the working directory on ``sys.path``.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "worker", help="run registered handlers for a tenant's occurrences"
    )
    p.add_argument("--tenant", required=True, help="the tenant whose dispatch topic to consume")
    p.add_argument(
        "--handlers", required=True, metavar="MODULE[:ATTR]",
        help="where the handlers are: a Handlers object or a dict name -> callable (ATTR default: handlers)",
    )
    p.add_argument(
        "--concurrency", type=int, default=None,
        help="max handlers running at once in this process (default: the tenant's max_running, else 64)",
    )
    p.add_argument("--worker-id", default=None, help="name in reports and logs (default host-pid-random)")
    p.add_argument(
        "--grace-s", type=float, default=30.0,
        help="on SIGTERM, wait this long for running handlers before leaving their work to another worker",
    )
    p.add_argument("--heartbeat-s", type=float, default=5.0, help="seconds between HEARTBEAT reports")
    p.add_argument(
        "--single-reports", action="store_true",
        help="send each fast handler's final report as its own record, not a batch's as one AttemptReports "
        "record per partition (for processors older than AttemptReports: upgrade processors first)",
    )
    metrics = p.add_mutually_exclusive_group()
    metrics.add_argument(
        "--metrics-port", type=int, default=None,
        help="serve /metrics here (default: setting metrics_port + 1, next to a local processor's; "
        "0: any free port)",
    )
    metrics.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    p.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    p.set_defaults(handler=_run)


def load_handlers(spec: str) -> Any:
    """Import ``module[:attr]`` (cwd on sys.path); :class:`UsageError` naming what is missing."""
    import importlib
    import os
    import sys

    from scheduler.cli import UsageError

    module_name, _, attr = spec.partition(":")
    attr = attr or "handlers"
    if not module_name:
        raise UsageError(f"--handlers {spec!r}: give a module, e.g. --handlers myjobs or myjobs:handlers")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(
                f"--handlers {spec!r}: no module named {module_name!r} (searched the working directory "
                f"{cwd} and the installed packages)"
            ) from None
        raise UsageError(f"--handlers {spec!r}: importing {module_name} failed: {exc}") from None
    except Exception as exc:
        raise UsageError(
            f"--handlers {spec!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, attr):
        raise UsageError(
            f"--handlers {spec!r}: module {module_name} has no attribute {attr!r}; "
            f"define `{attr} = Handlers()` there or name another with {module_name}:NAME"
        )
    return getattr(module, attr)


def _run(args: argparse.Namespace) -> int:
    import logging
    from collections.abc import Mapping

    from scheduler.cli import UsageError
    from scheduler.settings import load_settings
    from scheduler.worker import HandlerError, Handlers, Worker, WorkerConfigError, WorkerMetrics

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    found = load_handlers(args.handlers)
    if not isinstance(found, Mapping):
        raise UsageError(
            f"--handlers {args.handlers!r}: {type(found).__name__} is not a Handlers object "
            "or a dict of name -> callable"
        )
    try:
        handlers = Handlers.of(found)
        metrics = WorkerMetrics(args.tenant)
        worker = Worker(
            settings, tenant=args.tenant, handlers=handlers, concurrency=args.concurrency,
            worker_id=args.worker_id, grace_s=args.grace_s, heartbeat_s=args.heartbeat_s, metrics=metrics,
            freeze_gc=True,  # this process runs the worker alone (Worker's docstring)
            batch_reports=not args.single_reports,
        )
    except (WorkerConfigError, HandlerError) as exc:
        raise UsageError(str(exc)) from None
    if not args.no_metrics:
        port = settings.metrics_port + 1 if args.metrics_port is None else args.metrics_port
        serve_metrics_or_exit(settings, metrics.registry, "ksched-worker", port)
    try:
        worker.run()
    except WorkerConfigError as exc:
        raise UsageError(str(exc)) from None
    return 0



def serve_metrics_or_exit(settings: Any, registry: Any, job: str, port: int) -> None:
    """Serve and register /metrics (scheduler.metrics_endpoint); a busy port is a UsageError."""
    from scheduler.cli import UsageError
    from scheduler.metrics_endpoint import MetricsPortError, serve_metrics

    try:
        serve_metrics(settings, registry, job=job, port=port)
    except MetricsPortError as exc:
        raise UsageError(str(exc)) from None
