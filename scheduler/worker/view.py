"""A local, continuously updated view of one tenant's ``ksched.versions.<tenant>``.

The compacted topic holds the current version of every schedule of the tenant
and the state a recheck acts on (DESIGN.md §3; a tick's completion is not
written, below). A background thread reads it with ``assign()`` on
every partition from the beginning (``read_committed``, no consumer group, no
commits) and keeps ``schedule_id -> (version, state)``; a tombstone deletes.
:meth:`VersionsView.wait_caught_up` returns once every partition has been read
to its end as it was at start-up, so a worker runs nothing on a view older
than the moment it started.

The pre-effect recheck (:meth:`VersionsView.verdict`):

- occurrence version < the view's version       -> not run: "superseded by version N"
- same version and state CANCELED / PAUSED      -> not run: "schedule canceled" / "schedule paused"
- same version, ``scheduled_for`` at or before the
  end of the schedule's last pause              -> not run: "not run: schedule was paused at ..."
- a schedule absent from the view, or a view version *lower* than the
  occurrence's                                  -> run.

Absent or older is run on purpose: the version record and the dispatch record
travel on different topics, and the processor writes the version record of a
new schedule in the tick that applies its CREATE, so a worker may see the
occurrence first. Refusing it would turn every lagging view into a lost run; a
missed cancel, by contrast, is the same race any scheduler has between cancel
and start, and the cancellation flag still reaches the running handler. It
follows that the processor must not tombstone a schedule's version record
while occurrences of it can still be on the dispatch topic. COMPLETED runs:
a one-time schedule completes in the tick that emits its only occurrence. So the
processor does not write a tick's completion here (it would change no verdict,
and every worker process would apply one per occurrence of a one-time burst):
the view keeps the version's state before it, ACTIVE. A COMPLETED record still
comes from a command that leaves a schedule no fire time (a one-time schedule
created or updated into the past, a resume after its last one) and from older
processors, and is applied like any other.

A pause drops the schedule's pending work and resume fires nothing for the
paused span (DESIGN.md §4), but a dispatch record emitted before the pause
stays on the topic: the version record carries the last pause
(``paused_at_ms``, ``resumed_at_ms``, VersionRecord v2), and an occurrence
scheduled at or before the resume was pending through the pause and is not
run: nothing is emitted during a pause, and after it the processor fires only
times strictly after its resume second (both instants are whole seconds of
the processor's clock, so a pause within the second of a firing still counts).
One span is enough: every occurrence before an earlier pause is also before
the last resume.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from scheduler.kafka.clients import consumer
from scheduler.kafka.reader import all_partitions
from scheduler.principals import as_tenant
from scheduler.records import RecordDecodeError, VersionRecord, decode_fields
from scheduler.records.worker_scan import scan_version
from scheduler.settings import Settings
from scheduler.topology import topic_name
from scheduler.vocabulary import ScheduleState
from scheduler.worker.errors import TopicMissingError

log = logging.getLogger("ksched.worker.view")

BLOCKING_STATES: dict[str, str] = {
    ScheduleState.CANCELED.value: "schedule canceled", ScheduleState.PAUSED.value: "schedule paused",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class VersionState:
    version: int
    state: str
    paused_at_ms: int | None = None  # the schedule's last pause, if it was resumed since
    resumed_at_ms: int | None = None


def version_state(
    version: int, state: str, paused_at_ms: int | None = None, resumed_at_ms: int | None = None
) -> VersionState:
    """Shared instances: millions of schedules hold a handful of distinct (version, state); only
    schedules resumed after a pause hold instants of their own."""
    if paused_at_ms is None or resumed_at_ms is None or resumed_at_ms < paused_at_ms:
        return _shared_state(version, state, None, None)  # no completed pause: nothing to refuse
    return _shared_state(version, state, paused_at_ms, resumed_at_ms)


@functools.lru_cache(maxsize=4096)
def _shared_state(version: int, state: str, paused_at_ms: int | None, resumed_at_ms: int | None
                  ) -> VersionState:
    return VersionState(version=version, state=state, paused_at_ms=paused_at_ms, resumed_at_ms=resumed_at_ms)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms // 1000))


def verdict(current: VersionState | None, version: int, scheduled_for_ms: int | None = None) -> str | None:
    """Why an occurrence of ``version`` at ``scheduled_for_ms`` must not run given ``current``,
    or None to run it."""
    if current is None:
        return None  # not (yet) in the view: run (module docstring)
    if current.version > version:
        return f"superseded by version {current.version}"
    if current.version == version:
        blocked = BLOCKING_STATES.get(current.state)
        if blocked is not None:
            return blocked
        resumed = current.resumed_at_ms
        if resumed is not None and current.paused_at_ms is not None and scheduled_for_ms is not None \
                and scheduled_for_ms <= resumed:  # the processor fires nothing at or before its resume second
            return (f"not run: schedule was paused at {_utc(current.paused_at_ms)} while this occurrence "
                    f"({_utc(scheduled_for_ms)}) was pending; resumed at {_utc(resumed)}")
    return None  # the view has not seen this version yet: run (module docstring)


def partitions_of(c: Consumer, topic: str, tenant: str) -> list[int]:
    """The partition ids of ``topic``, or :class:`TopicMissingError` naming the fix."""
    try:
        return [tp.partition for tp in all_partitions(c, topic)]
    except LookupError:
        raise TopicMissingError(
            f"topic {topic} does not exist: register the tenant with `ksched tenants add {tenant}` "
            "(or run `ksched topics apply`)"
        ) from None


class VersionsView:
    """Run with :meth:`start`; :meth:`verdict` is safe from any thread.

    ``on_change(schedule_id, state)`` is called on the view's thread for every
    record applied after start (``state`` None for a tombstone); the worker
    uses it to set the cancellation flag of running handlers.
    """

    def __init__(
        self,
        settings: Settings,
        tenant: str,
        *,
        on_change: Callable[[str, VersionState | None], None] | None = None,
        on_malformed: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic_name(settings, "versions", tenant)
        self.tenant = tenant
        self._settings = settings
        self._on_change = on_change
        self._on_malformed = on_malformed
        self._states: dict[str, VersionState] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._pending: set[int] = set()  # partitions not yet read to their end once
        self.error: BaseException | None = None  # set when the reader thread died

    def start(self) -> None:
        """Assign every partition from the beginning and start the reader thread.

        Raises :class:`TopicMissingError` when the topic does not exist."""
        c = consumer(
            as_tenant(self._settings, self.tenant),  # the tenant's own principal (docs/security.md)
            None,
            **{
                "enable.partition.eof": True,  # how catching up to the end is detected
                "fetch.wait.max.ms": 50,
                "client.id": f"ksched-view-{self.tenant}",
            },
        )
        try:
            parts = partitions_of(c, self.topic, self.tenant)
        except BaseException:
            c.close()
            raise
        self._pending = set(parts)
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        self._consumer = c
        self._thread = threading.Thread(target=self._run, name=f"versions-{self.tenant}", daemon=True)
        self._thread.start()

    def set_on_change(self, on_change: Callable[[str, VersionState | None], None] | None) -> None:
        self._on_change = on_change

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        """True once every partition was read to its end (as of start-up)."""
        return self._caught_up.wait(timeout)

    @property
    def caught_up(self) -> bool:
        return self._caught_up.is_set()

    def get(self, schedule_id: str) -> VersionState | None:
        with self._lock:
            return self._states.get(schedule_id)

    def states(self, schedule_ids: Iterable[str]) -> list[VersionState | None]:
        """:meth:`get` for each of ``schedule_ids``, under one lock (a fast batch's recheck)."""
        with self._lock:
            get = self._states.get
            return [get(sid) for sid in schedule_ids]

    def verdict(self, schedule_id: str, version: int, scheduled_for_ms: int | None = None) -> str | None:
        """None to run an occurrence of ``schedule_id`` at ``version`` scheduled for
        ``scheduled_for_ms``, else why not."""
        return verdict(self.get(schedule_id), version, scheduled_for_ms)

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        c = self._consumer
        assert c is not None
        try:
            while not self._stop.is_set():
                for m in c.consume(1000, 0.1):
                    self._apply(m)
        except Exception as exc:  # a fatal client error: the worker must not go on blind
            log.error("versions view of %s stopped: %s", self.tenant, exc)
            self.error = exc
        finally:
            c.close()

    def _apply(self, m: Message) -> None:
        err = m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._pending.discard(m.partition() or 0)
                if not self._pending:
                    self._caught_up.set()
            else:
                log.warning("versions view of %s: %s", self.tenant, err)
            return
        key, value = m.key(), m.value()
        if value is None:  # tombstone: the schedule is gone from the view
            if key is None:
                return
            sid = key.decode(errors="replace")
            with self._lock:
                self._states.pop(sid, None)
            self._notify(sid, None)
            return
        try:
            # start-up reads every schedule of the tenant: the hand reader, else the field dict
            fields = scan_version(value)
            if fields is None:
                rec = decode_fields(value, VersionRecord)  # a v1 record resolves with both instants null
                fields = (rec["schedule_id"], rec["tenant"], rec["version"], rec["state"],
                          rec["paused_at_ms"], rec["resumed_at_ms"])
        except RecordDecodeError as exc:
            self._malformed(m, str(exc))
            return
        sid, tenant, version, st, paused_at, resumed_at = fields
        if tenant != self.tenant:
            self._malformed(m, f"record of tenant {tenant!r}")
            return
        state = version_state(version, st, paused_at, resumed_at)
        with self._lock:
            self._states[sid] = state
        self._notify(sid, state)

    def _notify(self, sid: str, state: VersionState | None) -> None:
        on_change = self._on_change  # read once: a stopping worker clears it from its own thread
        if on_change is not None and self._caught_up.is_set():
            on_change(sid, state)

    def _malformed(self, m: Message, why: str) -> None:
        log.warning("versions view: skipped %s[%s]@%s: %s", m.topic(), m.partition(), m.offset(), why)
        if self._on_malformed is not None:
            self._on_malformed()
