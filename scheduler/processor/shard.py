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

from scheduler.processor import commands, rearm, tick
from scheduler.processor.outputs import CommandOutcome, TickOutput
from scheduler.processor.store import ScheduleRuntimeView, ShardStore

__all__ = ["CommandOutcome", "ScheduleRuntimeView", "Shard", "TickOutput"]


class Shard(ShardStore):
    """The state of shard ``shard_id`` (:class:`ShardStore`) with the entries of its roles."""

    apply = commands.apply  # one schedule command
    due = tick.due  # the occurrences due now
    finish_restore = rearm.finish_restore  # arm what restore read
