"""The query answers as JSON (for scripts) and rich tables (for humans); instants as ISO-8601 UTC.

JSON shapes (docs/history.md, "Queries"): a schedule is ``schedule_json`` (the shape of
``ksched schedule get`` since issue 9); an occurrence has ``lag_s`` = (enqueued_at -
scheduled_for) in seconds; ``*_at`` / ``scheduled_for`` / ``effective_*`` are ISO strings or null.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from typing import Any

from scheduler.history.views import (
    AttemptView,
    DeadLetterView,
    OccurrenceDetail,
    OccurrenceView,
    ScheduleDescription,
    VersionView,
)
from scheduler.records import Schedule, ScheduleSpecRecord


def iso(ms: int | None) -> str | None:
    """``ms`` (epoch ms) as ISO-8601 UTC with a Z; milliseconds only when there are some."""
    if ms is None:
        return None
    # gmtime and one format: a describe writes a dozen of these, and datetime's fromtimestamp
    # and strftime cost twice as much (docs/api.md, the describe's profile).
    s, frac = divmod(ms, 1000)
    t = time.gmtime(s)
    return _ISO % (t[0], t[1], t[2], t[3], t[4], t[5], f".{frac:03d}Z" if frac else "Z")


_ISO = "%04d-%02d-%02dT%02d:%02d:%02d%s"


def spec_json(spec: ScheduleSpecRecord) -> dict[str, Any]:
    """Every spec field; the payload as text, or ``payload_base64`` when it is not UTF-8."""
    # The spec record is flat: its fields as they are (dataclasses.asdict deep-copies each value,
    # ~8 % of a describe's CPU in the API).
    out = {k: getattr(spec, k) for k in _SPEC_FIELDS}
    try:
        out["payload"] = spec.payload.decode()
    except UnicodeDecodeError:
        out["payload_base64"] = base64.b64encode(spec.payload).decode()
    return out


_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(ScheduleSpecRecord) if f.name != "payload")


def schedule_json(s: Schedule) -> dict[str, Any]:
    return {
        "schedule_id": s.schedule_id,
        "tenant": s.tenant,
        "version": s.version,
        "state": s.state,
        "cron": s.spec.cron,
        "at": s.spec.at,
        "timezone": s.spec.timezone,
        "handler": s.spec.handler,
        "spec": spec_json(s.spec),
    }


def version_json(v: VersionView) -> dict[str, Any]:
    return {
        "version": v.version, "command": v.command, "state": v.state, "request_id": v.request_id,
        "applied_at": iso(v.applied_at_ms), "effective_from": iso(v.effective_from_ms),
        "effective_until": iso(v.effective_until_ms), "spec": None if v.spec is None else spec_json(v.spec),
    }


def occurrence_json(o: OccurrenceView) -> dict[str, Any]:
    return {
        "occurrence_id": o.occurrence_id, "schedule_id": o.schedule_id, "version": o.version,
        "scheduled_for": iso(o.scheduled_for_ms), "available_at": iso(o.available_at_ms),
        "enqueued_at": iso(o.enqueued_at_ms), "lag_s": None if o.lag_ms is None else o.lag_ms / 1000,
        "state": o.state, "state_at": iso(o.state_at_ms), "attempt_count": o.attempt_count,
        "reason": o.reason,
    }


def attempt_json(a: AttemptView) -> dict[str, Any]:
    return {
        "attempt": a.attempt_no, "token": a.token, "worker_id": a.worker_id,
        "started_at": iso(a.started_at_ms), "last_heartbeat_at": iso(a.last_heartbeat_ms),
        "finished_at": iso(a.finished_at_ms), "result": a.result, "retryable": a.retryable,
        "error_class": a.error_class, "error_message": a.error_message,
    }


def description_json(d: ScheduleDescription) -> dict[str, Any]:
    return {
        **schedule_json(d.schedule),
        "versions": [version_json(v) for v in d.versions],
        "changes": [{"version": x.version, "command": x.command, "state": x.state, "request_id": x.request_id,
                     "applied_at": iso(x.applied_at_ms), "effective_from": iso(x.effective_from_ms)}
                    for x in d.changes],
        "next_fires": [{"scheduled_for": iso(f.scheduled_for_ms), "available_at": iso(f.available_at_ms)}
                       for f in d.next_fires],
        "last_occurrences": [occurrence_json(o) for o in d.last_occurrences],
    }


def detail_json(d: OccurrenceDetail) -> dict[str, Any]:
    return {**occurrence_json(d.occurrence), "attempts": [attempt_json(a) for a in d.attempts]}


def dead_letter_json(d: DeadLetterView) -> dict[str, Any]:
    """A DLQ item as ``GET /v1/dlq`` answers it (``ksched dlq list --json`` adds to it)."""
    return {
        "occurrence_id": d.occurrence_id, "schedule_id": d.schedule_id, "version": d.version,
        "scheduled_for": iso(d.scheduled_for_ms), "handler": d.handler, "attempts": d.attempts,
        "last_error_class": d.last_error_class, "last_error_message": d.last_error_message,
        "dead_at": iso(d.dead_at_ms), "reason": d.reason,
    }


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Any:
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(c, overflow="fold")  # an id wraps, never ends in "…": it can be copied
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    return t


def _occurrence_rows(items: Any) -> list[list[Any]]:
    return [[o.occurrence_id, o.version, iso(o.scheduled_for_ms), iso(o.enqueued_at_ms),
             None if o.lag_ms is None else f"{o.lag_ms / 1000:.3f}", o.state, o.attempt_count, o.reason]
            for o in items]


_OCC_COLUMNS = ["occurrence", "v", "scheduled_for", "enqueued_at", "lag s", "state", "attempts", "reason"]


def print_description(d: ScheduleDescription) -> None:
    from rich.console import Console

    c = Console()
    s = d.schedule
    when = f"cron {s.spec.cron!r}" if s.spec.cron else f"at {s.spec.at}"
    c.print(f"[bold]{s.schedule_id}[/bold]  tenant {s.tenant}  version {s.version}  [bold]{s.state}[/bold]  "
            f"{when} in {s.spec.timezone}  handler {s.spec.handler}")
    c.print(_table("spec", ["field", "value"], [[k, v] for k, v in spec_json(s.spec).items()]))
    c.print(_table("versions", ["v", "command", "state", "effective_from", "effective_until", "applied_at"],
                   [[v.version, v.command, v.state, iso(v.effective_from_ms),
                     iso(v.effective_until_ms) or "-", iso(v.applied_at_ms)] for v in d.versions]))
    c.print(_table("changes", ["v", "command", "state", "applied_at", "effective_from"],
                   [[x.version, x.command, x.state, iso(x.applied_at_ms), iso(x.effective_from_ms)]
                    for x in d.changes]))
    c.print(_table("next fire times", ["#", "scheduled_for", "available_at"],
                   [[n, iso(f.scheduled_for_ms), iso(f.available_at_ms)]
                    for n, f in enumerate(d.next_fires, 1)]))
    if not d.next_fires:
        c.print(f"no next fire times: the schedule is {s.state}" if s.state != "ACTIVE" else
                "no next fire times: the spec has no fire after now")
    c.print(_table("last occurrences (newest first)", _OCC_COLUMNS, _occurrence_rows(d.last_occurrences)))


def print_detail(d: OccurrenceDetail) -> None:
    from rich.console import Console

    c = Console()
    o = d.occurrence
    c.print(_table(f"occurrence {o.occurrence_id}", _OCC_COLUMNS, _occurrence_rows([o])))
    c.print(_table("attempts", ["#", "token", "worker", "started_at", "finished_at", "result", "retryable",
                                "error"],
                   [[a.attempt_no, a.token, a.worker_id, iso(a.started_at_ms), iso(a.finished_at_ms),
                     a.result, a.retryable, a.error_class] for a in d.attempts]))


def print_occurrences(items: list[OccurrenceView], title: str, cursor: str | None) -> None:
    from rich.console import Console

    c = Console()
    c.print(_table(title, ["schedule", *_OCC_COLUMNS],
                   [[o.schedule_id, *row] for o, row in zip(items, _occurrence_rows(items), strict=True)]))
    if cursor:
        c.print(f"more: --cursor {cursor}")
