"""Python SDK: publish schedule commands to ``ksched.commands`` and await their results.

Validation runs before anything is published: an invalid spec raises
:class:`scheduler.domain.SpecError` naming the field.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_END, Message, TopicPartition

from scheduler.domain import ScheduleSpec, compile_spec, schedule_id_for
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.reader import all_partitions, read_to_end
from scheduler.records import CommandResult, ScheduleCommand, ScheduleSpecRecord, decode, encode
from scheduler.settings import Settings, load_settings
from scheduler.topology import topic_name


class CommandRejected(Exception):
    """The processor rejected a command; ``code`` and ``reason`` say why."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.code = result.code
        super().__init__(f"{result.code}: {result.reason}")


@dataclass(frozen=True)
class Accepted:
    schedule_id: str
    version: int
    request_id: str


class SchedulerClient:
    """create / update / pause / resume / cancel / preview for one cluster."""

    def __init__(self, settings: Settings | None = None, *, timeout_s: float = 30) -> None:
        self.settings = settings or load_settings()
        self.timeout_s = timeout_s
        bs = self.settings.bootstrap_servers
        self._producer = producer(bs)
        self._results = consumer(bs)
        self._t_commands = topic_name(self.settings, "commands")
        self._t_results = topic_name(self.settings, "results")
        meta = self._results.list_topics(self._t_results, timeout=10).topics[self._t_results]
        self._results.assign(
            [TopicPartition(self._t_results, p, OFFSET_END) for p in sorted(meta.partitions)]
        )
        self._pending: dict[str, CommandResult] = {}

    def close(self) -> None:
        self._producer.flush(10)
        self._results.close()

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def preview(spec: ScheduleSpec, after: int, count: int = 5) -> list[int]:
        return compile_spec(spec).fire_times_epoch(after, count)

    def create(self, tenant: str, spec: ScheduleSpec, *, key: str | None = None) -> Accepted:
        compile_spec(spec)  # validation errors surface before anything is published
        sid = schedule_id_for(tenant, key)
        return self._send(tenant, sid, "CREATE", spec=spec, key=key)

    def update(
        self, tenant: str, schedule_id: str, spec: ScheduleSpec, *, expected_version: int | None = None
    ) -> Accepted:
        compile_spec(spec)
        return self._send(tenant, schedule_id, "UPDATE", spec=spec, expected_version=expected_version)

    def pause(self, tenant: str, schedule_id: str, *, expected_version: int | None = None) -> Accepted:
        return self._send(tenant, schedule_id, "PAUSE", expected_version=expected_version)

    def resume(self, tenant: str, schedule_id: str, *, expected_version: int | None = None) -> Accepted:
        return self._send(tenant, schedule_id, "RESUME", expected_version=expected_version)

    def cancel(self, tenant: str, schedule_id: str, *, expected_version: int | None = None) -> Accepted:
        return self._send(tenant, schedule_id, "CANCEL", expected_version=expected_version)

    def publish(self, command: ScheduleCommand, *, wait: bool = True) -> CommandResult | None:
        """Publish a raw command (keyed by schedule id); optionally await its result."""
        self._producer.produce(self._t_commands, encode(command), (command.schedule_id or "").encode())
        self._producer.flush(self.timeout_s)
        return self.await_result(command.request_id) if wait else None

    def _send(
        self,
        tenant: str,
        sid: str,
        kind: str,
        *,
        spec: ScheduleSpec | None = None,
        key: str | None = None,
        expected_version: int | None = None,
    ) -> Accepted:
        rid = uuid.uuid4().hex
        cmd = ScheduleCommand(
            request_id=rid,
            tenant=tenant,
            schedule_id=sid,
            idempotency_key=key,
            kind=kind,  # type: ignore[arg-type]
            expected_version=expected_version,
            spec=ScheduleSpecRecord.from_domain(spec) if spec is not None else None,
            issued_at_ms=int(time.time() * 1000),
        )
        res = self.publish(cmd)
        assert res is not None
        if res.status != "ACCEPTED":
            raise CommandRejected(res)
        return Accepted(sid, res.version or 0, rid)

    def await_result(self, request_id: str) -> CommandResult:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if request_id in self._pending:
                return self._pending.pop(request_id)
            for m in self._results.consume(500, 0.2):
                if m.error() is not None or m.value() is None:
                    continue
                try:
                    r = decode(m.value() or b"", CommandResult)
                except ValueError:
                    continue
                self._pending[r.request_id] = r
        raise TimeoutError(
            f"no result for request {request_id} within {self.timeout_s}s: is a processor running?"
        )


def read_schedules(settings: Settings, tenant: str, timeout_s: float = 30) -> dict[str, object]:
    """The current ``Schedule`` records of ``tenant``, read from the compacted ``ksched.schedules``.

    A tenant sees only its own schedules: records of other tenants are skipped.
    """
    from scheduler.records import Schedule

    topic = topic_name(settings, "schedules")
    out: dict[str, object] = {}

    def keep(m: Message) -> None:
        if m.value() is None:  # a tombstone: the schedule was purged after its retention
            out.pop((m.key() or b"").decode(), None)
            return
        try:
            s = decode(m.value() or b"", Schedule)
        except ValueError:
            return
        if s.tenant == tenant:
            out[s.schedule_id] = s

    c = consumer(settings.bootstrap_servers, None, **{"enable.partition.eof": True})
    try:
        read_to_end(c, all_partitions(c, topic), keep, timeout_s)
    finally:
        c.close()
    return out
