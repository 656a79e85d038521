"""Fast handlers (inline and batch) against the real broker: one final report, no STARTED."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from test_worker_support import (
    NOW_MS,
    close_producer,
    committed,
    dispatch,
    occ,
    reports,
    running,
    version,
    wait_for,
)

from scheduler.records import AttemptReport
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.worker import CANCELED_CLASS, Context, Handlers, PermanentError

pytestmark = pytest.mark.kafka

TENANT = "wk-batch"


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    add_tenant(kafka_settings.tenants_file, Tenant(name=TENANT, max_running=4))
    apply_all()
    yield kafka_settings
    close_producer()


def test_batch_and_inline_handlers_send_only_a_final_report_with_the_start_time(cluster: Settings) -> None:
    batches: list[list[str]] = []
    inline: list[str] = []
    handlers = Handlers()

    @handlers.register_batch("many")
    def many(contexts: Sequence[Context]) -> list[BaseException | None]:
        batches.append([c.schedule_id for c in contexts])
        return [PermanentError("bad row") if c.schedule_id == "s-bad" else None for c in contexts]

    @handlers.register("one", inline=True)
    def one(ctx: Context) -> None:
        inline.append(ctx.schedule_id)

    version(cluster, TENANT, "s-canceled", 1, "CANCELED")
    sids = ["s-a", "s-b", "s-bad", "s-canceled"]
    with reports(cluster, TENANT) as rep, running(cluster, TENANT, handlers, worker_id="w-fast") as w:
        dispatch(cluster, TENANT, *(occ(TENANT, sid, handler="many") for sid in sids),
                 occ(TENANT, "s-one", handler="one"))
        rep.until(lambda _: len(rep.finals()) == 5)
        rep.poll(1.0)  # a duplicate run would show up here
        assert sorted(s for b in batches for s in b) == ["s-a", "s-b", "s-bad"]  # not the canceled one
        assert inline == ["s-one"]
        finals = rep.finals()
        for sid in [*sids, "s-one"]:
            assert [r.kind for r in rep.of(sid)] == [finals[sid].kind]  # no STARTED, no HEARTBEAT
        ran = [finals[s] for s in ("s-a", "s-b", "s-one")]
        assert all(r.kind == "SUCCEEDED" and r.started_at_ms is not None for r in ran)
        assert all(NOW_MS < _started(r) <= r.reported_at_ms and len(r.token) == 32 for r in ran)
        assert len({r.token for r in finals.values()}) == 5  # a fresh token per attempt
        bad = finals["s-bad"]
        assert (bad.kind, bad.retryable, bad.error_message) == ("FAILED", False, "bad row")
        gone = finals["s-canceled"]
        assert (gone.kind, gone.error_class, gone.started_at_ms) == ("FAILED", CANCELED_CLASS, None)
        assert w.metrics.value("ksched_worker_handled_total", outcome="succeeded") == 3
        assert w.metrics.value("ksched_worker_handled_total", outcome="permanent") == 1
        parts = range(cluster.partitions)
        wait_for(lambda: sum(max(0, committed(cluster, TENANT, p)) for p in parts) == 5, 10,
                 "offsets committed past the five records once their reports were acknowledged")


def _started(r: AttemptReport) -> int:
    assert r.started_at_ms is not None
    return r.started_at_ms
