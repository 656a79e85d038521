from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.settings import Settings
from scheduler.tenants import Tenant, TenantError, add_tenant, load_tenants
from scheduler.topology import desired_topics

DESIGN_TOPICS = {"tenants", "shards", "schedules", "schedule-history", "state", "quota-demand"}
TENANT_TOPICS = {"commands", "results", "schedules", "versions", "dispatch", "dlq", "occurrence-events"}


def test_every_design_topic_is_declared_per_environment() -> None:
    local = desired_topics(Settings(namespace="ks", partitions=6), ["a", "b"])
    names = {p.name for p in local}
    assert names == {f"ks.{t}" for t in DESIGN_TOPICS} | {
        f"ks.{t}.{x}" for t in TENANT_TOPICS for x in ("a", "b")
    }
    assert {p.partitions for p in local if p.name not in ("ks.tenants", "ks.quota-demand")} == {6}
    demand = next(p for p in local if p.name == "ks.quota-demand")  # keyed by shard: one partition
    assert demand.partitions == 1 and demand.configs["cleanup.policy"] == "compact"
    tenants = next(p for p in local if p.name == "ks.tenants")  # keyed by tenant name, not schedule
    assert tenants.partitions == 1 and tenants.configs["cleanup.policy"] == "compact"
    assert int(tenants.configs["delete.retention.ms"]) > 10 * 365 * 86_400_000  # tombstones stay
    assert {p.replication_factor for p in local} == {1}
    prod = desired_topics(Settings(namespace="ks", environment="production"), ["a"])
    assert {p.replication_factor for p in prod} == {3}
    assert {p.configs["min.insync.replicas"] for p in prod} == {"2"}
    by_name = {p.name: p for p in prod}
    assert by_name["ks.dispatch.a"].configs["message.timestamp.type"] == "LogAppendTime"
    for compacted in ("ks.schedules", "ks.state", "ks.versions.a"):
        assert by_name[compacted].configs["cleanup.policy"] == "compact"


def test_tenant_registry_round_trips_and_validates(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    assert add_tenant(path, Tenant(name="acme", max_running=3)) is True
    assert add_tenant(path, Tenant(name="acme", max_running=4)) is False
    assert load_tenants(path)["acme"].max_running == 4
    with pytest.raises(TenantError, match="tenant name 'Acme!' is invalid"):
        add_tenant(path, Tenant(name="Acme!"))
    path.write_text("[tenants.acme]\nmax_runing = 3\n")
    with pytest.raises(TenantError, match="unknown quota 'max_runing'"):
        load_tenants(path)
