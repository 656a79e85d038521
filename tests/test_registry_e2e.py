"""Issue 17, item 3: a namespace in Confluent framing, end to end against the real broker and a real
Apicurio Registry. The lifecycle scenarios of test_attempts_e2e run again here (imported, so
collected with this module's ``stack``): create -> fire -> worker -> SUCCEEDED (after retries, DEAD,
the DLQ and a replay), update and cancel. Then confluent-kafka's AvroDeserializer reads a dispatch
record the processor wrote, and the start-up refusals name their fix."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from namespaces import own_namespace
from registry_fixture import schema_registry
from test_attempts_e2e import (
    TENANT,
    Running,
    once_in,
    test_cancel_or_update_while_enqueued_is_not_executed,
    test_retries_then_dead_then_replay_runs_it_again_with_the_same_id,
)

from scheduler.cli import main
from scheduler.client import SchedulerClient
from scheduler.kafka.clients import consumer
from scheduler.principals import as_admin
from scheduler.processor.checkpoint import Topics
from scheduler.processor.runtime import Processor
from scheduler.records import Occurrence, current_schema, decode
from scheduler.records.registry import RegistryClient, RegistryError, subject_for
from scheduler.records.schemas import load_expanded
from scheduler.settings import Settings
from scheduler.tenants import Tenant, add_tenant
from scheduler.topology import topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.slow]  # Apicurio: Java 21, ~20 s to start
__all__ = [  # collected here again, with this module's confluent-framed stack
    "schema_registry",
    "test_cancel_or_update_while_enqueued_is_not_executed",
    "test_retries_then_dead_then_replay_runs_it_again_with_the_same_id",
]


@pytest.fixture(scope="module")
def stack(
    kafka_settings: Settings, schema_registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    tenants_file = tmp_path_factory.mktemp("reg") / "tenants.toml"
    with own_namespace(kafka_settings, "reg", tenants_file, lease_s=3, tick_interval_ms=50,
                       record_framing="confluent", schema_registry_url=schema_registry) as settings:
        add_tenant(tenants_file, Tenant(name=TENANT, retry_budget_per_min=0))
        assert main(["topics", "apply"]) == 0
        proc = Running(Processor(settings))
        try:
            with SchedulerClient(settings, timeout_s=60) as client:  # answered: the processor owns its shards
                client.create(TENANT, once_in(86_400), key="warm-up")
            yield settings
        finally:
            proc.stop()


def _raw(settings: Settings, topic: str, until: float = 2.0) -> list[bytes]:
    c = consumer(as_admin(settings))
    c.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    out: list[bytes] = []
    end = time.monotonic() + until
    try:
        while time.monotonic() < end:
            out += [m.value() or b"" for m in c.consume(500, 0.2) if m.error() is None and m.value()]
    finally:
        c.close()
    return out


def test_avro_deserializer_reads_the_dispatch_records_the_processor_framed(
    stack: Settings, schema_registry: str
) -> None:
    with SchedulerClient(stack, timeout_s=60) as client:
        sid = client.create(TENANT, once_in(2, payload=b"\x00reg"), key="deser").schedule_id
    topic = topic_name(stack, "dispatch", TENANT)
    deadline, values = time.monotonic() + 30, []
    while time.monotonic() < deadline and not values:
        values = [v for v in _raw(stack, topic, 1.0) if decode(v, Occurrence).schedule_id == sid]
    (value,) = values
    subject_id = RegistryClient(url=schema_registry).register(subject_for(topic), current_schema(Occurrence))
    assert value[:5] == b"\x00" + subject_id.to_bytes(4, "big")  # the subject's id, registered at start
    got = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))(
        value, SerializationContext(topic, MessageField.VALUE))
    ours = decode(value, Occurrence)
    assert got["occurrence_id"] == ours.occurrence_id and got["payload"] == b"\x00reg"
    assert (got["schedule_id"], got["tenant"], got["lane"]) == (sid, TENANT, ours.lane)
    for name in ("results", "occurrence-events"):  # the other framed streams too
        assert {v[0] for v in _raw(stack, topic_name(stack, name, TENANT), 1.0)} == {0}, name


def test_an_incompatible_subject_stops_the_start_with_its_name(stack: Settings, schema_registry: str) -> None:
    tenant = f"other{time.time_ns() % 10**6}"
    client = RegistryClient(url=schema_registry)
    subject = subject_for(topic_name(stack, "dispatch", tenant))
    older = copy.deepcopy(current_schema(Occurrence).expanded)
    older["fields"] = [f for f in older["fields"] if f["name"] != "payload"]
    older["fields"].append({"name": "legacy", "type": "string"})  # no default: the current one cannot read it
    client.register(subject, load_expanded(older, None))
    client.set_compatibility(subject, "BACKWARD")
    with pytest.raises(RegistryError, match=f"not compatible with the latest version under subject {subject}"
                       ):
        Topics(stack).frame_tenants([tenant])
