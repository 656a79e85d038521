"""The Confluent wire format, the registry-framed alternative to single-object encoding (issue 17).

Registry-aware tools (Kafka Connect, ksqlDB, ``kcat -s avro``, confluent-kafka's
``AvroDeserializer``) expect::

    00 | schema id (4 bytes, big-endian) | Avro binary body

where the id is the writer schema's id in a Confluent-compatible schema registry. The body is the
same as in single-object encoding (:mod:`scheduler.records.codec`): only the header differs, so
reframing a record costs no re-encode.
"""

from __future__ import annotations

import struct

from scheduler.records.errors import RecordDecodeError
from scheduler.records.schemas import MAGIC

CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_LEN = 5
SINGLE_OBJECT_HEADER_LEN = 10
_ID = struct.Struct(">I")
MAX_SCHEMA_ID = 2**31 - 1  # a Java int in Confluent's clients


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes that precede the body of a record written with registry schema ``schema_id``."""
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id!r}: must be an int in 0..{MAX_SCHEMA_ID} (the registry's id)")
    return CONFLUENT_MAGIC + _ID.pack(schema_id)


def split_confluent(value: bytes) -> tuple[int, bytes]:
    """``(schema id, body)`` of a Confluent-framed value; :class:`RecordDecodeError` says why not."""
    if len(value) < CONFLUENT_HEADER_LEN:
        raise RecordDecodeError(f"value of {len(value)} bytes: shorter than the 5-byte Confluent header")
    if value[:1] != CONFLUENT_MAGIC:
        raise RecordDecodeError(
            f"value starts with {bytes(value[:2]).hex()}: not the Confluent wire format (magic byte 00)"
        )
    return _ID.unpack_from(value, 1)[0], bytes(value[CONFLUENT_HEADER_LEN:])


def single_object_to_confluent(value: bytes, schema_id: int) -> bytes:
    """A single-object-encoded value reframed for the registry: same body, the 5-byte header."""
    if value[:2] != MAGIC or len(value) < SINGLE_OBJECT_HEADER_LEN:
        raise RecordDecodeError(
            f"value starts with {bytes(value[:2]).hex()}: not single-object encoding (c301)"
        )
    return confluent_header(schema_id) + value[SINGLE_OBJECT_HEADER_LEN:]
