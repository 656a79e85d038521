"""The API's request and response bodies (pydantic): what ``/openapi.json`` documents.

The spec bodies are built from the one table of spec fields (``scheduler/spec_fields.py``), so a
new spec field is in the API without a line here; every request body refuses unknown fields
(``extra="forbid"``: 422 naming it). The domain (``ScheduleSpec.from_dict``) does the checking a
schema cannot (cron syntax, zones, instants, bounds) and names the field. Response bodies are the
CLI's JSON shapes (``scheduler/cli/render.py``): one shape per noun, whoever asks.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from scheduler.api.problems import ApiProblem
from scheduler.domain import ScheduleSpec, SpecError, compile_spec
from scheduler.domain.cron import FIELD_NAMES as CRON_FIELDS
from scheduler.spec_fields import SPEC_FIELDS, SpecField

_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "instant": str, "bytes": str}
_HELP = {
    "kind": "cron or once",
    "handler": "the worker handler to run",
    "payload": "the handler's payload as text (or payload_base64 for bytes)",
    "start": "ISO-8601 datetime with an offset: no fire time before it",
    "end": "ISO-8601 datetime with an offset: no fire time after it",
}
SPEC_EXAMPLE: dict[str, Any] = {
    "kind": "cron",
    "cron": "0 9 * * MON-FRI",
    "timezone": "Europe/Berlin",
    "handler": "send-report",
    "payload": '{"report": "daily"}',
}


def _annotation(f: SpecField) -> Any:
    if f.value == "choice" and f.choices is not None:
        return Literal[tuple(m.value for m in f.choices)]  # type: ignore[valid-type]
    return _TYPES[f.value]


def _spec_model(name: str, *, all_optional: bool, doc: str, example: dict[str, Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for f in SPEC_FIELDS:
        required = f.required and not all_optional
        desc = _HELP.get(f.name) or f.help
        fields[f.name] = (
            (_annotation(f), Field(..., description=desc))
            if required
            else (_annotation(f) | None, Field(None, description=desc))
        )
    fields["payload_base64"] = (str | None, Field(None, description="the payload as base64 (bytes)"))
    config = ConfigDict(extra="forbid", json_schema_extra={"examples": [example]})
    model: type[BaseModel] = create_model(name, __config__=config, __doc__=doc, **fields)
    return model


SpecIn = _spec_model(
    "ScheduleSpecIn",
    all_optional=False,
    example=SPEC_EXAMPLE,
    doc="A schedule's whole spec (create, replace); omitted fields take their defaults.",
)
SpecPatch = _spec_model(
    "ScheduleSpecPatch",
    all_optional=True,
    example={"cron": "30 9 * * MON-FRI"},
    doc="The spec fields to change (a merge patch); null clears an optional field.",
)


def domain_spec(body: BaseModel, current: ScheduleSpec | None = None) -> ScheduleSpec:
    """The domain spec of a body (patched onto ``current`` when given); 422 naming the field."""
    d = body.model_dump(exclude_unset=True)
    b64 = d.pop("payload_base64", None)
    try:
        if b64 is not None:
            if d.get("payload") is not None:
                raise SpecError("payload_base64", "...", "give payload or payload_base64, not both")
            try:
                d["payload"] = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                raise SpecError("payload_base64", b64[:40], "is not base64") from None
        spec = current.patched(**d) if current is not None else ScheduleSpec.from_dict(d)
        compile_spec(spec)  # the cron expression, the zone, the instant: as the SDK and the processor check
        return spec
    except SpecError as exc:
        raise spec_problem(exc) from None


def spec_problem(exc: SpecError) -> ApiProblem:
    """422 naming the body's field: a cron expression's own field (``minute``...) is ``cron``'s."""
    value = repr(exc.value)[:200]
    if exc.field in CRON_FIELDS:
        return ApiProblem(422, "invalid-request", f"cron: the {exc.field} field: {exc.reason}", field="cron")
    return ApiProblem(422, "invalid-request", f"{exc.field}: {exc.reason} (value {value})", field=exc.field)


