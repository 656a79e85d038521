"""A client of the Confluent-compatible schema registry API (issue 17, item 3): register a record
schema under a subject, set and check compatibility, read a schema by id.

Plain HTTP with the standard library (the processor would call it only at start). Tested against
Apicurio Registry's ``/apis/ccompat/v7`` (``tests/registry_fixture.py``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from scheduler.records.schemas import LoadedSchema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
COMPATIBILITY_LEVELS = frozenset({
    "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE",
})


class RegistryError(RuntimeError):
    """The registry refused a request or cannot be reached; the message names the subject and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, None when the registry was not reached


@dataclass(frozen=True, kw_only=True)
class RegistryClient:
    """``url`` is the Confluent-compatible base (Apicurio: ``http://host:port/apis/ccompat/v7``)."""

    url: str
    timeout_s: float = 10.0

    def register(self, subject: str, schema: LoadedSchema) -> int:
        """The id of ``schema`` under ``subject``: registered now, or the existing one (idempotent)."""
        got = self._call("POST", f"/subjects/{subject}/versions", {"schema": _schema_text(schema)}, subject)
        return int(got["id"])

    def set_compatibility(self, subject: str, level: str) -> None:
        if level not in COMPATIBILITY_LEVELS:
            raise ValueError(f"compatibility {level!r}: one of {', '.join(sorted(COMPATIBILITY_LEVELS))}")
        self._call("PUT", f"/config/{subject}", {"compatibility": level}, subject)

    def is_compatible(self, subject: str, schema: LoadedSchema) -> bool:
        """Whether ``schema`` may be registered next under ``subject`` (True if it has no version yet)."""
        try:
            got = self._call("POST", f"/compatibility/subjects/{subject}/versions/latest",
                             {"schema": _schema_text(schema)}, subject)
        except RegistryError as exc:
            if exc.status == 404:
                return True  # no version yet: anything is compatible
            raise
        return bool(got.get("is_compatible"))

    def schema_text(self, schema_id: int) -> str:
        return str(self._call("GET", f"/schemas/ids/{schema_id}", None, f"id {schema_id}")["schema"])

    def _call(self, method: str, path: str, body: dict[str, Any] | None, what: str) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return dict(json.loads(resp.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise RegistryError(f"schema registry {method} {path} ({what}): HTTP {exc.code}: {detail}",
                                exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise RegistryError(f"schema registry at {self.url} unreachable ({exc}); check the registry URL "
                                "setting and that the registry runs") from None


def _schema_text(schema: LoadedSchema) -> str:
    """The self-contained schema, docs and defaults kept (the registry stores what it is given)."""
    return json.dumps(schema.expanded, separators=(",", ":"))


def subject_for(topic: str) -> str:
    """Confluent's default ``TopicNameStrategy``: the value schema of ``topic``."""
    return f"{topic}-value"
