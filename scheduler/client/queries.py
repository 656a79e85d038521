"""The SDK's queries: the history store (``scheduler/history/queries.py``) with tenancy,
read-your-writes and errors a user can act on.

:class:`HistoryReader` needs no Kafka (the CLI uses it directly); :class:`QueryCalls` is the part
of :class:`~scheduler.client.SchedulerClient` that delegates to it. Decisions
(``docs/decisions.md``, "Queries read the history store"):

* **Which store.** The setting ``history_dsn`` (the one ``ksched history`` writes); empty is the
  default SQLite file. A store no indexer has fed for this namespace (or a SQLite file that does
  not exist) is :class:`HistoryNotIndexed`: ``list`` / ``describe`` / ``occurrence(s)`` raise it
  (naming the setting), ``get`` falls back to reading the one partition of the tenant's
  compacted schedules topic its id is keyed to (never the whole topic).
* **Read-your-writes.** The store trails the topics by the indexer's delay. A client remembers
  the last command it got accepted per schedule (version and request id); ``get`` and
  ``describe`` of such a schedule wait until the store shows a later version or has indexed that
  request (``schedule_changes``; a PAUSE keeps the version, so the version alone is not enough),
  polling for at most ``wait_s``, and raise :class:`HistoryLagging` after that — never a wrong
  "not found" nor the state from before the client's own change.
* **Tenancy.** Every query is filtered on the tenant in SQL; an id of another tenant is answered
  like an unknown one. A tenant's client may not ask for another tenant at all (AccessDenied).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from scheduler.client.errors import (
    HistoryLagging,
    HistoryNotIndexed,
    HistoryUnavailable,
    OccurrenceNotFound,
    ScheduleNotFound,
)
from scheduler.domain.bounds import check_schedule_id, check_tenant
from scheduler.history import HistoryStore, HistoryStoreError, open_store, sqlite_path
from scheduler.history.answers import next_fires
from scheduler.history.queries import DEFAULT_LIMIT
from scheduler.history.views import OccurrenceDetail, OccurrenceView, Page, ScheduleDescription
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.errors import AccessDenied
from scheduler.records import Schedule
from scheduler.settings import Settings

_POLL_S = 0.05


_FIX = ("run `ksched history` (it indexes into the store of the setting history_dsn), or set "
        "history_dsn (KSCHED_HISTORY_DSN) to the store your indexer writes")


# Writes remembered for read-your-writes until the store shows them; past this many the oldest are
# forgotten (an indexer that far behind this one process is reported by its own metrics).
WRITTEN_LIMIT = 100_000


class HistoryReader:
    """One process's reads of the history store of ``settings`` (opened on first use).

    Threads may share a reader (the HTTP API's request threads): each thread gets a connection
    of its own (a store's connection serves one thread at a time), all share what was written."""

    def __init__(self, settings: Settings, *, wait_s: float = 10.0) -> None:
        self.settings = settings
        self.wait_s = wait_s
        self._local = threading.local()
        self._opened: list[HistoryStore] = []
        self._lock = threading.Lock()
        self._fed = False
        self._written: dict[tuple[str, str], tuple[int, str | None]] = {}
        # once: the default file's path reads the environment (7 % of the loop's describe samples)
        self._on_file = sqlite_path(settings.history_dsn, settings.history_default_sqlite) is not None

    @property
    def _store(self) -> HistoryStore | None:
        store: HistoryStore | None = getattr(self._local, "store", None)
        return store

    @_store.setter
    def _store(self, store: HistoryStore | None) -> None:
        self._local.store = store
        if store is not None:
            with self._lock:
                self._opened.append(store)

    @property
    def where(self) -> str:
        """The store as a user configures it, for messages."""
        dsn = self.settings.history_dsn
        return f"history_dsn={dsn!r}" if dsn else \
            f"history_dsn is empty: the default SQLite file {self.settings.history_default_sqlite}"

    def store(self) -> HistoryStore:
        """The open store; :class:`HistoryNotIndexed` until an indexer has fed it for this namespace,
        :class:`HistoryUnavailable` when it cannot be opened."""
        store = self.open()
        if not self._fed:
            self._fed = store.indexed(self.settings.namespace)
            if not self._fed:
                raise HistoryNotIndexed(
                    f"the history store ({self.where}) has indexed nothing of namespace "
                    f"{self.settings.namespace!r}: {_FIX}")
        return store

    def open(self) -> HistoryStore:
        """The store, opened read-only (whether or not it was fed yet: a readiness check's question);
        :class:`HistoryNotIndexed` when the default SQLite file does not exist yet,
        :class:`HistoryUnavailable` when it cannot be opened."""
        store = self._store
        if store is None:
            path = sqlite_path(self.settings.history_dsn, self.settings.history_default_sqlite)
            if path is not None and not Path(path).is_file():
                raise HistoryNotIndexed(f"no history store ({self.where}: no such file): {_FIX}")
            try:
                store = open_store(self.settings.history_dsn, self.settings.history_default_sqlite,
                                   read_only=True)
            except (HistoryStoreError, ValueError) as exc:
                raise HistoryUnavailable(f"the history store ({self.where}) cannot be opened: {exc}") \
                    from None
            self._store = store
        return store

    def noted(self, tenant: str, schedule_id: str, version: int, request_id: str | None) -> None:
        """This process got ``request_id`` accepted at ``version`` (``request_id`` None: a replay,
        which changed nothing): its reads of the schedule must show at least that."""
        key = (tenant, schedule_id)
        self._written.pop(key, None)  # to the end: the oldest are dropped first
        self._written[key] = (version, request_id)
        while len(self._written) > WRITTEN_LIMIT:  # a long-lived API process: bounded memory
            self._written.pop(next(iter(self._written)), None)

    def answers_at_once(self, tenant: str, schedule_id: str) -> bool:
        """Whether a read of ``schedule_id`` neither waits for read-your-writes (the store already
        shows the last change of it this process got accepted: one indexed select to know) nor
        crosses a network (the store is a local SQLite file, read in well under a millisecond):
        an event loop may then read it itself. Raises what a read raises (store not fed, ...)."""
        pending = (tenant, schedule_id) in self._written
        return self._on_file and (not pending or self._caught_up(tenant, schedule_id))

    def _caught_up(self, tenant: str, schedule_id: str) -> bool:
        """Whether the store has indexed the last change this process got accepted. Checked before
        the schedule is read, never after: a change indexed between a read and this check would
        pass it while the read still showed the state before it."""
        want = self._written.get((tenant, schedule_id))
        if want is None:
            return True
        version, request_id = want
        store = self.store()
        if request_id is not None and store.has_change(tenant, schedule_id, request_id):
            return self._indexed(tenant, schedule_id, want)
        s = store.schedule(tenant, schedule_id)  # versions only grow: a later read shows at least this
        if s is not None and (s.version > version or (request_id is None and s.version >= version)):
            return self._indexed(tenant, schedule_id, want)
        return False

    def _indexed(self, tenant: str, schedule_id: str, want: tuple[int, str | None]) -> bool:
        """Forget a write the store now shows (every later read shows it too); True."""
        key = (tenant, schedule_id)
        if self._written.get(key) == want:  # not replaced by a newer write meanwhile
            self._written.pop(key, None)
        return True

    def schedule(self, tenant: str, schedule_id: str) -> Schedule | None:
        """The current schedule (None: ``tenant`` has none with this id), showing at least the last
        change this process got accepted (waiting up to ``wait_s``; :class:`HistoryLagging` after)."""
        check_tenant(tenant)
        check_schedule_id(schedule_id)
        deadline = time.monotonic() + self.wait_s
        while True:
            if self._caught_up(tenant, schedule_id):
                return self.store().schedule(tenant, schedule_id)
            want = self._written.get((tenant, schedule_id))
            if want is not None and time.monotonic() >= deadline:  # None: shown since (another thread)
                version, request_id = want
                raise HistoryLagging(
                    f"schedule {schedule_id}: the history store ({self.where}) has not indexed request "
                    f"{request_id} (version {version}, accepted for this client) within {self.wait_s}s: "
                    "check that `ksched history` is running and keeping up (its metric "
                    "ksched_history_last_commit_timestamp_seconds)")
            time.sleep(_POLL_S)

    def describe(
        self, tenant: str, schedule_id: str, *, next_count: int = 5, last_count: int = 10,
        now_ms: int | None = None,
    ) -> ScheduleDescription:
        """The schedule, its versions, its next ``next_count`` fire times after ``now_ms`` (default:
        now) and its last ``last_count`` occurrences; :class:`ScheduleNotFound` if there is none."""
        s = self.schedule(tenant, schedule_id)
        if s is None:
            raise self.not_found(tenant, schedule_id)
        store = self.store()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return ScheduleDescription(
            schedule=s, versions=store.versions(tenant, schedule_id),
            changes=store.changes(tenant, schedule_id),
            next_fires=next_fires(s, now, next_count),
            last_occurrences=store.last_occurrences(tenant, schedule_id, last_count) if last_count else (),
        )

    def list(
        self, tenant: str, *, state: str | None = None, handler: str | None = None,
        cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[Schedule]:
        return self.store().schedules(check_tenant(tenant), state=state, handler=handler, cursor=cursor,
                                      limit=limit)

    def occurrence(self, tenant: str, occurrence_id: str) -> OccurrenceDetail:
        """The occurrence and its attempts; :class:`OccurrenceNotFound` if ``tenant`` has none."""
        found = self.store().occurrence(check_tenant(tenant), occurrence_id)
        if found is None:
            raise OccurrenceNotFound(
                f"occurrence_id {occurrence_id!r} not found for tenant {tenant!r} in the history "
                f"store ({self.where}): check the id (`ksched occurrences --tenant {tenant} --schedule ID`); "
                "an occurrence appears once it was dispatched or decided and indexed")
        return found

    def occurrences(
        self, tenant: str, *, from_ms: int, to_ms: int, schedule_id: str | None = None,
        state: str | None = None, cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[OccurrenceView]:
        return self.store().occurrences(check_tenant(tenant), schedule_id=schedule_id, from_ms=from_ms,
                                        to_ms=to_ms, state=state, cursor=cursor, limit=limit)

    def not_found(self, tenant: str, schedule_id: str) -> ScheduleNotFound:
        return ScheduleNotFound(
            f"schedule_id {schedule_id!r} not found for tenant {tenant!r} in the history store "
            f"({self.where}): check the id (`ksched schedule list --tenant {tenant}`); one created a "
            "moment ago by another process appears once `ksched history` has indexed it (about a second)")

    def close(self) -> None:
        """Close every thread's connection (call it when no thread reads any more)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for store in opened:
            store.close()
        self._local = threading.local()


class QueryCalls:
    """``get`` / ``list`` / ``describe`` / ``occurrence`` / ``occurrences`` of ``SchedulerClient``."""

    settings: Settings
    tenant: str | None
    timeout_s: float
    conn: KafkaConnection
    history: HistoryReader

    def _may_read(self, tenant: str) -> str:
        check_tenant(tenant)
        if self.tenant is not None and tenant != self.tenant:
            raise AccessDenied(
                f"{self.conn.who} is tenant {self.tenant}'s client and may not read tenant {tenant}'s "
                f"schedules or occurrences: use SchedulerClient(settings, tenant={tenant!r})",
                principal=self.conn.who, resource=f"tenant {tenant}",
            )
        return tenant

    def get(self, tenant: str, schedule_id: str) -> Schedule | None:
        """The current schedule ``schedule_id`` of ``tenant``, or None (an id of another tenant too).

        From the history store, at least at the version this client last got accepted (it waits
        for the indexer: read-your-writes). With no store indexed for this namespace it reads the
        one partition of ``ksched.schedules.<tenant>`` the id is keyed to instead (the broker's
        ACLs then decide what a tenant may read).
        """
        from scheduler.client.topics import read_schedule

        try:
            self.history.store()
        except HistoryNotIndexed:
            return read_schedule(self.settings, tenant, schedule_id, self.timeout_s, conn=self.conn)
        return self.history.schedule(self._may_read(tenant), schedule_id)

    def list(
        self, tenant: str, *, state: str | None = None, handler: str | None = None,
        cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[Schedule]:
        """One page of ``tenant``'s schedules by id (filtered by ``state`` / ``handler``); pass the
        page's ``next_cursor`` for the next. Needs the history store (:class:`HistoryNotIndexed`)."""
        return self.history.list(self._may_read(tenant), state=state, handler=handler, cursor=cursor,
                                 limit=limit)

    def describe(
        self, tenant: str, schedule_id: str, *, next_count: int = 5, last_count: int = 10,
    ) -> ScheduleDescription:
        """Spec, state, every version with its effective interval, the next fire times and the last
        occurrences with their states and lag; :class:`ScheduleNotFound` if there is none."""
        return self.history.describe(self._may_read(tenant), schedule_id, next_count=next_count,
                                     last_count=last_count)

    def occurrence(self, tenant: str, occurrence_id: str) -> OccurrenceDetail:
        """An occurrence and its whole attempt history; :class:`OccurrenceNotFound` if there is none."""
        return self.history.occurrence(self._may_read(tenant), occurrence_id)

    def occurrences(
        self, tenant: str, *, from_ms: int, to_ms: int, schedule_id: str | None = None,
        state: str | None = None, cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[OccurrenceView]:
        """One page of ``tenant``'s occurrences with ``from_ms <= scheduled_for_ms < to_ms``."""
        return self.history.occurrences(self._may_read(tenant), from_ms=from_ms, to_ms=to_ms,
                                        schedule_id=schedule_id, state=state, cursor=cursor, limit=limit)
