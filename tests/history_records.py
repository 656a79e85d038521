"""Shared helpers of tests/test_history*.py: encoded records of one occurrence's story.

``story(tenant, sid, n)`` gives, for ``n`` occurrences of schedule ``sid``, the records the
processor and a worker write: the dispatch record, STARTED and SUCCEEDED reports and the
SUCCEEDED event; plus the schedule's history entry and Schedule record.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.domain.ids import occurrence_id
from scheduler.history.mapping import Source
from scheduler.records import (
    AttemptReport,
    DlqEntry,
    Occurrence,
    OccurrenceEvent,
    Schedule,
    ScheduleHistoryEntry,
    ScheduleSpecRecord,
    encode,
)

T0_MS = 1_800_000_000_000
SPEC = ScheduleSpecRecord(kind="cron", cron="* * * * *", timezone="UTC", handler="h", payload=b"\x00p")


@dataclass(frozen=True)
class Rec:
    """One record as the indexer meets it: its source, the topic's tenant, value, Kafka timestamp."""

    source: Source
    tenant: str | None
    value: bytes | None
    ts: int
    key: str


def oid(sid: str, version: int, sf_ms: int) -> str:
    return occurrence_id(sid, version, sf_ms // 1000)


def dispatch(
    tenant: str, sid: str, sf_ms: int, attempt: int = 1, version: int = 1, ts: int | None = None
) -> Rec:
    value = encode(Occurrence(
        occurrence_id=oid(sid, version, sf_ms), schedule_id=sid, tenant=tenant, version=version,
        scheduled_for_ms=sf_ms, available_at_ms=sf_ms + 5, enqueued_at_ms=sf_ms + 7, attempt=attempt,
        lane="STRICT", handler="h", payload=b"p",
    ))
    return Rec(Source.DISPATCH, tenant, value, sf_ms + 10 if ts is None else ts, sid)


def event(tenant: str, sid: str, sf_ms: int, state: str, attempt: int | None = 1, at: int | None = None,
          version: int = 1, reason: str | None = None, rec_tenant: str | None = None) -> Rec:
    value = encode(OccurrenceEvent(
        occurrence_id=oid(sid, version, sf_ms), schedule_id=sid, tenant=rec_tenant or tenant,
        version=version, scheduled_for_ms=sf_ms, state=state, attempt=attempt, reason=reason,  # type: ignore[arg-type]
        at_ms=sf_ms + 100 if at is None else at,
    ))
    return Rec(Source.EVENTS, tenant, value, sf_ms + 100, sid)


def report(tenant: str, sid: str, sf_ms: int, kind: str, attempt: int = 1, token: str = "tok",
           at: int | None = None, version: int = 1, worker: str = "w1", retryable: bool | None = None,
           error: str | None = None, occ: str | None = None) -> Rec:
    final = kind == "FAILED"
    value = encode(AttemptReport(
        occurrence_id=occ or oid(sid, version, sf_ms), schedule_id=sid, tenant=tenant, version=version,
        scheduled_for_ms=sf_ms, attempt=attempt, token=token, kind=kind, worker_id=worker,  # type: ignore[arg-type]
        reported_at_ms=sf_ms + 50 if at is None else at, retryable=retryable if final else None,
        error_class=error if final else None, error_message="boom" if final and error else None,
    ))
    return Rec(Source.COMMANDS, tenant, value, sf_ms + 50, sid)


def history(tenant: str, sid: str, version: int, command: str, state: str, effective_from_ms: int,
            spec: ScheduleSpecRecord | None = SPEC) -> Rec:
    value = encode(ScheduleHistoryEntry(
        schedule_id=sid, tenant=tenant, version=version, command=command, request_id=f"r-{version}",  # type: ignore[arg-type]
        spec=spec, state=state, applied_at_ms=effective_from_ms - 1, effective_from_ms=effective_from_ms,  # type: ignore[arg-type]
    ))
    return Rec(Source.HISTORY, None, value, effective_from_ms, sid)


def schedule(tenant: str, sid: str, version: int, state: str, effective_from_ms: int) -> Rec:
    value = encode(Schedule(
        tenant=tenant, schedule_id=sid, version=version, state=state, spec=SPEC,  # type: ignore[arg-type]
        created_at_ms=T0_MS - 1000, updated_at_ms=effective_from_ms - 1, effective_from_ms=effective_from_ms,
        idempotency_key="k",
    ))
    return Rec(Source.SCHEDULES, None, value, effective_from_ms, sid)


def story(tenant: str, sid: str, n: int, start_ms: int = T0_MS) -> list[Rec]:
    """Every record of ``n`` succeeded occurrences of ``sid`` (one a minute) and its version 1."""
    out = [history(tenant, sid, 1, "CREATE", "ACTIVE", start_ms - 60_000),
           schedule(tenant, sid, 1, "ACTIVE", start_ms - 60_000)]
    for i in range(n):
        sf = start_ms + i * 60_000
        out += [dispatch(tenant, sid, sf), report(tenant, sid, sf, "STARTED", token=f"t{i}"),
                report(tenant, sid, sf, "SUCCEEDED", token=f"t{i}", at=sf + 80),
                event(tenant, sid, sf, "SUCCEEDED")]
    return out


def dead_letter(tenant: str, sid: str, sf_ms: int, *, attempts: int = 3, dead_at_ms: int | None = None,
                record_tenant: str | None = None) -> bytes:
    """The value of a ``ksched.dlq.<tenant>`` record: ``sid``'s occurrence at ``sf_ms`` died."""
    return encode(DlqEntry(
        occurrence_id=oid(sid, 1, sf_ms), schedule_id=sid, tenant=record_tenant or tenant, version=1,
        scheduled_for_ms=sf_ms, available_at_ms=sf_ms, lane="STRICT", handler="h", payload=b"p",
        attempts=attempts, last_error_class="E", last_error_message=f"failed {attempts}",
        dead_at_ms=dead_at_ms if dead_at_ms is not None else sf_ms + attempts, reason="attempts exhausted",
    ))
