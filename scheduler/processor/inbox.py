"""The inbox: step 2 of a tick for the records polled from ``commands.<tenant>[p]``: decode, apply, answer.

A record is a schedule command (answered on the tenant's results topic, accepted or REJECTED with
the reason), an attempt report (applied to the attempt it names, or ignored and counted), or
several reports in one record (``AttemptReports``: each applied as if it came alone, in order). The
topic a record came on is its tenant (the broker's ACLs decide who may write it): a command whose
tenant field names another tenant is answered TENANT_MISMATCH, a report naming another is ignored.
Nothing a client sends may raise out of the tick, abort it in a loop, or stall other tenants:
an undecodable record is answered UNDECODABLE, and a bug met while applying one is answered
INTERNAL (a command) or ignored (a report), the shard then rebuilt from Kafka after the commit.
"""

from __future__ import annotations

import logging
from itertools import groupby
from operator import methodcaller

from confluent_kafka import Message
from prometheus_client import Counter

from scheduler.domain import ScheduleSpec
from scheduler.processor.attempts import Attempt
from scheduler.processor.checkpoint import Checkpoint, Topics
from scheduler.processor.intake import SucceededIntake
from scheduler.processor.lifecycle import apply as apply_report
from scheduler.processor.lifecycle import succeeded_intake
from scheduler.processor.metrics import ProcessorMetrics
from scheduler.processor.model import Event
from scheduler.processor.shard import CommandOutcome, Shard
from scheduler.records import (
    AttemptReport,
    AttemptReports,
    RecordDecodeError,
    ScheduleCommand,
    decode_command_topic,
)
from scheduler.records.avro_fast import ScannedReport
from scheduler.records.report_scan import fields_of, scan, scan_batch
from scheduler.tenants import Tenant
from scheduler.vocabulary import AttemptReportKind, RejectCode

log = logging.getLogger("ksched.processor")

# A command record larger than this is refused before it is decoded: the schedules and history
# records derived from it must stay under the producer's message limit (1 MB), or the tick's
# transaction would fail on every retry. The spec's own payload bound is far below it.
MAX_COMMAND_BYTES = 900_000
MAX_ID_CHARS = 256  # request_id, tenant, schedule_id, idempotency_key: answers and records stay small
_SUCCEEDED = AttemptReportKind.SUCCEEDED
_topic = methodcaller("topic")  # a polled record's topic, called in C by groupby


def apply_command(shard: Shard, cmd: ScheduleCommand | AttemptReport, now: int) -> CommandOutcome:
    """Apply a decoded schedule command to ``shard``. A spec that does not convert (a bound
    overflowed, a bad value) or an over-long id is answered (INVALID_SPEC / INVALID_COMMAND),
    never raised."""
    assert isinstance(cmd, ScheduleCommand)
    for name, value in (
        ("request_id", cmd.request_id),
        ("tenant", cmd.tenant),
        ("schedule_id", cmd.schedule_id),
        ("idempotency_key", cmd.idempotency_key),
    ):
        if value is not None and len(value) > MAX_ID_CHARS:
            return CommandOutcome(
                cmd.request_id[:MAX_ID_CHARS], cmd.tenant[:MAX_ID_CHARS], "", False,
                code=RejectCode.INVALID_COMMAND, kind=cmd.kind,
                reason=f"{name} is {len(value)} characters long; the limit is {MAX_ID_CHARS}",
            )
    spec: ScheduleSpec | None = None
    if cmd.spec is not None:
        try:
            spec = cmd.spec.to_domain()
        except (ValueError, OverflowError) as exc:
            return CommandOutcome(
                cmd.request_id, cmd.tenant, cmd.schedule_id or "", False,
                code=RejectCode.INVALID_SPEC, reason=str(exc), kind=cmd.kind,
            )
    return shard.apply(
        kind=cmd.kind,
        request_id=cmd.request_id,
        tenant=cmd.tenant,
        schedule_id=cmd.schedule_id,
        idempotency_key=cmd.idempotency_key,
        expected_version=cmd.expected_version,
        spec=spec,
        issued_at=cmd.issued_at_ms // 1000,
        now=now,
    )


def mismatch(cmd: ScheduleCommand, tenant: str) -> CommandOutcome | None:
    """TENANT_MISMATCH when ``cmd`` names another tenant than ``tenant``, whose topic it came on."""
    if cmd.tenant == tenant:
        return None
    return CommandOutcome(
        cmd.request_id[:MAX_ID_CHARS], tenant, cmd.schedule_id or "", False,
        code=RejectCode.TENANT_MISMATCH, kind=cmd.kind,
        reason=f"tenant {cmd.tenant[:MAX_ID_CHARS]!r} arrived on the commands topic of tenant {tenant!r}: "
        f"a command names the tenant whose topic it is published to (publish {cmd.tenant[:40]!r}'s "
        "commands to its own topic, with its own credentials)",
    )


