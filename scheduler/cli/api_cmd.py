"""``ksched api``: serve the HTTP API (docs/api.md); ``ksched api openapi``: its OpenAPI document.

ksched api [--port N] [--timeout S] [--workers N]   # 127.0.0.1, port: the setting api_port
ksched api openapi [--check]             # write docs/openapi.json (--check: fail if it differs)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("api", help="serve the HTTP API on 127.0.0.1")
    p.add_argument("--port", type=int, help="the port (default: the setting api_port)")
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds to await the processor's answer before a 202 (default 5)",
    )
    p.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="API processes on the port, each an instance of its own (its rate limit, its /metrics; "
        "default 1)",
    )
    p.set_defaults(handler=_serve)
    s = p.add_subparsers(dest="api_cmd", metavar="ACTION")
    o = s.add_parser("openapi", help="write the OpenAPI document to docs/openapi.json")
    o.add_argument("--check", action="store_true", help="exit 1 if the committed document is stale")
    o.set_defaults(handler=_openapi)


def _serve(args: argparse.Namespace) -> int:
    from scheduler.api.server import serve
    from scheduler.cli import UsageError
    from scheduler.settings import load_settings
    from scheduler.tenant_registry import RegistryMissing

    settings = load_settings()
    port = args.port if args.port is not None else settings.api_port
    print(f"ksched api: http://{settings.bind_host}:{port}/docs", flush=True)
    try:
        serve(port, host=settings.bind_host, timeout_s=args.timeout, workers=args.workers)
    except RegistryMissing as exc:
        raise UsageError(f"{exc} (run `ksched topics apply`)") from None
    return 0


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes: give 1 or more, e.g. 2")
    return int(text)


def _openapi(args: argparse.Namespace) -> int:
    from scheduler.api.server import OPENAPI_FILE, openapi_text

    text = openapi_text()
    if args.check:
        if not OPENAPI_FILE.is_file() or OPENAPI_FILE.read_text() != text:
            print(
                f"ksched: error: {OPENAPI_FILE} is stale: run `ksched api openapi` (or make openapi)",
                file=sys.stderr,
            )
            return 1
        return 0
    OPENAPI_FILE.write_text(text)
    print(f"wrote {OPENAPI_FILE}")
    return 0
