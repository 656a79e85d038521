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
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics here (default: setting)")
    p.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import logging

    from prometheus_client import start_http_server

    from scheduler.cli import UsageError
    from scheduler.processor.metrics import ProcessorMetrics
    from scheduler.processor.quota_feed import DemandTopicMissing
    from scheduler.processor.runtime import Processor
    from scheduler.settings import load_settings
    from scheduler.tenant_registry import RegistryMissing

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    metrics = ProcessorMetrics()
    if not args.no_metrics:
        start_http_server(
            args.metrics_port or settings.metrics_port, addr="127.0.0.1", registry=metrics.registry
        )
    proc = Processor(settings, instance_id=args.instance_id, tick_budget=args.tick_budget, metrics=metrics)
    proc.install_signal_handlers()
    try:
        proc.run()
    except (RegistryMissing, DemandTopicMissing) as exc:
        raise UsageError(str(exc)) from None
    return 0