class Inbox:
    """Takes the records of shard p's inputs (``commands.<tenant>[p]``) into its open checkpoint (step 2)."""

    def __init__(self, tenants: dict[str, Tenant], metrics: ProcessorMetrics, topics: Topics) -> None:
        self.tenants = tenants
        self.metrics = metrics
        self.topics = topics
        # The labelled children of the per-report counters, by (tenant, kind): ``labels()``
        # costs more than applying a report.
        self._counted: dict[tuple[str, str], Counter] = {}
        self._ignored: dict[tuple[str, str], Counter] = {}
        # Reports seen by (tenant, kind) since the last flush: a Counter.inc (a lock) per report
        # costs more than a dict's, so the counters move once a batch (take_all).
        self._seen: dict[tuple[str, str], int] = {}

    def take_all(self, shard: Shard, cp: Checkpoint, msgs: list[Message], now: int) -> bool:
        """:meth:`take` each of a shard's polled ``msgs`` in order, the report counters moved once
        for the batch and the reports' occurrence events written once for each run of reports
        (before the next command's records, so the events topic keeps the order they were
        decided in). Returns True when applying one of them hit a bug (rebuild after ``cp``)."""
        bug = False
        events: list[Event] = []
        dead: list[Attempt] = []
        commands_tenant, report, seen = self.topics.commands_tenant, self._report, self._seen
        fast: SucceededIntake | None = succeeded_intake(shard, now, events)
        try:
            for topic, run in groupby(msgs, _topic):  # one topic per tenant: polled in runs of one
                tenant = commands_tenant(topic or "")
                n_fast = 0  # the run's reports that ``fast`` applied, counted once
                for m in run:  # a burst's reports: locals only, one call per record that scans
                    raw = m.value() or b""
                    scanned = scan(raw) if len(raw) <= MAX_COMMAND_BYTES else None
                    batch: list[ScannedReport] | None
                    if scanned is not None:
                        batch = [scanned]
                    else:  # several reports in one record, or not a report of the current schemas
                        batch = scan_batch(raw) if len(raw) <= MAX_COMMAND_BYTES else None
                        if batch is None:  # decoded in full: a command, an older report, undecodable
                            bug = self._decode(shard, cp, m, raw, now, tenant, events, dead) or bug
                            continue
                    i, n = 0, len(batch)
                    while i < n:
                        if fast is not None:
                            before = len(events)
                            try:
                                stop = fast.run(batch, i, tenant)
                            except Exception:  # the report it was taking changed nothing: apply decides it
                                stop = i + len(events) - before  # an event for each report taken before it
                                log.exception("report %s: the fast intake failed; applied the general way",
                                              batch[stop][0][:100])
                                fast = None
                            n_fast += stop - i
                            i = stop
                            if i == n:
                                break
                        bug = report(shard, batch[i], now, tenant, events, dead) or bug
                        i += 1
                if n_fast:
                    seen[(tenant, _SUCCEEDED)] = seen.get((tenant, _SUCCEEDED), 0) + n_fast
            if events or dead:
                cp.lifecycle(events, dead, now)
        finally:
            self.flush()
        return bug

    def take(self, shard: Shard, cp: Checkpoint, m: Message, now: int) -> bool:
        """Apply one record and write what it changed to ``cp``. Returns True when applying it
        hit a bug: the shard's memory may be half-changed, so rebuild it once ``cp`` commits."""
        return self.take_all(shard, cp, [m], now)

    def flush(self) -> None:
        """Move the reports seen since the last flush onto their counters."""
        seen, self._seen = self._seen, {}
        for key, n in seen.items():
            counted = self._counted.get(key)
            if counted is None:
                counted = self._counted[key] = self.metrics.reports.labels(tenant=key[0], kind=key[1])
            counted.inc(n)

    def _decode(
        self, shard: Shard, cp: Checkpoint, m: Message, raw: bytes, now: int, tenant: str,
        events: list[Event], dead: list[Attempt],
    ) -> bool:
        """Take record ``m`` (value ``raw``) that did not scan as a report of the current schema:
        through the general decoder, a command, an older report, or an undecodable record."""
        try:
            if len(raw) > MAX_COMMAND_BYTES:
                raise RecordDecodeError(
                    f"record of {len(raw)} bytes is over the command limit of {MAX_COMMAND_BYTES} bytes: "
                    "keep the payload under the spec's payload limit"
                )
            decoded = decode_command_topic(raw)
        except RecordDecodeError as exc:
            self.metrics.rejected.labels(tenant="?", code=RejectCode.UNDECODABLE).inc()
            cp.undecodable(m.offset(), m.key(), str(exc), now, tenant)
            return False
        if isinstance(decoded, AttemptReport):
            return self._report(shard, fields_of(decoded), now, tenant, events, dead)
        if isinstance(decoded, AttemptReports):  # written with an older schema: one by one, in order
            bug = False
            for rep in decoded.reports:
                bug = self._report(shard, fields_of(rep), now, tenant, events, dead) or bug
            return bug
        if events or dead:  # the reports' events before this command's records
            cp.lifecycle(events, dead, now)
            events.clear()
            dead.clear()
        return self._command(shard, cp, decoded, now, tenant)

    def _report(
        self, shard: Shard, fields: ScannedReport, now: int, tenant: str,
        events: list[Event], dead: list[Attempt],
    ) -> bool:
        """Apply the report of ``fields`` (its record's, in schema order), its events and dead
        occurrences appended to the batch's ``events`` and ``dead``. Returns True when applying
        it hit a bug (what it appended is taken back)."""
        (oid, sid, named, version, sf_ms, attempt, token, kind, retryable, error_class, error_message,
         _worker, _reported, _started) = fields
        key = (tenant, kind)
        seen = self._seen
        seen[key] = seen.get(key, 0) + 1
        if named != tenant:  # another tenant's name on this tenant's topic: a forgery or a bug
            self._ignore(key)
            log.debug("report %s %s ignored: tenant %r on the commands topic of %r",
                      kind, oid[:100], named[:100], tenant)
            return False
        # A report is applied only to a schedule this shard holds (lifecycle.invalid_report), so
        # one produced to another partition than its schedule id's is ignored there.
        n_events, n_dead = len(events), len(dead)
        try:
            ignored = apply_report(shard, kind, oid, sid, named, version, sf_ms // 1000, attempt, token,
                                   retryable, error_class, error_message, now, events, dead)
        except Exception:  # a bug must not turn one report into a crash loop of the shard
            log.exception("report %s %s not applied: ignored; the shard is rebuilt from Kafka",
                          kind, oid[:100])
            del events[n_events:], dead[n_dead:]
            self._ignore(key)
            return True
        if ignored is not None:
            self._ignore(key)
            log.debug("report %s %s ignored: %s", kind, oid, ignored)
        return False

    def _ignore(self, key: tuple[str, str]) -> None:
        ignored = self._ignored.get(key)
        if ignored is None:
            ignored = self._ignored[key] = self.metrics.reports_ignored.labels(tenant=key[0], kind=key[1])
        ignored.inc()

    def _command(self, shard: Shard, cp: Checkpoint, cmd: ScheduleCommand, now: int, tenant: str) -> bool:
        bug = False
        queued = shard.completing.get(cmd.schedule_id) if cmd.schedule_id and shard.completing else None
        if queued is not None and queued.tenant == tenant:  # never on another tenant's command
            # A burst's completion of this schedule still queued: its version's COMPLETED record
            # first, encoded before the command changes the entry (ShardStore.complete_later).
            prior = shard.take_completion(queued.schedule_id)
            if prior is not None:
                cp.completions([prior], now)
        try:
            outcome = mismatch(cmd, tenant) or apply_command(shard, cmd, now)
        except Exception as exc:  # a bug must not turn one command into a crash loop of the shard
            log.exception("command %s not applied; the shard is rebuilt from Kafka", cmd.request_id[:100])
            bug = True  # memory may be half-changed: after this commit, restore it
            outcome = CommandOutcome(
                cmd.request_id[:MAX_ID_CHARS], cmd.tenant[:MAX_ID_CHARS],
                cmd.schedule_id or "", False, code=RejectCode.INTERNAL, kind=cmd.kind,
                reason=f"the processor could not apply this command ({type(exc).__name__}: {exc}); "
                "it is in the processor's log: please report it",
            )
        cp.result(outcome, now, tenant)
        if not outcome.accepted:
            self.metrics.rejected.labels(tenant=tenant, code=outcome.code or "?").inc()
            return bug
        if outcome.entry is not None:  # None: an idempotent replay, nothing changed
            cp.schedule_change(outcome.entry, outcome.kind, outcome.request_id, now)
            cp.lifecycle(outcome.events, [], now)
        return bug
