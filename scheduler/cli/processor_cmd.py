"""``ksched processor``: run a partition-owning processor until SIGTERM/Ctrl-C."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "processor", help="run a processor: owns shards (ksched.shards), reads tenants' commands topics"
    )
    p.add_argument("--instance-id", default=None, help="name in logs and client ids (default host-pid)")
    p.add_argument(
        "--tick-budget", type=int, default=None, help="max dispatches per shard per transaction (setting)"
    )
    p.add_argument(
        "--metrics-port", type=int, default=None,
        help="serve /metrics here (default: setting metrics_port; 0: any free port)",
    )
    p.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import logging

    from scheduler.cli import UsageError
    from scheduler.metrics_endpoint import MetricsPortError, serve_metrics
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.quota_feed import DemandTopicMissing
    from scheduler.processor.runtime import Processor
    from scheduler.settings import load_settings
    from scheduler.tenant_registry import RegistryMissing

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    metrics = ProcessorMetrics()
    if not args.no_metrics:
        port = settings.metrics_port if args.metrics_port is None else args.metrics_port
        try:
            serve_metrics(settings, metrics.registry, job="ksched-processor", port=port)
        except MetricsPortError as exc:
            raise UsageError(str(exc)) from None
    proc = Processor(settings, instance_id=args.instance_id, tick_budget=args.tick_budget, metrics=metrics)
    proc.install_signal_handlers()
    try:
        proc.run()
    except (RegistryMissing, DemandTopicMissing) as exc:
        raise UsageError(str(exc)) from None
    return 0
