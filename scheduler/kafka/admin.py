"""Topic administration through confluent-kafka's AdminClient.

Knows Kafka and nothing of the domain: the caller passes plain topic plans
(anything with ``name``, ``partitions``, ``replication_factor``, ``configs``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from scheduler.kafka.clients import check_login
from scheduler.kafka.connection import KafkaConnection


class TopicLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def configs(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class TopicChange:
    """One difference between the plan and the cluster.

    ``action``: ``create`` (missing topic), ``alter`` (a config that is safe to
    set), or ``drift`` (a difference that is reported, never fixed
    automatically: changing a partition count remaps keys to shards, and
    replication changes need a reassignment plan).
    ``applied`` is False on a dry run and for drift.
    """

    topic: str
    action: str
    detail: str
    applied: bool


class AdminError(RuntimeError):
    """An admin request failed; the message names the topic and the broker's error."""


def admin_client(conn: KafkaConnection, **extra: Any) -> AdminClient:
    """An AdminClient as ``conn``'s principal; its first use checks the login (fail fast)."""
    if conn.principal:
        check_login(conn)
    return AdminClient(conn.config(**extra))


def _wait(futures: Mapping[Any, Future[Any]], what: str) -> None:
    for key, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            raise AdminError(f"{what} {getattr(key, 'name', key)}: {exc.args[0]}") from None


def apply_topics(
    admin: AdminClient, plans: Iterable[TopicLike], *, dry_run: bool = False, timeout_s: float = 30
) -> list[TopicChange]:
    """Make the cluster match ``plans`` as far as is safe; return every difference found.

    Post: missing topics exist (unless ``dry_run``); differing configs named by a
    plan are set; partition-count or replication differences are reported as drift.
    Idempotent: a second call on an unchanged cluster returns [].
    """
    plans = list(plans)
    metadata = admin.list_topics(timeout=timeout_s)
    existing = metadata.topics
    changes: list[TopicChange] = []
    to_create: list[NewTopic] = []
    to_check: list[TopicLike] = []
    for plan in plans:
        meta = existing.get(plan.name)
        if meta is None:
            changes.append(
                TopicChange(
                    plan.name,
                    "create",
                    f"partitions={plan.partitions} rf={plan.replication_factor} "
                    + " ".join(f"{k}={v}" for k, v in sorted(plan.configs.items())),
                    not dry_run,
                )
            )
            to_create.append(
                NewTopic(
                    plan.name,
                    num_partitions=plan.partitions,
                    replication_factor=plan.replication_factor,
                    config=dict(plan.configs),
                )
            )
            continue
        to_check.append(plan)
        changes.extend(_drift(plan, meta))
    if to_create and not dry_run:
        _wait(admin.create_topics(to_create, operation_timeout=timeout_s), "create topic")
        _await_metadata(admin, [t.topic for t in to_create], timeout_s)
    if to_check:
        changes.extend(_apply_configs(admin, to_check, dry_run=dry_run))
    return changes


def _drift(plan: TopicLike, meta: Any) -> list[TopicChange]:
    """Partition-count and replication differences of an existing topic: reported, never fixed."""
    changes: list[TopicChange] = []
    have = len(meta.partitions)
    if have != plan.partitions:
        changes.append(
            TopicChange(
                plan.name,
                "drift",
                f"has {have} partitions, plan says {plan.partitions}; not changed "
                "(it would move schedules between shards): migrate to a new namespace",
                False,
            )
        )
    rf = min((len(p.replicas) for p in meta.partitions.values()), default=0)
    if rf != plan.replication_factor:
        changes.append(
            TopicChange(
                plan.name,
                "drift",
                f"replication factor {rf}, plan says {plan.replication_factor}; "
                "not changed (needs a partition reassignment)",
                False,
            )
        )
    return changes


def _apply_configs(admin: AdminClient, plans: list[TopicLike], *, dry_run: bool) -> list[TopicChange]:
    """Set every config a plan names that differs on its (existing) topic, unless ``dry_run``."""
    changes: list[TopicChange] = []
    resources = [ConfigResource(ResourceType.TOPIC, p.name) for p in plans]
    described = admin.describe_configs(resources)
    alters: list[ConfigResource] = []
    for plan, res in zip(plans, resources, strict=True):
        fut = next(f for r, f in described.items() if r.name == res.name)
        try:
            current: dict[str, ConfigEntry] = fut.result()
        except KafkaException as exc:
            raise AdminError(f"describe configs {plan.name}: {exc.args[0]}") from None
        entries = []
        for key, want in sorted(plan.configs.items()):
            have_entry = current.get(key)
            have_value = have_entry.value if have_entry is not None else None
            if have_value != want:
                changes.append(TopicChange(plan.name, "alter", f"{key}: {have_value} -> {want}", not dry_run))
                entries.append(ConfigEntry(key, want, incremental_operation=AlterConfigOpType.SET))
        if entries:
            alters.append(ConfigResource(ResourceType.TOPIC, plan.name, incremental_configs=entries))
    if alters and not dry_run:
        _wait(admin.incremental_alter_configs(alters), "alter configs of")
    return changes


def _await_metadata(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Creation is acknowledged before every broker's metadata shows the topic;
    wait for it so that an immediate second apply sees no change."""
    deadline = time.monotonic() + timeout_s
    while True:
        topics = admin.list_topics(timeout=timeout_s).topics
        if all(n in topics and topics[n].partitions for n in names):
            return
        if time.monotonic() > deadline:
            missing = [n for n in names if n not in topics]
            raise AdminError(f"created topics not visible in metadata after {timeout_s}s: {missing}")
        time.sleep(0.1)


def delete_topics(admin: AdminClient, names: Iterable[str], timeout_s: float = 30) -> None:
    """Delete the named topics that exist (used to clean a test namespace)."""
    existing = admin.list_topics(timeout=timeout_s).topics
    names = [n for n in names if n in existing]
    if names:
        _wait(admin.delete_topics(names, operation_timeout=timeout_s), "delete topic")
