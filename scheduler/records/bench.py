"""Codec throughput on this machine: ``python -m scheduler.records.bench [-n N]``.

Measures the hot-path records (``Occurrence`` dispatch records, ``AttemptReport``
worker reports) through :func:`encode` / :func:`decode`, next to fastavro on a
plain ``dict`` (what a TypedDict representation would cost) as the floor.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from scheduler.records.codec import current_schema, decode, encode
from scheduler.records.types import AttemptReport, Occurrence


def _rate(fn: Callable[[], Any], n: int) -> float:
    for _ in range(min(n, 1000)):
        fn()
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = max(best, n / (time.perf_counter() - t))
    return best


def sample_occurrence() -> Occurrence:
    return Occurrence(
        occurrence_id="5f0c6c1b2a0e4e7f9d6b8a3c1e2f4a6b", schedule_id="9d1e0a7c3b5f4e2d8c6a1b0f7e3d5c2a",
        tenant="acme", version=3, scheduled_for_ms=1_767_225_600_000, available_at_ms=1_767_225_600_000,
        enqueued_at_ms=1_767_225_600_142, attempt=1, lane="STRICT", handler="billing.invoice",
        payload=b'{"customer":"c-1042","plan":"pro"}',
    )


def sample_report() -> AttemptReport:
    return AttemptReport(
        occurrence_id="5f0c6c1b2a0e4e7f9d6b8a3c1e2f4a6b", schedule_id="9d1e0a7c3b5f4e2d8c6a1b0f7e3d5c2a",
        tenant="acme", version=3, scheduled_for_ms=1_767_225_600_000, attempt=1, token="w1-000042",
        kind="SUCCEEDED", worker_id="worker-1", reported_at_ms=1_767_225_600_950,
    )


def run(n: int) -> list[tuple[str, float, int]]:
    occ, rep = sample_occurrence(), sample_report()
    occ_raw, rep_raw = encode(occ), encode(rep)
    schema = current_schema(Occurrence)
    datum = {f.name: getattr(occ, f.name) for f in fields(Occurrence)}

    def dict_encode() -> bytes:
        buf = io.BytesIO()
        buf.write(schema.header)
        schemaless_writer(buf, schema.parsed, datum)
        return buf.getvalue()

    def dict_decode() -> Any:
        buf = io.BytesIO(occ_raw)
        buf.seek(10)
        return schemaless_reader(buf, schema.parsed, None)

    return [
        ("Occurrence encode", _rate(lambda: encode(occ), n), len(occ_raw)),
        ("Occurrence decode", _rate(lambda: decode(occ_raw, Occurrence), n), len(occ_raw)),
        ("AttemptReport encode", _rate(lambda: encode(rep), n), len(rep_raw)),
        ("AttemptReport decode", _rate(lambda: decode(rep_raw, AttemptReport), n), len(rep_raw)),
        ("fastavro dict encode (floor)", _rate(dict_encode, n), len(occ_raw)),
        ("fastavro dict decode (floor)", _rate(dict_decode, n), len(occ_raw)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler.records.bench", description=__doc__)
    ap.add_argument("-n", type=int, default=200_000, help="operations per measurement (best of 3)")
    args = ap.parse_args(argv)
    for name, rate, size in run(args.n):
        print(f"{name:<30} {rate:>12,.0f} /s   {size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
