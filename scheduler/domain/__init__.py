"""Pure domain code: specs, cron, fire times, ids, backoff. No Kafka here."""

from scheduler.domain.backoff import retry_delay_s
from scheduler.domain.compiled import CompiledSpec, compile_spec
from scheduler.domain.errors import SpecError
from scheduler.domain.ids import available_at, occurrence_id, schedule_id_for
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
