"""The ``ksched`` command line.

Each sub-command lives in its own module under ``scheduler.cli`` exposing
``register(subparsers)``; modules import their heavy dependencies inside the
handler so ``ksched --help`` stays fast. A handler returns the exit code.
Errors the user can fix exit 2 with one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Order is the order shown by `ksched --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "kafka_cmd",
    "topics_cmd",
    "tenants_cmd",
    "preview_cmd",
    "processor_cmd",
    "worker_cmd",
    "history_cmd",
    "reconcile_cmd",
    "status_cmd",
    "schedule_cmd",
    "queries_cmd",
    "api_cmd",
    "dlq_cmd",
    "repartition_cmd",
    "demo_cmd",
    "bench_cmd",
)


class UsageError(Exception):
    """An error the user can fix; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ksched", description="Kafka-native job scheduler")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"scheduler.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from scheduler.kafka.credentials import CredentialsError
    from scheduler.kafka.errors import AccessError
    from scheduler.settings import SettingsError

    try:
        code: int = args.handler(args)
    except (UsageError, SettingsError, CredentialsError, AccessError) as exc:
        # one line naming the principal, the resource and the fix: never a client's stack of retries
        print(f"ksched: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
