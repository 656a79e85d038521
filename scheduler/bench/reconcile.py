"""``ksched bench reconcile``: how long the reconciler takes over a window of N occurrences.

In a fresh namespace it writes, as ``ksched bench history`` does, N succeeded occurrences of one
tenant (100 per every-minute schedule, with each schedule's CREATE on ``schedule-history``: a
dispatch record and a SUCCEEDED event each, in transactions of 10,000 records), and a
``ShardState`` per shard whose cursors have passed the window (the processors' watermark). Then:

* ``topics``: ``ksched reconcile`` replays the tenant's topics and accounts for every occurrence;
* ``store``: the indexer fills the history store (``--dsn``; default a SQLite file in a temp
  folder; not timed here: ``ksched bench history`` measures it), then the reconciler reads it.

Each reconciliation is timed from its start (reading the state and the history) to its
verdict; records/s counts the records it read (topics) or the rows (store). Both must be
clean with N expected. Prints the figures, writes ``--json`` and a PNG next to it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scheduler.settings import Settings

TENANT = "t0"
T0_S = 1_900_000_020  # 2030-03-17T17:47:00Z: on a minute, a fire time of the schedules' "* * * * *"
PER_SCHEDULE = 100  # occurrences per schedule: one every minute for 100 minutes (scheduler/bench/history.py)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("reconcile", help="reconciler time over N occurrences")
    p.add_argument("-n", "--occurrences", type=int, default=1_000_000,
                   help="occurrences in the window (default 1000000)")
    p.add_argument("--dsn", default=None, help="history store for the store source (default: SQLite, temp)")
    p.add_argument("--json", dest="json_file", default="bench-out/reconcile.json")
    p.set_defaults(handler=_run)


def _closed_state(settings: Settings, until_s: int) -> Iterator[tuple[str, bytes, bytes]]:
    """A ``ShardState`` per shard whose tenant cursors have passed ``until_s``."""
    from scheduler.records import LaneCursor, ShardState, encode
    from scheduler.topology import topic_name

    for p in range(settings.partitions):
        cursors = tuple(LaneCursor(tenant=TENANT, lane=lane, at_s=until_s, schedule_id="\U0010ffff")  # type: ignore[arg-type]
                        for lane in ("STRICT", "FLEXIBLE"))
        yield topic_name(settings, "state"), f"shard:{p}".encode(), encode(ShardState(
            shard=p, watermark_ms=until_s * 1000, ticks=1, occurrences_emitted=0,
            updated_at_ms=until_s * 1000, cursors=cursors))


def _run(args: argparse.Namespace) -> int:
    import itertools
    import tempfile

    from scheduler.bench.common import bench_namespace, report
    from scheduler.bench.history import publish, records
    from scheduler.history import open_store
    from scheduler.history.indexer import Indexer
    from scheduler.reconcile.run import reconcile
    from scheduler.tenants import Tenant

    n = args.occurrences
    t1 = T0_S
    t2 = t1 + PER_SCHEDULE * 60
    space = bench_namespace([Tenant(name=TENANT)])
    try:
        settings = space.settings
        written = publish(settings, itertools.chain(records(settings, [TENANT], n, False, T0_S * 1000),
                                                    _closed_state(settings, t2 + 60)))
        topics = reconcile(settings, TENANT, t1, t2)
        folder = Path(tempfile.mkdtemp(prefix="ksched-bench-reconcile-"))
        dsn = args.dsn or f"sqlite://{folder / 'history.db'}"
        with open_store(dsn, Path("unused.db")) as store:
            store.reset()
            Indexer(settings, store, group=f"{settings.namespace}.history-bench").run(until_end=True)
            stored = reconcile(settings, TENANT, t1, t2, source="store", store=store)
        out = {
            "occurrences": n,
            "records_written": written,
            "topics_seconds": topics.seconds,
            "topics_records_read": topics.verdict.records,
            "topics_records_per_s": topics.verdict.records / topics.seconds,
            "topics_occurrences_per_s": n / topics.seconds,
            "store": type(store).__name__,
            "store_seconds": stored.seconds,
            "store_rows_per_s": stored.verdict.records / stored.seconds,
            "store_occurrences_per_s": n / stored.seconds,
            "topics_clean": topics.verdict.clean and topics.verdict.expected == n,
            "store_clean": stored.verdict.clean and stored.verdict.expected == n,
        }
        path = report(out, args.json_file)
        _plot(out, path.with_suffix(".png"))
        return 0 if out["topics_clean"] and out["store_clean"] else 1
    finally:
        space.close()


def _plot(out: dict[str, Any], png: Path) -> None:
    from scheduler.bench.common import pyplot

    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3))
    seconds = [out["topics_seconds"], out["store_seconds"]]
    ax.barh(["topics", "store"], seconds, color=["tab:blue", "tab:green"])
    ax.axvline(60, color="tab:red", linestyle="--", label="target 60 s")
    ax.set_xlabel(f"seconds to reconcile {out['occurrences']:,} occurrences")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    print(f"wrote {png}")
