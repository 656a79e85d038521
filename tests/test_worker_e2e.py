"""The worker against the real broker: run, report, fail, skip malformed, recheck versions."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

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

from scheduler.records import AttemptReport, encode
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name
from scheduler.worker import (
    CANCELED_CLASS,
    UNKNOWN_HANDLER_CLASS,
    Context,
    Handlers,
    PermanentError,
    RetryableError,
)

pytestmark = pytest.mark.kafka

TENANTS = ("wk-run", "wk-fail", "wk-bad", "wk-cancel", "wk-coop", "wk-gc", "wk-parts", "wk-release")


@pytest.fixture(scope="module")
def cluster(kafka_settings: Settings) -> Iterator[Settings]:
    from scheduler.cli.topics_cmd import apply_all

    for t in TENANTS:
        add_tenant(kafka_settings.tenants_file, Tenant(name=t, max_running=4))
    apply_all()
    yield kafka_settings
    close_producer()


class Flaky(RetryableError):
    pass


def live_producers(collect: bool = True) -> set[int]:
    """The ids of the producers alive in this process (librdkafka clients, each with its threads),
    once unreachable ones are collected (``collect``): what a kept worker still reaches is listed.
    What an earlier test froze is unfrozen first: ``gc.get_objects()`` does not list it, and a
    later unfreeze would show it as new."""
    from confluent_kafka import Producer

    gc.unfreeze()
    if collect:
        gc.collect()
    return {id(o) for o in gc.get_objects() if isinstance(o, Producer)}


def test_a_stopped_worker_that_its_caller_keeps_holds_no_producer(cluster: Settings) -> None:
    """Once ``run`` returns, the worker's producer is released even though the worker object lives
    on (an embedding service keeps it; a ``gc.freeze()`` would make a cycle through it permanent).
    Before, such workers' producers went on dialling the broker after it stopped."""
    tenant = "wk-release"
    handlers = Handlers()
    handlers.register("h")(lambda ctx: None)
    version(cluster, tenant, "s-one", 1, "ACTIVE")
    dispatch(cluster, tenant, occ(tenant, "s-one"))  # the shared test producer exists from here on
    before = live_producers()
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers) as w:
        rep.until(lambda _: len(rep.finals()) == 1)  # its producer has sent a report
        mine = live_producers() - before
        assert len(mine) == 1
    assert w.assigned == set()
    # the handler pool's threads let go of it as they end, just after the stop
    wait_for(lambda: not live_producers() & mine, 10, "the stopped worker to let go of its producer")


def test_a_stopped_worker_frees_its_producer_without_a_collection_even_after_a_freeze(
    cluster: Settings,
) -> None:
    """``ksched worker`` freezes the heap (``freeze_gc``): a cycle through the stopped worker's
    clients would then never be collected. With the automatic collection off, the producer must
    go by its references alone once the worker stops."""
    tenant = "wk-release"
    handlers = Handlers()
    handlers.register("h")(lambda ctx: None)
    before = live_producers()
    gc.disable()
    try:
        with running(cluster, tenant, handlers, freeze_gc=True) as w:
            assert gc.get_freeze_count() > 0 and w.wait_ready(0)  # its clients made, then frozen
        # live_producers unfreezes: back in the generations, uncollected, listed again
        wait_for(lambda: not live_producers(collect=False) - before, 10,
                 "the producer to go without a collection")
    finally:
        gc.unfreeze()
        gc.enable()