def timing_problem(body: PreviewIn) -> ApiProblem | None:
    """The problem of a preview's timing, checked by the domain as a saved spec's would be."""
    d = body.model_dump(exclude={"after", "count"})
    d = {k: v for k, v in d.items() if v is not None}
    d.update(kind="cron" if body.cron is not None else "once", handler="preview")
    try:
        compile_spec(ScheduleSpec.from_dict(d))
    except SpecError as exc:
        return spec_problem(exc)
    return None


class Accepted(BaseModel):
    """A command the processor accepted (201/200), or one still being processed (202)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "schedule_id": "s-3f2a9c0d1e",
                    "version": 1,
                    "request_id": "9b0c5e1f2a3b4c5d",
                    "status": "ACCEPTED",
                    "status_url": "/v1/schedules/s-3f2a9c0d1e",
                }
            ]
        }
    )

    schedule_id: str
    version: int | None = Field(None, description="the version it made or kept; null while PENDING")
    request_id: str
    status: Literal["ACCEPTED", "PENDING"]
    status_url: str = Field(description="GET it for the schedule as the history store knows it")


class OccurrenceOut(BaseModel):
    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for: str | None
    available_at: str | None
    enqueued_at: str | None
    lag_s: float | None
    state: str
    state_at: str | None
    attempt_count: int
    reason: str | None


class Canceled(Accepted):
    """A cancel: plus the occurrences that were enqueued or running when it was applied, as far as
    the history store knew, and so may still run (a worker finishing one is not stopped)."""

    may_still_run: list[OccurrenceOut]


class ScheduleOut(BaseModel):
    schedule_id: str
    tenant: str
    version: int
    state: str
    cron: str | None
    at: str | None
    timezone: str
    handler: str
    spec: dict[str, Any]


class NextFireOut(BaseModel):
    scheduled_for: str | None
    available_at: str | None


class ScheduleDetail(ScheduleOut):
    versions: list[dict[str, Any]]
    changes: list[dict[str, Any]]
    next_fires: list[NextFireOut]
    last_occurrences: list[OccurrenceOut]


class SchedulePage(BaseModel):
    items: list[ScheduleOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last")


class AttemptOut(BaseModel):
    attempt: int
    token: str
    worker_id: str
    started_at: str | None
    last_heartbeat_at: str | None
    finished_at: str | None
    result: str | None
    retryable: bool | None
    error_class: str | None
    error_message: str | None


class OccurrenceDetailOut(OccurrenceOut):
    attempts: list[AttemptOut]


class OccurrencePage(BaseModel):
    items: list[OccurrenceOut]
    next_cursor: str | None


class PreviewIn(BaseModel):
    """An unsaved spec's timing: ``cron`` or ``at`` (exactly one) in ``timezone``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"cron": "0 9 * * MON-FRI", "timezone": "America/New_York", "count": 3}]
        },
    )

    cron: str | None = Field(None, description="5-field cron expression or @macro")
    at: str | None = Field(None, description="one-time local ISO datetime, e.g. 2026-11-01T01:30")
    timezone: str = Field(description="IANA zone, e.g. Europe/Berlin")
    after: str | None = Field(None, description="fire times strictly after this ISO instant (default: now)")
    count: int = Field(10, description="how many, 1 to 1000")
    nonexistent: Literal["skip", "shift"] = "skip"
    repeated: Literal["once", "all"] = "once"
    window_minutes: int = Field(0, description="flexible window: also answer the jittered available_at")


class PreviewFire(BaseModel):
    n: int
    scheduled_for: str
    local: str
    available_at: str | None = None


class Preview(BaseModel):
    items: list[PreviewFire]


class DlqEntryOut(BaseModel):
    occurrence_id: str
    schedule_id: str
    version: int
    scheduled_for: str | None
    handler: str
    attempts: int
    last_error_class: str | None
    last_error_message: str | None
    dead_at: str | None
    reason: str


class DlqPage(BaseModel):
    items: list[DlqEntryOut]
    next_cursor: str | None = Field(None, description="pass as cursor for the next page; null on the last")


class Replayed(BaseModel):
    occurrence_id: str
    schedule_id: str
    attempt: int


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict)
