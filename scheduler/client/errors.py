"""The SDK's errors: one line each, naming the field, the value and the fix."""

from __future__ import annotations

from scheduler.records import CommandResult


class CommandRejected(Exception):
    """The processor rejected a command; ``code`` and ``reason`` say why."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.code = result.code
        super().__init__(f"{result.code}: {result.reason}")


class PublishError(Exception):
    """The command could not be written to Kafka (nothing was sent); the message says why."""


class UnknownTenant(PublishError, LookupError):
    """The tenant has no topics here: it is not registered (or was removed), or the namespace is wrong."""


class ScheduleNotFound(LookupError):
    """No schedule with this id exists for this tenant (another tenant's id is answered the same)."""


class OccurrenceNotFound(LookupError):
    """No occurrence with this id exists for this tenant (another tenant's id is answered the same)."""


class HistoryUnavailable(RuntimeError):
    """The history store the queries read (setting ``history_dsn``) cannot be opened or has never
    been fed by ``ksched history`` for this namespace."""


class HistoryLagging(TimeoutError):
    """The history store has not indexed a change this client made within the deadline
    (read-your-writes, ``docs/decisions.md``): is ``ksched history`` running and keeping up?"""


class HistoryNotIndexed(HistoryUnavailable):
    """The store exists (or would be the default SQLite file) but no indexer has fed it for this
    namespace yet; ``get`` then falls back to the schedule's one partition of the tenant's topic."""