def test_freeze_gc_freezes_the_filled_view_before_anything_runs_and_the_worker_runs_as_ever(
    cluster: Settings,
) -> None:
    """``freeze_gc`` (what ``ksched worker`` sets): once the view caught up, what is alive is frozen,
    the view's map of the tenant's schedules with it (empty, it would not have been tracked yet), so
    the full collections do not walk it; occurrences then run and report as without it."""
    tenant = "wk-gc"
    handlers = Handlers()
    handlers.register("h")(lambda ctx: None)
    version(cluster, tenant, "s-known", 1, "ACTIVE")
    gc.unfreeze()
    try:
        with reports(cluster, tenant) as rep, running(cluster, tenant, handlers, freeze_gc=True) as w:
            states = w.view._states
            assert len(states) == 1 and gc.get_freeze_count() > 0
            assert not any(o is states for o in gc.get_objects())  # frozen: out of every generation
            version(cluster, tenant, "s-new", 1, "ACTIVE")  # applied into the frozen map
            wait_for(lambda: len(w.view) == 2, 30, "the view to apply a record")
            dispatch(cluster, tenant, occ(tenant, "s-known"), occ(tenant, "s-new"))
            rep.until(lambda _: len(rep.finals()) == 2)
            assert {sid: r.kind for sid, r in rep.finals().items()} == \
                {"s-known": "SUCCEEDED", "s-new": "SUCCEEDED"}
    finally:
        gc.unfreeze()


def test_occurrence_runs_once_with_its_context_and_reports_started_then_succeeded(cluster: Settings) -> None:
    tenant = "wk-run"
    seen: list[Context] = []
    handlers = Handlers()

    @handlers.register("greet")
    def greet(ctx: Context) -> None:
        seen.append(ctx)

    version(cluster, tenant, "s-active", 2, "ACTIVE")
    version(cluster, tenant, "s-done", 1, "COMPLETED")  # from a command, or an older processor: runs
    first = occ(tenant, "s-new", handler="greet", payload=b"hello", attempt=2, version=1)
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers, worker_id="w-run") as w:
        dispatch(cluster, tenant, first, occ(tenant, "s-active", version=2, handler="greet"),
                 occ(tenant, "s-done", handler="greet"))
        rep.until(lambda _: len(rep.finals()) == 3)
        rep.poll(1.0)  # a duplicate run would show up here
        assert sorted(c.schedule_id for c in seen) == ["s-active", "s-done", "s-new"]
        ctx = next(c for c in seen if c.schedule_id == "s-new")
        assert (ctx.tenant, ctx.occurrence_id) == (tenant, first.occurrence_id)
        assert (ctx.attempt, ctx.version) == (2, 1)
        assert (ctx.payload, ctx.handler, ctx.scheduled_for_ms) == (b"hello", "greet", NOW_MS)
        assert ctx.scheduled_for.utcoffset() is not None and ctx.scheduled_for.timestamp() * 1000 == NOW_MS
        assert not ctx.cancelled and ctx.worker_id == "w-run"
        started, done = rep.of("s-new")
        assert (started.kind, done.kind) == ("STARTED", "SUCCEEDED")
        assert started.token == done.token == ctx.token and len(ctx.token) == 32
        assert (done.occurrence_id, done.attempt, done.version, done.scheduled_for_ms, done.worker_id) == (
            first.occurrence_id, 2, 1, NOW_MS, "w-run"
        )
        assert done.retryable is None and done.error_class is None
        assert w.metrics.value("ksched_worker_handled_total", outcome="succeeded") == 3
        assert w.metrics.value("ksched_worker_in_flight") == 0
        topic = topic_name(cluster, "dispatch", tenant)
        expect = {p: 0 for p in range(cluster.partitions)}
        for sid in ("s-new", "s-active", "s-done"):
            expect[_partition_of(cluster, topic, sid)] += 1
        wait_for(lambda: all(committed(cluster, tenant, p) == n for p, n in expect.items() if n), 10,
                 "offsets committed past the finished records")


def _partition_of(settings: Settings, topic: str, sid: str) -> int:
    from confluent_kafka import TopicPartition

    from scheduler.kafka.clients import consumer

    c = consumer(settings.kafka())
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for m in c.consume(100, 0.1):
                if m.error() is None and m.key() == sid.encode():
                    return int(m.partition() or 0)
        raise AssertionError(f"{sid} not found on {topic}")
    finally:
        c.close()


