"""``ksched bench history``: how fast the indexer rebuilds the history store from the topics.

In a fresh namespace it writes N occurrences' records -- for each a dispatch record and its
SUCCEEDED event (the "occurrence records"), with ``--reports`` also the worker's STARTED and
SUCCEEDED reports -- in transactions of 10,000 records, as the processor does. Then, in the same
run and against the same broker:

* baseline: a plain read_committed consumer reads the same topics (regex subscription) and
  touches every value: the ceiling any indexer on this machine has;
* the indexer rebuilds the store from the beginning (``--dsn``; default: a SQLite file in a temp
  folder), one transaction per batch with its offsets.

Both rates are counted from the first record to the last (the group join before it is not the
indexer's work). Prints records/s of both and the indexer's CPU µs per record, and writes ``--json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from scheduler.principals import as_admin, as_history
from scheduler.settings import Settings

T0_MS = 1_900_000_000_000


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("history", help="history indexer rebuild rate (records/s)")
    p.add_argument("-n", "--occurrences", type=int, default=25_000,
                   help="occurrences written (default 25000)")
    p.add_argument("--tenants", type=int, default=2)
    p.add_argument("--reports", action="store_true", help="also write STARTED and SUCCEEDED reports")
    p.add_argument("--dsn", default=None, help="history store to fill (default: SQLite in a temp folder)")
    p.add_argument("--max-batch", type=int, default=16_000)
    p.add_argument("--json", dest="json_file", default="bench-out/history.json")
    p.set_defaults(handler=_run)


def records(
    settings: Settings, tenants: list[str], n: int, reports: bool, t0_ms: int = T0_MS
) -> Iterator[tuple[str, bytes, bytes]]:
    """(topic, key, value) of ``n`` succeeded occurrences spread over ``tenants``, 100 per schedule
    every minute from ``t0_ms``, each schedule with its CREATE history entry."""
    from scheduler.domain.ids import occurrence_id
    from scheduler.records import (
        AttemptReport,
        Occurrence,
        OccurrenceEvent,
        ScheduleHistoryEntry,
        ScheduleSpecRecord,
        encode,
    )
    from scheduler.topology import topic_name

    spec = ScheduleSpecRecord(kind="cron", cron="* * * * *", timezone="UTC", handler="bench")
    for i in range(n):
        tenant = tenants[i % len(tenants)]
        sid = f"{tenant}-s{i // (100 * len(tenants))}"
        sf = t0_ms + (i // len(tenants) % 100) * 60_000
        key = sid.encode()
        if i // len(tenants) % 100 == 0:
            yield topic_name(settings, "schedule-history"), key, encode(ScheduleHistoryEntry(
                schedule_id=sid, tenant=tenant, version=1, command="CREATE", request_id=f"r-{sid}", spec=spec,
                state="ACTIVE", applied_at_ms=t0_ms - 1, effective_from_ms=t0_ms - 1))
        oid = occurrence_id(sid, 1, sf // 1000)
        yield topic_name(settings, "dispatch", tenant), key, encode(Occurrence(
            occurrence_id=oid, schedule_id=sid, tenant=tenant, version=1, scheduled_for_ms=sf,
            available_at_ms=sf, enqueued_at_ms=sf + 20, attempt=1, lane="STRICT", handler="bench",
            payload=b'{"n":1}'))
        if reports:
            for kind, at in (("STARTED", sf + 30), ("SUCCEEDED", sf + 60)):
                yield topic_name(settings, "commands", tenant), key, encode(AttemptReport(
                    occurrence_id=oid, schedule_id=sid, tenant=tenant, version=1, scheduled_for_ms=sf,
                    attempt=1, token=f"tok-{i}", kind=kind, worker_id="bench", reported_at_ms=at))  # type: ignore[arg-type]
        yield topic_name(settings, "occurrence-events", tenant), key, encode(OccurrenceEvent(
            occurrence_id=oid, schedule_id=sid, tenant=tenant, version=1, scheduled_for_ms=sf,
            state="SUCCEEDED", attempt=1, at_ms=sf + 61))


def publish(settings: Settings, items: Iterator[tuple[str, bytes, bytes]], per_txn: int = 10_000) -> int:
    """Produce ``items`` in transactions of ``per_txn`` records (keyed, murmur2); returns the count."""
    import secrets

    from scheduler.kafka.clients import produce_waiting, transactional_producer

    txn_id = f"{settings.namespace}.bench-{secrets.token_hex(3)}"
    prod = transactional_producer(as_admin(settings), txn_id)
    prod.init_transactions(30)
    count = 0
    prod.begin_transaction()
    for topic, key, value in items:
        produce_waiting(prod, topic, value, key)
        count += 1
        if count % per_txn == 0:
            prod.commit_transaction(60)
            prod.begin_transaction()
    prod.commit_transaction(60)
    return count


def raw_consume(settings: Settings, expected: int, timeout_s: float = 300) -> float:
    """Seconds a plain consumer takes to read ``expected`` records of the indexer's topics,
    from its first record to its last (touching each value)."""
    from scheduler.history.mapping import subscription
    from scheduler.kafka.clients import consumer

    c = consumer(as_history(settings), None, **{"fetch.max.bytes": 52_428_800,
                                                       "max.partition.fetch.bytes": 4_194_304})
    c.subscribe(subscription(settings.namespace))
    seen, first, size = 0, 0.0, 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < expected and time.monotonic() < deadline:
            for m in c.consume(5_000, 0.5):
                if m.error() is None:
                    if not seen:
                        first = time.monotonic()
                    seen += 1
                    size += len(m.value() or b"")
    finally:
        c.close()
    if seen < expected:
        raise RuntimeError(f"raw consume read {seen} of {expected} records in {timeout_s:g} s")
    return time.monotonic() - first


def _cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from scheduler.bench.common import bench_namespace, report
    from scheduler.history import open_store
    from scheduler.history.indexer import Indexer
    from scheduler.tenants import Tenant

    names = [f"t{i}" for i in range(args.tenants)]
    space = bench_namespace([Tenant(name=t) for t in names])
    try:
        settings = space.settings
        written = publish(settings, records(settings, names, args.occurrences, args.reports))
        raw_s = raw_consume(settings, written)
        dsn = args.dsn or f"sqlite://{Path(tempfile.mkdtemp(prefix='ksched-bench-history-')) / 'history.db'}"
        with open_store(dsn, Path("unused.db")) as store:
            store.reset()
            group = f"{settings.namespace}.history-bench"
            indexer = Indexer(settings, store, group=group, max_batch=args.max_batch)
            cpu_before = _cpu_s()
            stats = indexer.run(until_end=True)
            cpu_s = _cpu_s() - cpu_before
            rows = store.counts()
        index_s = stats.last_batch_at - stats.first_batch_at
        out = {
            "store": type(store).__name__,
            "occurrences": args.occurrences,
            "records": written,
            "raw_consume_records_per_s": written / raw_s,
            "indexer_records_per_s": stats.records / index_s if index_s > 0 else 0.0,
            "indexer_batches": stats.batches,
            "indexer_vs_raw": (stats.records / index_s) / (written / raw_s) if index_s > 0 else 0.0,
            # the indexer's CPU (every thread, librdkafka's too) per record: steadier than a rate on a
            # shared machine, and what bounds the rate when the database has a core of its own
            "indexer_cpu_us_per_record": cpu_s / stats.records * 1e6 if stats.records else 0.0,
            "rows_occurrences": rows["occurrences"],
            "rows_attempts": rows["attempts"],
            "rows_schedules": rows["schedules"],
        }
        report(out, args.json_file)
        if stats.records != written or rows["occurrences"] != args.occurrences:
            print(f"MISMATCH: indexed {stats.records} of {written} records, "
                  f"{rows['occurrences']} occurrences")
            return 1
        return 0
    finally:
        space.close()
