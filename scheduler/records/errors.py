"""The two error types of the record codecs."""

from __future__ import annotations


class RecordDecodeError(ValueError):
    """Bytes that are not a ksched record this reader can decode.

    The only exception :func:`scheduler.records.decode` raises: too short, wrong
    single-object marker, unknown schema fingerprint, truncated or corrupt body,
    trailing bytes, or a record of another type than the one expected. The
    message says which.
    """


class RecordEncodeError(ValueError):
    """A record that does not fit its schema (wrong type, bad enum symbol, missing value).

    The message names the record type and, where fastavro's validator can tell,
    the field.
    """
