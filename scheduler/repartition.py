"""Growing the shard count: a blue/green copy of a namespace into a new one (``ksched repartition``).

A schedule's shard is murmur2(schedule id) mod partitions, so more partitions move most
schedules to another shard; altering the topics in place would strand their state. Instead
the old namespace's processors stop at a cutover instant C (setting ``emit_until``: every
lane cursor of every shard ends at ``(C - 1, DONE)``), then this module copies every schedule,
its runtime state, its history and the tenant registry, records unchanged, into the new
namespace, re-partitioned by the same partitioner, and gives every new shard the cursors
``(C - 1, DONE)``: its processors emit exactly the occurrences available at or after C.

The copy is one Kafka transaction: a copy killed midway leaves nothing a ``read_committed``
reader sees, and a rerun starts over. docs/operations.md has the procedure; docs/decisions.md
the decision.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Message, TopicPartition

from scheduler.kafka.admin import admin_client
from scheduler.kafka.clients import consumer, transactional_producer
from scheduler.kafka.reader import read_to_end, watermarks
from scheduler.processor.lanes import DONE
from scheduler.records import LaneCursor, ShardState, decode, encode, record_type
from scheduler.settings import Settings
from scheduler.tenant_admin import apply_all, current
from scheduler.topology import topic_name
from scheduler.vocabulary import Lane

# Copied as they are, keyed by schedule id (or tenant name), to the same topic of the new namespace.
CLUSTER_TOPICS = ("schedules", "schedule-history", "state")
TENANT_TOPICS = ("schedules", "versions")
KEEP_ALL = frozenset({"schedule-history"})  # a log, not a table: every record is copied
ON_TIME = (Lane.STRICT, Lane.FLEXIBLE)
KILL_AFTER_ENV = "KSCHED_REPARTITION_KILL_AFTER"  # tests: SIGKILL itself after this many records


Rec = tuple[bytes, bytes | None, int, int]


class RepartitionError(RuntimeError):
    """The migration is refused or failed; the message names what and the fix."""


@dataclass
class Plan:
    """What a run copies: per target topic, ``(key, value, timestamp ms, partition)`` in order
    (partition -1: by key, as every producer of a schedule-keyed record)."""

    records: dict[str, list[Rec]] = field(default_factory=dict)
    tenants: set[str] = field(default_factory=set)
    schedules: int = 0


def repartition(old: Settings, target_namespace: str, partitions: int, cutover: int,
                say: Callable[[str], None] = lambda _: None) -> Plan:
    """Copy ``old``'s namespace into ``target_namespace`` with ``partitions`` shards, the new side
    emitting from ``cutover`` (epoch seconds). Raises :class:`RepartitionError` when refused."""
    new = old.replace(namespace=target_namespace, partitions=partitions)
    _refuse_unsafe(old, new)
    _check_old_stopped(old)
    _check_commands_applied(old)
    _check_cursors(old, cutover)
    _check_target_empty(new)
    plan = read_plan(old, new, cutover)
    say(f"copying {plan.schedules} schedules of {len(plan.tenants)} tenants into {new.namespace} "
        f"({partitions} shards), emitting from {cutover}")
    apply_all(new, extra=plan.tenants)  # topics, principals and ACLs of the new namespace
    _write(new, plan)
    return plan


def _refuse_unsafe(old: Settings, new: Settings) -> None:
    if new.namespace == old.namespace:
        raise RepartitionError(
            f"--to {new.namespace}: the target must be a new namespace; pick another name")
    if new.partitions < old.partitions:
        raise RepartitionError(
            f"--partitions {new.partitions}: {old.namespace} has {old.partitions}; repartition only "
            "grows the shard count (give at least as many)")


def _check_old_stopped(old: Settings) -> None:
    group = f"{old.namespace}.processor"
    admin = admin_client(old.kafka())
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    except KafkaException as exc:
        raise RepartitionError(f"cannot describe the processor group {group}: {exc.args[0]}") from None
    if desc.members:
        raise RepartitionError(
            f"{len(desc.members)} processors of {old.namespace} are still running "
            f"({', '.join(sorted(m.client_id for m in desc.members))}): stop them once `ksched "
            "repartition --check` shows every shard at the cutover, then run it again")


def unapplied_commands(old: Settings) -> dict[str, int]:
    """Per tenant commands topic of ``old``, the records its processors have not committed as
    applied (a command the copy would leave behind)."""
    group = f"{old.namespace}.processor"
    admin = admin_client(old.kafka())
    c = consumer(old.kafka(), None)
    try:
        tps = []
        for t in sorted(current(old).target):
            topic = topic_name(old, "commands", t)
            meta = c.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None:
                tps += [TopicPartition(topic, p) for p in meta.partitions]
        if not tps:
            return {}
        req = [ConsumerGroupTopicPartitions(group, tps)]
        got = admin.list_consumer_group_offsets(req, request_timeout=10)[group].result(15)
        done = {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions}
        left: dict[str, int] = {}
        for tp in tps:
            low, high = watermarks(c, tp)
            behind = high - max(done.get((tp.topic, tp.partition), -1), low)
            if behind > 0:
                left[tp.topic] = left.get(tp.topic, 0) + behind
        return left
    finally:
        c.close()


def _check_commands_applied(old: Settings) -> None:
    left = unapplied_commands(old)
    if left:
        what = ", ".join(f"{n} on {t}" for t, n in sorted(left.items()))
        raise RepartitionError(
            f"commands not applied yet by {old.namespace}'s processors ({what}): the copy would lose "
            f"them; run the processors (with KSCHED_EMIT_UNTIL) until they are applied, then stop them")


def _read(settings: Settings, topics: list[str], on_record: Callable[[Message], None]) -> None:
    c = consumer(settings.kafka(), None, **{"enable.partition.eof": True})
    try:
        tps = []
        for t in topics:
            meta = c.list_topics(t, timeout=10).topics.get(t)
            if meta is not None and meta.error is None:
                tps += [TopicPartition(t, p) for p in meta.partitions]
        read_to_end(c, tps, on_record, poll_s=0.1)
    finally:
        c.close()


def shard_cursors(settings: Settings) -> dict[int, ShardState]:
    """The committed ``ShardState`` of every shard of ``settings``' namespace, by partition."""
    states: dict[int, ShardState] = {}

    def on_record(m: Message) -> None:
        v = m.value()
        if v is not None and record_type(v) is ShardState:
            states[m.partition() or 0] = decode(v, ShardState)

    _read(settings, [topic_name(settings, "state")], on_record)
    return states