def test_failing_handlers_report_failed_retryable_or_permanent(cluster: Settings) -> None:
    tenant = "wk-fail"

    def flaky(ctx: Context) -> None:
        raise Flaky("try later")

    def permanent(ctx: Context) -> None:
        raise PermanentError("bad payload")

    def crash(ctx: Context) -> None:
        raise ValueError("x" * 5000)

    handlers = {"flaky": flaky, "permanent": permanent, "crash": crash}  # a plain dict works too
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers) as w:
        dispatch(cluster, tenant, *(occ(tenant, f"s-{h}", handler=h) for h in (*handlers, "missing")))
        rep.until(lambda _: len(rep.finals()) == 4)
        got = {sid: (r.kind, r.retryable, r.error_class) for sid, r in rep.finals().items()}
        assert got == {
            "s-flaky": ("FAILED", True, f"{Flaky.__module__}.Flaky"),
            "s-permanent": ("FAILED", False, "scheduler.worker.handlers.PermanentError"),
            "s-crash": ("FAILED", True, "ValueError"),
            "s-missing": ("FAILED", True, UNKNOWN_HANDLER_CLASS),
        }
        finals = rep.finals()
        assert finals["s-flaky"].error_message == "try later"
        assert finals["s-crash"].error_message == "x" * 1000
        assert "'missing'" in (finals["s-missing"].error_message or "")
        for sid in ("s-flaky", "s-permanent", "s-crash"):
            assert [r.kind for r in rep.of(sid)] == ["STARTED", "FAILED"]
            assert len({r.token for r in rep.of(sid)}) == 1
        assert w.metrics.value("ksched_worker_handled_total", outcome="retryable") == 2
        assert w.metrics.value("ksched_worker_handled_total", outcome="permanent") == 1


def test_malformed_records_are_skipped_and_the_good_ones_still_run(cluster: Settings) -> None:
    tenant = "wk-bad"
    ran: list[str] = []
    handlers = {"h": lambda ctx: ran.append(ctx.schedule_id)}
    foreign = encode(AttemptReport(
        occurrence_id="o", schedule_id="x", tenant=tenant, version=1, scheduled_for_ms=0, attempt=1,
        token="t", kind="STARTED", worker_id="w", reported_at_ms=0,
    ))
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers) as w:
        dispatch(
            cluster, tenant,
            occ(tenant, "s-1"), b"junk", occ(tenant, "s-2"), foreign, b"\xc3\x01" + b"\x00" * 20,
            occ("another-tenant", "s-x"), occ(tenant, "s-3"),
            partition=0,
        )
        rep.until(lambda _: len(rep.finals()) == 3)
        assert sorted(ran) == ["s-1", "s-2", "s-3"]
        assert w.metrics.value("ksched_worker_malformed_total", topic="dispatch") == 4
        wait_for(lambda: committed(cluster, tenant, 0) == 7, 10, "the commit past the last record")
        dispatch(cluster, tenant, occ(tenant, "s-4"), partition=0)  # and it keeps going
        rep.until(lambda _: "s-4" in rep.finals())
        assert "s-x" not in rep.finals()


