"""Issue 17, item 3 (first part): the Confluent wire format and the Confluent-compatible registry
API against a real Apicurio Registry; a consumer in another stack (confluent-kafka's
``AvroDeserializer``) decodes a ksched dispatch record framed for the registry with nothing but
the registry; every reader decodes both framings, and hostile frames are decode errors. The
processor in Confluent framing end to end: test_registry_e2e.py."""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given
from hypothesis import strategies as st
from registry_fixture import schema_registry

from scheduler.history.readers import dispatch_fields
from scheduler.processor.checkpoint import Topics
from scheduler.records import (
    CommandResult,
    Occurrence,
    current_schema,
    decode,
    decode_fields,
    encode,
    record_type,
    schema_ids,
)
from scheduler.records.dispatch import avro_long, dispatch_head, dispatch_record, dispatch_run, lane_index
from scheduler.records.errors import RecordDecodeError
from scheduler.records.framer import Framer
from scheduler.records.framing import (
    MAX_SCHEMA_ID,
    confluent_header,
    single_object_to_confluent,
    split_confluent,
)
from scheduler.records.registry import RegistryClient, RegistryError, subject_for
from scheduler.records.schemas import LoadedSchema, expand, history_names, load_definitions, load_expanded
from scheduler.settings import SettingsError, load_settings

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
    value = dispatch_record(current_schema(Occurrence).header, dispatch_head("o-1", "s-1"), b"s-1",
                            dispatch_run("acme", 3, 1_798_761_600_000, 1_798_761_600_250),
                            avro_long(1_798_761_600_300), 2, lane_index("FLEXIBLE"), "greet", b"\x00hi\xff",
                            None)
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


@pytest.fixture
def registry_at() -> Iterator[Callable[[str], None]]:
    """Point the codec's id lookup somewhere for one test, then back to the setting."""
    yield schema_ids.use_registry
    schema_ids.use_registry(None)


def _occurrence() -> Occurrence:
    value = dispatch_record(current_schema(Occurrence).header, dispatch_head("o-2", "s-2"), b"s-2",
                            dispatch_run("acme", 1, 1_798_761_600_000, 1_798_761_600_000),
                            avro_long(1_798_761_600_100), 1, lane_index("STRICT"), "h", b"p", None)
    return decode(value, Occurrence)


def test_every_reader_takes_both_framings_once_an_id_is_known(registry_at: Callable[[str], None]) -> None:
    registry_at("http://127.0.0.1:9/unused")
    schema_ids._known[7] = current_schema(Occurrence).fingerprint  # as a registry answer would be cached
    occ = _occurrence()
    framed = encode(occ, confluent_header(7))
    assert framed == single_object_to_confluent(encode(occ), 7)  # one encode, a 5-byte header
    assert decode(framed, Occurrence) == occ == decode(encode(occ), Occurrence)
    assert record_type(framed) is Occurrence and decode_fields(framed, Occurrence)["tenant"] == "acme"
    assert dispatch_fields(framed)[:3] == ("o-2", "s-2", "acme")  # the lean readers fall back to the codec
    with pytest.raises(RecordDecodeError, match="wrong record type: got Occurrence, expected CommandResult"):
        decode(framed, CommandResult)


@given(st.binary(max_size=40))
def test_hostile_confluent_frames_are_decode_errors(tail: bytes) -> None:
    schema_ids.use_registry("http://127.0.0.1:9/unused")
    schema_ids._known[7] = current_schema(Occurrence).fingerprint
    try:
        with pytest.raises(RecordDecodeError):
            decode(b"\x00\x00\x00\x00\x07" + tail, Occurrence)
        with pytest.raises(RecordDecodeError, match=r"too short: .* Confluent-framed"):
            decode(b"\x00" + tail[:3])
    finally:
        schema_ids.use_registry(None)


def test_an_unknown_id_without_a_reachable_registry_says_what_to_set(
    registry_at: Callable[[str], None],
) -> None:
    registry_at("")
    with pytest.raises(RecordDecodeError, match="no schema registry is configured: set schema_registry_url"):
        decode(b"\x00\x00\x00\x00\x09\x02")
    registry_at("http://127.0.0.1:9/apis/ccompat/v7")
    with pytest.raises(RecordDecodeError, match=r"schema id 9: schema registry at .* unreachable"):
        decode(b"\x00\x00\x00\x00\x09\x02")
    started = time.monotonic()
    with pytest.raises(RecordDecodeError, match="unreachable"):  # remembered: no request per record
        decode(b"\x00\x00\x00\x00\x09\x04")
    assert time.monotonic() - started < 0.05


def test_confluent_framing_needs_a_registry_url_and_an_unreachable_one_stops_the_start(
    registry_at: Callable[[str], None],
) -> None:
    with pytest.raises(SettingsError, match="schema_registry_url is empty: set KSCHED_SCHEMA_REGISTRY_URL"):
        load_settings(env={"KSCHED_RECORD_FRAMING": "confluent"})
    with pytest.raises(SettingsError, match="record_framing: 'avro' is not one of single-object, confluent"):
        load_settings(env={"KSCHED_RECORD_FRAMING": "avro"})
    settings = load_settings(env={"KSCHED_RECORD_FRAMING": "confluent",
                                  "KSCHED_SCHEMA_REGISTRY_URL": "http://127.0.0.1:9/apis/ccompat/v7"})
    with pytest.raises(RegistryError, match=r"unreachable.*check the registry URL"):
        Topics(settings).frame_tenants(["acme"])
    assert Framer().encode(_occurrence(), "any") == encode(_occurrence())  # single-object: as before
