"""The topics ksched needs, read from ``topics/topics.toml`` (DESIGN.md §3).

Pure data: no Kafka import. :func:`desired_topics` turns the declarations plus
settings and tenants into concrete names, partition counts and configs that
``scheduler.kafka.admin`` applies.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.resources import resource_dir
from scheduler.settings import Settings


@dataclass(frozen=True, kw_only=True)
class TopicDecl:
    """One topic as declared in topics.toml."""

    name: str
    scope: str  # cluster | tenant
    cleanup: str  # delete | compact
    timestamp_type: str  # CreateTime | LogAppendTime
    retention_ms: int | None = None
    segment_ms: int | None = None  # compacted topics: a segment rolls (and can be cleaned) this often
    delete_retention_ms: int | None = None  # compacted topics: how long a tombstone is kept
    partitions: int | None = None  # None: the shard count (setting ``partitions``)


@dataclass(frozen=True, kw_only=True)
class TopicPlan:
    """A concrete topic to exist on the cluster."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


class TopologyError(ValueError):
    """topics.toml is malformed; the message names the topic and field."""


def load_declarations(path: Path | None = None) -> tuple[dict[str, dict[str, int]], list[TopicDecl]]:
    path = path or resource_dir("topics") / "topics.toml"
    data = tomllib.loads(path.read_text())
    envs: dict[str, dict[str, int]] = data.get("environments", {})
    decls: list[TopicDecl] = []
    for raw in data.get("topic", []):
        name = raw.get("name", "?")
        if raw.get("scope") not in ("cluster", "tenant"):
            raise TopologyError(f"topic {name}: scope {raw.get('scope')!r} is not cluster or tenant")
        if raw.get("cleanup") not in ("delete", "compact"):
            raise TopologyError(f"topic {name}: cleanup {raw.get('cleanup')!r} is not delete or compact")
        if raw.get("timestamp_type") not in ("CreateTime", "LogAppendTime"):
            raise TopologyError(
                f"topic {name}: timestamp_type {raw.get('timestamp_type')!r} "
                "is not CreateTime or LogAppendTime"
            )
        partitions = raw.get("partitions")
        if partitions != "shards" and not (type(partitions) is int and partitions >= 1):
            raise TopologyError(
                f"topic {name}: partitions {partitions!r}: use \"shards\" (every schedule-keyed "
                "topic shares the shard count) or a fixed count of at least 1 for a topic keyed otherwise"
            )
        decls.append(
            TopicDecl(
                name=name,
                scope=raw["scope"],
                cleanup=raw["cleanup"],
                timestamp_type=raw["timestamp_type"],
                retention_ms=raw.get("retention_ms"),
                segment_ms=raw.get("segment_ms"),
                delete_retention_ms=raw.get("delete_retention_ms"),
                partitions=None if partitions == "shards" else partitions,
            )
        )
    return envs, decls


def topic_name(settings: Settings, name: str, tenant: str | None = None) -> str:
    """``<namespace>.<name>`` or, for a per-tenant topic, ``<namespace>.<name>.<tenant>``."""
    base = f"{settings.namespace}.{name}"
    return f"{base}.{tenant}" if tenant else base


def tenant_of(settings: Settings, name: str, topic: str) -> str | None:
    """The tenant of ``topic`` if it is tenant ``T``'s ``<namespace>.<name>.T``, else None."""
    prefix = f"{settings.namespace}.{name}."
    return topic[len(prefix):] if topic.startswith(prefix) and len(topic) > len(prefix) else None


def desired_topics(settings: Settings, tenants: Iterable[str]) -> list[TopicPlan]:
    """Every topic for the cluster-wide set plus each tenant's own topics."""
    envs, decls = load_declarations()
    env = envs.get(settings.environment)
    if env is None:
        raise TopologyError(f"topics.toml has no [environments.{settings.environment}] section")
    tenant_list = sorted(set(tenants))
    plans: list[TopicPlan] = []
    for d in decls:
        configs = {
            "cleanup.policy": d.cleanup,
            "message.timestamp.type": d.timestamp_type,
            "min.insync.replicas": str(env["min_insync_replicas"]),
        }
        if d.retention_ms is not None:
            configs["retention.ms"] = str(d.retention_ms)
        if d.segment_ms is not None:
            configs["segment.ms"] = str(d.segment_ms)
        if d.delete_retention_ms is not None:
            configs["delete.retention.ms"] = str(d.delete_retention_ms)
        owners: list[str | None] = [None] if d.scope == "cluster" else list(tenant_list)
        for tenant in owners:
            plans.append(
                TopicPlan(
                    name=topic_name(settings, d.name, tenant),
                    partitions=d.partitions or settings.partitions,
                    replication_factor=env["replication_factor"],
                    configs=configs,
                )
            )
    return plans
