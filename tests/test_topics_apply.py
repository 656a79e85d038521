"""``ksched topics apply`` and ``ksched tenants add`` against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from scheduler.cli import main
from scheduler.kafka.admin import admin_client, apply_topics
from scheduler.kafka.connection import KafkaConnection
from scheduler.settings import Settings
from scheduler.tenant_registry import read_registry
from scheduler.topology import desired_topics, topic_name

pytestmark = pytest.mark.kafka


def _configs(bootstrap: KafkaConnection, topic: str) -> dict[str, str]:
    admin = admin_client(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = next(iter(admin.describe_configs([res]).values())).result(timeout=30)
    return {k: e.value for k, e in entries.items()}


def test_apply_creates_everything_then_reports_no_change(
    kafka_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tenants", "add", "acme", "--trigger-rate-per-s", "500"]) == 0
    assert read_registry(kafka_settings).target["acme"].trigger_rate_per_s == 500
    capsys.readouterr()
    assert main(["topics", "apply"]) == 0
    assert capsys.readouterr().out.strip() == "topics: up to date, no change"

    bootstrap = kafka_settings.kafka()
    existing = admin_client(bootstrap).list_topics(timeout=10).topics
    for plan in desired_topics(kafka_settings, ["acme"]):
        assert plan.name in existing
        assert len(existing[plan.name].partitions) == plan.partitions
    dispatch = _configs(bootstrap, topic_name(kafka_settings, "dispatch", "acme"))
    assert dispatch["message.timestamp.type"] == "LogAppendTime"
    assert _configs(bootstrap, topic_name(kafka_settings, "schedules"))["cleanup.policy"] == "compact"
    assert _configs(bootstrap, topic_name(kafka_settings, "versions", "acme"))["cleanup.policy"] == "compact"


def test_apply_fixes_config_drift_and_reports_partition_drift(kafka_settings: Settings) -> None:
    bootstrap = kafka_settings.kafka()
    admin = admin_client(bootstrap)
    plans = desired_topics(kafka_settings, ["drifty"])
    apply_topics(admin, plans)
    victim = topic_name(kafka_settings, "results", "drifty")
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    futs = admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.TOPIC,
                victim,
                incremental_configs=[
                    ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET)
                ],
            )
        ]
    )
    for f in futs.values():
        f.result(timeout=30)
    deadline = time.monotonic() + 30  # an altered config reaches describe_configs a moment later
    while _configs(bootstrap, victim)["retention.ms"] != "1234" and time.monotonic() < deadline:
        time.sleep(0.2)
    dry = apply_topics(admin, plans, dry_run=True)
    assert [(c.topic, c.action, c.applied) for c in dry] == [(victim, "alter", False)]
    assert "retention.ms: 1234 -> 86400000" in dry[0].detail
    fixed = apply_topics(admin, plans)
    assert [(c.topic, c.action, c.applied) for c in fixed] == [(victim, "alter", True)]
    assert apply_topics(admin, plans) == []

    wider = [
        p
        if p.name != victim
        else type(p)(
            name=p.name,
            partitions=p.partitions + 2,
            replication_factor=p.replication_factor,
            configs=p.configs,
        )
        for p in plans
    ]
    drift = apply_topics(admin, wider)
    assert [(c.topic, c.action, c.applied) for c in drift] == [(victim, "drift", False)]
    assert "partitions" in drift[0].detail
