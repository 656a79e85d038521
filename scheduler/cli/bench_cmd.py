"""``ksched bench <name>``: benchmarks that print their figures.

Each benchmark module under ``scheduler.bench`` exposes ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

BENCH_MODULES: tuple[str, ...] = (
    "timing", "burst", "restore", "purge", "workers", "history", "queries", "reconcile", "api",
    "capacity", "fire", "reports",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("bench", help="run a benchmark and print its figures")
    bench_sub = p.add_subparsers(dest="bench", metavar="BENCH")
    bench_sub.required = True
    for name in BENCH_MODULES:
        importlib.import_module(f"scheduler.bench.{name}").register(bench_sub)