def cursor_problems(settings: Settings, cutover: int) -> list[str]:
    """Why the old side is not exactly at the cutover (empty: every on-time lane cursor of every
    shard is ``(cutover - 1, DONE)``: all before C emitted, nothing at or after)."""
    states = shard_cursors(settings)
    problems = []
    for p in range(settings.partitions):
        st = states.get(p)
        if st is None:
            problems.append(f"shard {p} has no committed cursors: run its processor until it ticks")
            continue
        for c in st.cursors:
            if c.at_s >= cutover:
                problems.append(
                    f"shard {p} tenant {c.tenant} {c.lane}: emitted up to {c.at_s}, past the cutover "
                    f"{cutover}: its processors ran without KSCHED_EMIT_UNTIL={cutover}; pick a later "
                    "cutover and restart them with it")
            elif (c.at_s, c.schedule_id) != (cutover - 1, DONE):
                problems.append(
                    f"shard {p} tenant {c.tenant} {c.lane}: at {c.at_s}, not yet at the cutover "
                    f"{cutover}: keep its processors (KSCHED_EMIT_UNTIL={cutover}) running past it")
    return problems


def _check_cursors(old: Settings, cutover: int) -> None:
    problems = cursor_problems(old, cutover)
    if problems:
        raise RepartitionError(f"{old.namespace} is not at the cutover: " + "; ".join(problems))


def _check_target_empty(new: Settings) -> None:
    found: list[str] = []
    _read(new, [topic_name(new, "schedules"), topic_name(new, "state")],
          lambda m: found.append(m.topic() or ""))
    if found:
        raise RepartitionError(
            f"{new.namespace} already holds {len(found)} schedule and state records: the migration "
            "ran already (it commits all or nothing); point clients at it, or pick another --to")


