"""Pure domain code: specs, cron, fire times, jittered time, ids, backoff. No Kafka here.

Modules: ``spec`` (what a user asks for), ``cron`` (expression grammar and
wall-clock matching), ``zones`` (IANA zones, epoch seconds), ``cron_rule`` (a
rule over a zone with DST options), ``once`` (one-time ``at``), ``compiled``
(a spec's timing as a pure function of time), ``fire`` (``available_at``: the
jittered time, defined once), ``ids``, ``backoff``, ``bounds``, ``errors``.
"""

from scheduler.domain.backoff import retry_delay_s
from scheduler.domain.compiled import CompiledSpec, compile_spec
from scheduler.domain.errors import SpecError
from scheduler.domain.fire import available_at
from scheduler.domain.ids import occurrence_id, schedule_id_for
from scheduler.domain.spec import ScheduleSpec

__all__ = [
    "CompiledSpec",
    "ScheduleSpec",
    "SpecError",
    "available_at",
    "compile_spec",
    "occurrence_id",
    "retry_delay_s",
    "schedule_id_for",
]
