"""Which schema a Confluent-framed record's id names: asked of the schema registry once per id.

Every reader of ksched records (processor inbox, worker, SDK, history indexer, reconciler, DLQ,
status) decodes through :mod:`scheduler.records.codec`, which sends a value starting with byte
``00`` here. The registry is the one :func:`use_registry` set (a processor in Confluent framing
sets its own), else the ``schema_registry_url`` setting (``KSCHED_SCHEMA_REGISTRY_URL``) of the
settings the process loaded (``load_settings`` tells this module): a reader needs no flag of its
own to follow a namespace that switches framing.

Registry ids never change meaning, so an answer is kept for the process's life. A refusal (an
unknown id: hostile or foreign input) or an unreachable registry is kept for a few seconds, so
a topic full of such records costs one request per id per interval, not one per record.
"""

from __future__ import annotations

import json
import threading
import time

from scheduler.records.errors import RecordDecodeError
from scheduler.records.registry import RegistryClient, RegistryError
from scheduler.records.schemas import load_expanded

FAILURE_TTL_S = 5.0
_MAX_FAILURES = 1024

_lock = threading.Lock()
_url: str | None = None  # None: no settings loaded and no registry chosen
_explicit = False  # use_registry chose _url: settings loaded later do not change it
_known: dict[int, bytes] = {}  # schema id -> CRC-64-AVRO fingerprint of its canonical form
_failed: dict[int, tuple[float, str]] = {}  # schema id -> (until, message)


def use_registry(url: str | None) -> None:
    """Resolve ids with the registry at ``url`` (Confluent-compatible base; "" means none) from now
    on, whatever settings load later; None gives the choice back to the settings."""
    global _explicit
    with _lock:
        _explicit = url is not None
        _set(url)


def settings_loaded(url: str) -> None:
    """The ``schema_registry_url`` of settings just loaded: used unless :func:`use_registry` chose."""
    with _lock:
        if not _explicit:
            _set(url)


def _set(url: str | None) -> None:
    global _url
    if url != _url:
        _url = url
        _known.clear()
        _failed.clear()


def fingerprint(schema_id: int) -> bytes:
    """The fingerprint of the schema registered as ``schema_id``; :class:`RecordDecodeError` if
    there is no registry, it does not know the id, or it cannot be reached."""
    fp = _known.get(schema_id)
    if fp is not None:
        return fp
    failed = _failed.get(schema_id)
    if failed is not None and failed[0] > time.monotonic():
        raise RecordDecodeError(failed[1])
    try:
        url = _registry_url()
        if not url:
            raise RecordDecodeError(
                f"Confluent-framed record (schema id {schema_id}) but no schema registry is configured: "
                "set schema_registry_url (KSCHED_SCHEMA_REGISTRY_URL) to the registry the writer used"
            )
        fp = _fetch(url, schema_id)
    except RecordDecodeError as exc:
        with _lock:
            if len(_failed) >= _MAX_FAILURES:
                _failed.clear()
            _failed[schema_id] = (time.monotonic() + FAILURE_TTL_S, str(exc))
        raise
    with _lock:
        _known[schema_id] = fp
    return fp


def _fetch(url: str, schema_id: int) -> bytes:
    try:
        text = RegistryClient(url=url, timeout_s=5.0).schema_text(schema_id)
    except RegistryError as exc:
        if exc.status == 404:
            why = f"schema id {schema_id} is unknown to the schema registry at {url}"
            raise RecordDecodeError(why) from None
        raise RecordDecodeError(f"schema id {schema_id}: {exc}") from None
    try:
        return load_expanded(json.loads(text), None).fingerprint
    except Exception as exc:  # the registry holds something that is not an Avro record schema
        raise RecordDecodeError(
            f"schema id {schema_id} in the registry at {url} is not a usable Avro schema: {exc}"
        ) from None


def _registry_url() -> str:
    return _url or ""