def read_plan(old: Settings, new: Settings, cutover: int) -> Plan:
    """Everything to write to ``new``: the latest record per key of the compacted topics, all of
    the history, the tenant registry, and each new shard's cursors at the cutover."""
    plan = Plan()
    registry = current(old)
    plan.tenants = set(registry.target)
    sources: dict[str, str] = {topic_name(old, n): topic_name(new, n) for n in CLUSTER_TOPICS}
    sources[topic_name(old, "tenants")] = topic_name(new, "tenants")
    for t in plan.tenants:
        sources.update({topic_name(old, n, t): topic_name(new, n, t) for n in TENANT_TOPICS})
    t_state, t_history = topic_name(old, "state"), topic_name(old, "schedule-history")
    latest: dict[str, dict[bytes, tuple[bytes | None, int]]] = {t: {} for t in sources}
    history: list[Rec] = []
    laned: set[str] = set()

    def on_record(m: Message) -> None:
        topic, key, value = m.topic() or "", m.key() or b"", m.value()
        if topic == t_history:
            history.append((key, value, m.timestamp()[1], -1))
        elif topic == t_state and value is not None and record_type(value) is ShardState:
            # replaced below; a tenant with a lane here has schedules to arm, registered or not
            laned.update(c.tenant for c in decode(value, ShardState).cursors)
        else:
            latest[topic][key] = (value, m.timestamp()[1])

    _read(old, sorted(sources), on_record)
    for src, dst in sources.items():
        kept: list[Rec] = [(k, v, ts, -1) for k, (v, ts) in latest[src].items() if v is not None]
        plan.records[dst] = history if src == t_history else kept
    plan.schedules = len(plan.records[topic_name(new, "schedules")])
    plan.records[topic_name(new, "state")] += new_shard_states(new, plan.tenants | laned, cutover)
    return plan


def new_shard_states(new: Settings, tenants: set[str], cutover: int) -> list[Rec]:
    """Each new shard's cursors: every tenant's on-time lanes done up to ``cutover - 1``. On its
    own partition, as its processor writes it (restore reads partition p's, whatever the key
    hashes to)."""
    from scheduler.processor.wire_state import shard_state_key

    cursors = tuple(
        LaneCursor(tenant=t, lane=lane.name, at_s=cutover - 1, schedule_id=DONE, throttled_from_s=None)  # type: ignore[arg-type]
        for t in sorted(tenants) for lane in ON_TIME
    )
    now_ms = cutover * 1000
    return [
        (shard_state_key(q), encode(ShardState(shard=q, watermark_ms=(cutover - 1) * 1000, ticks=0,
                                               occurrences_emitted=0, updated_at_ms=now_ms, cursors=cursors)),
         now_ms, q)
        for q in range(new.partitions)
    ]


def _write(new: Settings, plan: Plan) -> None:
    """One transaction: all of the plan or, killed midway, none of it."""
    p = transactional_producer(new.kafka(), f"{new.namespace}.repartition",
                               **{"transaction.timeout.ms": 900_000})
    p.init_transactions(60)  # fences and aborts a killed earlier run's open transaction
    p.begin_transaction()
    kill_after = int(os.environ.get(KILL_AFTER_ENV, "0"))
    n = 0
    for topic, records in plan.records.items():
        for key, value, ts, partition in records:
            while True:
                try:
                    p.produce(topic, value, key, partition=partition, timestamp=ts)
                    break
                except BufferError:
                    p.poll(0.05)
            n += 1
            if kill_after and n == kill_after:
                p.flush(30)  # the records are on the broker, uncommitted: the case a rerun must handle
                os.kill(os.getpid(), signal.SIGKILL)
    try:
        p.commit_transaction(300)
    except KafkaException as exc:
        raise RepartitionError(
            f"the copy into {new.namespace} was not committed ({exc.args[0]}): nothing of it is "
            "visible; run `ksched repartition` again") from None

