"""Python SDK (DESIGN.md §6): ``SchedulerClient(settings, tenant=T)``.

* ``commands.py`` — create / update / patch / pause / resume / cancel / preview: publish to
  ``ksched.commands.<tenant>`` and await the outcome (its docstring: retries, credentials);
* ``queries.py`` — get / list / describe / occurrence / occurrences: the history store, scoped
  to the tenant, with read-your-writes (its docstring: the decisions);
* ``topics.py`` — reading a tenant's compacted schedules topic (``get``'s fallback, admin reads);
* ``errors.py`` — the errors, one line each naming the field, the value and the fix.

Everything a caller needs is importable from ``scheduler.client``.
"""

from __future__ import annotations

from scheduler.client.commands import (
    GENERATED_KEY_PREFIX,
    Accepted,
    PendingRequest,
    RequestTimeout,
    SchedulerClient,
)
from scheduler.client.errors import (
    CommandRejected,
    HistoryLagging,
    HistoryNotIndexed,
    HistoryUnavailable,
    OccurrenceNotFound,
    PublishError,
    ScheduleNotFound,
    UnknownTenant,
)
from scheduler.client.queries import HistoryReader
from scheduler.client.topics import read_schedule, read_schedules
from scheduler.history.views import (
    AttemptView,
    NextFire,
    OccurrenceDetail,
    OccurrenceView,
    Page,
    ScheduleDescription,
    VersionView,
)
from scheduler.kafka.errors import AccessDenied, AccessError, AuthenticationFailed

__all__ = [
    "GENERATED_KEY_PREFIX",
    "Accepted",
    "AccessDenied",
    "AccessError",
    "AttemptView",
    "AuthenticationFailed",
    "CommandRejected",
    "HistoryLagging",
    "HistoryNotIndexed",
    "HistoryReader",
    "HistoryUnavailable",
    "NextFire",
    "OccurrenceDetail",
    "OccurrenceNotFound",
    "OccurrenceView",
    "Page",
    "PendingRequest",
    "PublishError",
    "RequestTimeout",
    "ScheduleDescription",
    "ScheduleNotFound",
    "SchedulerClient",
    "UnknownTenant",
    "VersionView",
    "read_schedule",
    "read_schedules",
]
