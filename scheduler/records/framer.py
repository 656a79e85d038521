"""The header a writer puts before each record body: single-object (the default) or the Confluent
wire format with the id the schema registry gave the record's schema under the topic's subject.

Subjects follow Confluent's default ``TopicNameStrategy``, ``<topic>-value``, which is what
``AvroDeserializer``, Kafka Connect and ksqlDB look up. A subject is registered (or looked up: a
registration of a schema already there returns its id) the first time a writer frames a record
type for a topic; the writer checks compatibility with the subject's latest version first, so a
refusal names the subject rather than a bare HTTP 409. Then encoding is one fastavro encode after
a 5-byte prefix taken from a dict (:meth:`Codecs.encode` ``header``), and the processor's
dispatch records begin with it (:func:`scheduler.records.dispatch.dispatch_record`).
"""

from __future__ import annotations

from scheduler.records import schema_ids
from scheduler.records.codec import current_schema, encode, schema_header
from scheduler.records.framing import confluent_header
from scheduler.records.registry import RegistryClient, RegistryError, subject_for
from scheduler.records.types import Record


class Framer:
    """``registry`` None: single-object framing; else the Confluent wire format against it."""

    def __init__(self, registry: RegistryClient | None = None) -> None:
        self.registry = registry
        self._headers: dict[tuple[type[Record], str], bytes] = {}
        if registry is not None:
            schema_ids.use_registry(registry.url)  # this process reads what it writes

    @property
    def confluent(self) -> bool:
        return self.registry is not None

    def header(self, cls: type[Record], topic: str) -> bytes:
        """The header of ``cls`` records on ``topic`` (registering the subject on first use)."""
        h = self._headers.get((cls, topic))
        if h is None:
            h = self._headers[(cls, topic)] = (
                schema_header(cls) if self.registry is None else confluent_header(self.register(cls, topic))
            )
        return h

    def encode(self, record: Record, topic: str) -> bytes:
        return encode(record, self.header(type(record), topic))

    def register(self, cls: type[Record], topic: str) -> int:
        """The registry's id of ``cls``'s current schema under ``<topic>-value``, after checking that
        it is compatible with the latest version there. :class:`RegistryError` names the fix."""
        assert self.registry is not None
        subject, schema = subject_for(topic), current_schema(cls)
        if not self.registry.is_compatible(subject, schema):
            raise RegistryError(
                f"schema {schema.name} is not compatible with the latest version under subject {subject} "
                f"in the registry at {self.registry.url} (its compatibility level): release a compatible "
                "schema (docs/contract.md, compatibility) or delete the subject's incompatible versions"
            )
        try:
            return self.registry.register(subject, schema)
        except RegistryError as exc:
            why = f"registering {schema.name} under subject {subject}: {exc}"
            raise RegistryError(why, exc.status) from None