def test_canceled_paused_or_superseded_occurrences_are_not_run(cluster: Settings) -> None:
    tenant = "wk-cancel"
    ran: list[str] = []
    handlers = {"h": lambda ctx: ran.append(ctx.schedule_id)}
    # Written before the worker starts: it must have read them before running anything.
    version(cluster, tenant, "s-canceled", 1, "CANCELED")
    version(cluster, tenant, "s-paused", 1, "PAUSED")
    version(cluster, tenant, "s-stale", 3, "ACTIVE")
    version(cluster, tenant, "s-ahead", 1, "PAUSED")  # the view has not seen version 2 yet: run
    version(cluster, tenant, "s-deleted", 1, "CANCELED")
    version(cluster, tenant, "s-deleted", None)  # tombstone: absent from the view, so run
    with reports(cluster, tenant) as rep, running(cluster, tenant, handlers) as w:
        assert w.view.get("s-canceled") is not None  # ready means the view has read to its end
        version(cluster, tenant, "s-late", 1, "CANCELED")  # arrives while running: the view follows
        wait_for(lambda: w.view.get("s-late") is not None, 10, "the view to see s-late")
        dispatch(
            cluster, tenant,
            occ(tenant, "s-canceled"), occ(tenant, "s-paused"), occ(tenant, "s-stale", version=2),
            occ(tenant, "s-ahead", version=2), occ(tenant, "s-deleted"), occ(tenant, "s-late"),
        )
        rep.until(lambda _: len(rep.finals()) == 6)
        assert sorted(ran) == ["s-ahead", "s-deleted"]
        finals = rep.finals()
        canceled = {sid: finals[sid].error_message for sid in ("s-canceled", "s-paused", "s-stale", "s-late")}
        assert canceled == {
            "s-canceled": "schedule canceled", "s-paused": "schedule paused",
            "s-stale": "superseded by version 3", "s-late": "schedule canceled",
        }
        for sid in canceled:
            r = finals[sid]
            assert (r.kind, r.retryable, r.error_class) == ("FAILED", False, CANCELED_CLASS)
            assert [x.kind for x in rep.of(sid)] == ["FAILED"]  # never STARTED: nothing ran
        assert w.metrics.value("ksched_worker_canceled_total", reason="canceled") == 2
        assert w.metrics.value("ksched_worker_canceled_total", reason="superseded") == 1


def test_a_running_handler_is_flagged_when_its_schedule_is_canceled(cluster: Settings) -> None:
    tenant = "wk-coop"
    entered = threading.Event()

    def long_job(ctx: Context) -> None:
        entered.set()
        while not ctx.wait_cancelled(0.05):
            pass
        ctx.raise_if_cancelled()

    with reports(cluster, tenant) as rep, running(cluster, tenant, {"long": long_job}):
        version(cluster, tenant, "s-long", 1, "ACTIVE")
        dispatch(cluster, tenant, occ(tenant, "s-long", handler="long"))
        assert entered.wait(30)
        version(cluster, tenant, "s-long", 1, "CANCELED")
        rep.until(lambda _: "s-long" in rep.finals())
        started, done = rep.of("s-long")[0], rep.finals()["s-long"]
        assert (done.kind, done.error_class) == ("FAILED", CANCELED_CLASS)
        assert done.error_message == "schedule canceled"
        assert done.token == started.token


def test_versions_topic_missing_is_a_config_error(cluster: Settings) -> None:
    from scheduler.access_admin import ensure_tenants
    from scheduler.worker import TopicMissingError, Worker

    add_tenant(cluster.tenants_file, Tenant(name="wk-notopics"))  # registered, topics never applied
    ensure_tenants(cluster, ["wk-notopics"])  # its principal: the topics are what is missing
    w = Worker(cluster, tenant="wk-notopics", handlers={})
    with pytest.raises(TopicMissingError, match="ksched tenants add wk-notopics"):
        w.run()


def test_a_commands_topic_with_another_partition_count_is_a_config_error(cluster: Settings) -> None:
    """A worker sends a dispatch partition's reports to the commands partition of the same number:
    with another count there it would send them to another shard. It refuses to start, naming
    both counts and the fix, before consuming anything."""
    from confluent_kafka.admin import NewPartitions

    from scheduler.kafka.admin import admin_client
    from scheduler.worker import Worker, WorkerConfigError

    commands = topic_name(cluster, "commands", "wk-parts")
    grown = cluster.partitions + 1
    admin = admin_client(cluster.kafka())  # held: a collected client cancels its futures
    for f in admin.create_partitions([NewPartitions(commands, grown)]).values():
        f.result(timeout=30)
    w = Worker(cluster, tenant="wk-parts", handlers={})
    dispatch = topic_name(cluster, "dispatch", "wk-parts")
    before = live_producers()
    with pytest.raises(WorkerConfigError, match=rf"{dispatch} has {cluster.partitions} partitions and "
                                                rf"{commands} {grown}.*ksched repartition"):
        w.run()
    assert not live_producers() - before, "the refused worker made a producer and kept it"
