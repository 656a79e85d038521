"""One shard as the runtime drives it: the store and its roles (no Kafka).

The runtime (``scheduler.processor.runtime``) feeds it commands and the clock
and writes what it returns inside one transaction. Everything here is
deterministic given (restored state, commands, now), except that ``now`` is
the wall clock: decisions taken from it are safe because they commit
atomically with the cursor they move.

=================  ==========================================  ============================
role               what it does                                module
=================  ==========================================  ============================
store              schedules, lane queues, watermark, runtime  :mod:`~.store`
commands           apply one schedule command                  :mod:`~.commands`
tick               due, fire, misfire policy                   :mod:`~.tick`
lifecycle          attempt reports, overlap, RETRY lane        :mod:`~.lifecycle`
restore            read the shard, then arm it                 :mod:`~.restore`, :mod:`~.rearm`
=================  ==========================================  ============================
"""

from __future__ import annotations

from scheduler.domain import ScheduleSpec
from scheduler.processor import commands, rearm, tick
from scheduler.processor.outputs import CommandOutcome, TickOutput
from scheduler.processor.store import ScheduleRuntimeView, ShardStore

__all__ = ["CommandOutcome", "ScheduleRuntimeView", "Shard", "TickOutput"]


class Shard(ShardStore):
    """The state of shard ``shard_id`` (:class:`ShardStore`) with the entries of its roles."""

    def apply(
        self,
        *,
        kind: str,
        request_id: str,
        tenant: str,
        schedule_id: str | None,
        idempotency_key: str | None,
        expected_version: int | None,
        spec: ScheduleSpec | None,
        issued_at: int,
        now: int,
    ) -> CommandOutcome:
        """Apply one schedule command: :func:`scheduler.processor.commands.apply`."""
        return commands.apply(
            self, kind=kind, request_id=request_id, tenant=tenant, schedule_id=schedule_id,
            idempotency_key=idempotency_key, expected_version=expected_version, spec=spec,
            issued_at=issued_at, now=now,
        )

    def due(self, now: int, budget: int, clock: float) -> TickOutput:
        """Decide the occurrences due now: :func:`scheduler.processor.tick.due`."""
        return tick.due(self, now, budget, clock)

    def finish_restore(self, now: int = 0) -> None:
        """Arm the restored shard: :func:`scheduler.processor.rearm.finish_restore`."""
        rearm.finish_restore(self, now)
