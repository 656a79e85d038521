"""The indexer against the real broker: a clean replay, a replay killed with SIGKILL and resumed,
a new tenant's topics picked up live.

The records (dispatch, events, reports, history, schedules) are written in transactions to a
namespace of this module's own, so nothing else writes there while the replays compare.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from history_backends import HistoryBackend, normalised

from scheduler.bench.common import BenchNamespace, bench_namespace
from scheduler.bench.history import publish, records
from scheduler.history.indexer import Indexer, replay
from scheduler.history.metrics import HistoryMetrics
from scheduler.settings import Settings
from scheduler.tenants import Tenant

pytestmark = pytest.mark.kafka
TENANTS = ["ha", "hb"]
OCCURRENCES = 6_000  # x (dispatch, 2 reports, event) + history: ~24,000 records


@pytest.fixture(scope="module")
def space(kafka_settings: Settings) -> Iterator[BenchNamespace]:
    ns = bench_namespace([Tenant(name=t) for t in TENANTS])
    publish(ns.settings, records(ns.settings, TENANTS, OCCURRENCES, reports=True), per_txn=1_000)
    yield ns
    ns.close()


@pytest.fixture(scope="module")
def clean(
    space: BenchNamespace, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[object, ...]]]:
    """The rows of one uninterrupted replay."""
    db = tmp_path_factory.mktemp("clean") / "history.db"
    with HistoryBackend("sqlite", f"sqlite://{db}").store() as store:
        stats = replay(space.settings, store, from_beginning=True, group="clean")
        assert not stats.skipped
        return normalised(store)


def test_a_clean_replay_has_every_noun(clean: dict[str, list[tuple[object, ...]]]) -> None:
    assert len(clean["occurrences"]) == OCCURRENCES
    assert {r[7] for r in clean["occurrences"]} == {"SUCCEEDED"}
    assert len(clean["attempts"]) == OCCURRENCES
    assert all(r[9] == "SUCCEEDED" and r[6] is not None for r in clean["attempts"])  # result, started
    assert len(clean["schedules"]) == OCCURRENCES // 100


def _indexer(space: BenchNamespace, dsn: str, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "scheduler", "history", "--dsn", dsn, "--group", "killed",
           "--max-batch", "300", "--until-end", "--no-metrics", "--log-level", "WARNING", *extra]
    return subprocess.Popen(cmd, env=space.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_an_indexer_killed_mid_replay_resumes_to_the_same_rows(
    space: BenchNamespace, clean: dict[str, list[tuple[object, ...]]], tmp_path: Path, kind: str,
    request: pytest.FixtureRequest,
) -> None:
    if kind == "sqlite":
        backend = HistoryBackend("sqlite", f"sqlite://{tmp_path / 'killed.db'}")
    else:
        backend = HistoryBackend("postgres", request.getfixturevalue("pg_dsn"))
    with backend.store() as store:
        proc = _indexer(space, backend.dsn, "--from-beginning")
        try:
            deadline = time.monotonic() + 120
            while store.count("occurrences") < 500:  # some batches committed ...
                assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
                assert time.monotonic() < deadline, "the indexer committed nothing in 120 s"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(30)
        partial = store.count("occurrences")
        assert partial < OCCURRENCES, f"killed too late to be mid-replay: {partial} rows"
        done = _indexer(space, backend.dsn)
        _, err = done.communicate(timeout=180)
        assert done.returncode == 0, err.decode()[-2000:]
        got = normalised(store)
    assert got == clean, "a resumed replay must equal a clean one"
    for table, rows in got.items():
        keys = [r[:3] if table == "attempts" else r[:2] if table == "schedules" else r[:1] for r in rows]
        assert len(keys) == len(set(keys)), f"duplicate rows in {table}"


def test_a_new_tenants_topics_are_picked_up_live(space: BenchNamespace, tmp_path: Path) -> None:
    from scheduler.tenant_admin import current, put

    backend = HistoryBackend("sqlite", f"sqlite://{tmp_path / 'live.db'}")
    with backend.store() as writer, backend.store() as store:  # the test reads on its own connection
        metrics = HistoryMetrics()
        indexer = Indexer(space.settings, writer, group="live", metrics=metrics)
        import threading

        runner = threading.Thread(target=indexer.run, daemon=True)
        runner.start()
        try:
            _wait(lambda: store.count("occurrences") == OCCURRENCES, 120, "the first replay")
            put(space.settings, current(space.settings), Tenant(name="hnew"))
            from scheduler.kafka.admin import apply_topics
            from scheduler.topology import desired_topics

            apply_topics(space.admin, desired_topics(space.settings, [*TENANTS, "hnew"]))
            publish(space.settings, records(space.settings, ["hnew"], 50, reports=False))
            _wait(lambda: store.count("occurrences") == OCCURRENCES + 50, 60, "the new tenant's records")
            value = metrics.registry.get_sample_value
            assert value("ksched_history_rows_written_total", {"table": "occurrences"}) >= OCCURRENCES + 50
            assert value("ksched_history_rows_written_total", {"table": "schedule_changes"}) >= 1  # CREATEs
            assert value("ksched_history_records_total") == indexer.stats.records > 0
            assert value("ksched_history_batch_seconds_count") == indexer.stats.batches
        finally:
            indexer.stop()
            runner.join(30)


def _wait(pred: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
