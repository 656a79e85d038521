"""Issue 17, item 3 (first part): the Confluent wire format and the Confluent-compatible registry
API against a real Apicurio Registry; a consumer in another stack (confluent-kafka's
``AvroDeserializer``) decodes a ksched dispatch record framed for the registry with nothing but
the registry. The processor's framing setting is not built yet (docs/decisions.md)."""

from __future__ import annotations

import copy
import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st
from registry_fixture import schema_registry

from scheduler.records import Occurrence, decode
from scheduler.records.dispatch import dispatch_head, dispatch_tail, dispatch_value
from scheduler.records.errors import RecordDecodeError
from scheduler.records.framing import (
    MAX_SCHEMA_ID,
    confluent_header,
    single_object_to_confluent,
    split_confluent,
)
from scheduler.records.registry import RegistryClient, subject_for
from scheduler.records.schemas import LoadedSchema, expand, history_names, load_definitions, load_expanded

__all__ = ["schema_registry"]  # a fixture, used by name


# The registry tests fetch (~160 MB, once) and start Apicurio Registry: CI runs them in make test-slow.
registry = pytest.mark.slow


def _current(name: str) -> LoadedSchema:
    defs, _ = load_definitions()
    return load_expanded(expand(defs[f"ksched.v1.{name}"], defs), None)


@given(st.integers(0, MAX_SCHEMA_ID), st.binary(max_size=64))
def test_the_confluent_header_is_magic_zero_and_a_big_endian_id(schema_id: int, body: bytes) -> None:
    framed = confluent_header(schema_id) + body
    assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == schema_id  # the oracle: the spec
    assert split_confluent(framed) == (schema_id, body)


def test_malformed_frames_name_the_problem() -> None:
    with pytest.raises(RecordDecodeError, match="shorter than the 5-byte Confluent header"):
        split_confluent(b"\x00\x01")
    with pytest.raises(RecordDecodeError, match="c301: not the Confluent wire format"):
        split_confluent(b"\xc3\x01" + b"\x00" * 10)
    with pytest.raises(RecordDecodeError, match="not single-object encoding"):
        single_object_to_confluent(b"\x00\x00\x00\x00\x01abc", 1)
    for bad in (-1, MAX_SCHEMA_ID + 1, True):
        with pytest.raises(ValueError, match=r"must be an int in 0\.\."):
            confluent_header(bad)


@registry
def test_every_record_schema_registers_once_and_reads_back_unchanged(schema_registry: str) -> None:
    client = RegistryClient(url=schema_registry)
    prefix = f"t{uuid.uuid4().hex[:8]}"
    ids = {}
    for name in sorted(history_names()):
        schema = _current(name)
        ids[name] = client.register(subject_for(f"{prefix}.{name}"), schema)
        assert client.register(subject_for(f"{prefix}.{name}"), schema) == ids[name]  # idempotent
        stored = load_expanded(json.loads(client.schema_text(ids[name])), None)
        assert stored.fingerprint == schema.fingerprint, name
    assert len(set(ids.values())) == len(ids)


@registry
def test_backward_compatibility_is_enforced_by_the_registry(schema_registry: str) -> None:
    client = RegistryClient(url=schema_registry)
    subject = subject_for(f"t{uuid.uuid4().hex[:8]}.dispatch")
    current = _current("Occurrence")
    assert client.is_compatible(subject, current)  # no version yet
    client.register(subject, current)
    client.set_compatibility(subject, "BACKWARD")
    widened = copy.deepcopy(current.expanded)
    widened["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    assert client.is_compatible(subject, load_expanded(widened, None))  # a new field with a default
    broken = copy.deepcopy(current.expanded)
    broken["fields"].append({"name": "note", "type": "string"})  # no default: old data unreadable
    assert not client.is_compatible(subject, load_expanded(broken, None))
    with pytest.raises(ValueError, match="compatibility 'SIDEWAYS': one of"):
        client.set_compatibility(subject, "SIDEWAYS")


@registry
def test_confluents_avro_deserializer_reads_a_ksched_dispatch_record(schema_registry: str) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}.dispatch.acme"
    schema_id = RegistryClient(url=schema_registry).register(subject_for(topic), _current("Occurrence"))
    head = dispatch_head("o-1", "s-1", "acme", 3, 1_798_761_600_000, 1_798_761_600_250)
    tail = dispatch_tail(2, "FLEXIBLE", "greet", b"\x00hi\xff", None)
    value = dispatch_value(head, 1_798_761_600_300, tail)
    framed = single_object_to_confluent(value, schema_id)
    assert len(framed) == len(value) - 5  # a 5-byte header instead of 10

    deserialize = AvroDeserializer(SchemaRegistryClient({"url": schema_registry}))
    got = deserialize(framed, SerializationContext(topic, MessageField.VALUE))
    ours = decode(value, Occurrence)
    assert got == {
        "occurrence_id": "o-1", "schedule_id": "s-1", "tenant": "acme", "version": 3,
        "scheduled_for_ms": 1_798_761_600_000, "available_at_ms": 1_798_761_600_250,
        "enqueued_at_ms": 1_798_761_600_300, "attempt": 2, "lane": "FLEXIBLE", "handler": "greet",
        "payload": b"\x00hi\xff", "deadline_ms": None,
    }
    assert (ours.occurrence_id, ours.lane, ours.payload) == (got["occurrence_id"], "FLEXIBLE", b"\x00hi\xff")
