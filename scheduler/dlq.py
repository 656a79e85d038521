"""The dead-letter queue of a tenant (``ksched.dlq.<tenant>``): find, list and replay.

A replay puts the dead occurrence back on the tenant's dispatch topic with the
same occurrence id and the next attempt number, keyed by its schedule id (so
on the partition the schedule's processor shard owns). The processor adopts
the replayed attempt from its reports: an attempt number above the one that
died is current. Replaying twice dispatches twice; the workers' idempotency
store makes the second a no-op if the first succeeded.

Lists come from the history store (``dlq_entries``: each occurrence's latest death, with the
partition and offset of its record); a replay reads each listed entry's one record, never the
whole topic (DESIGN.md §6). :class:`DlqTopic` reads the topic's end offsets first, as the caller,
so Kafka's ACLs decide who may look, and the store is trusted only once it has indexed to them.
"""

from __future__ import annotations

import time

from confluent_kafka import Message, TopicPartition

from scheduler.history.queries import MAX_LIMIT, StoreQueries
from scheduler.history.views import DeadLetterView
from scheduler.kafka.clients import consumer, producer
from scheduler.kafka.connection import KafkaConnection
from scheduler.kafka.reader import all_partitions, read_one, read_to_end, watermarks
from scheduler.records import DlqEntry, Occurrence, RecordDecodeError, decode, encode
from scheduler.settings import Settings
from scheduler.topology import topic_name


class NotInDlq(LookupError):
    """The tenant's DLQ holds no entry of the occurrence (the store is caught up with the topic), or
    the entry's record is gone (retention); ``str()`` says which."""


class DlqNotIndexedYet(TimeoutError):
    """The history store has not indexed the tenant's DLQ topic to its end: the entry may be in the
    part not indexed yet. Retry in a moment (is ``ksched history`` running?)."""


_FETCH_WAIT_MS = 1


class _Found(Exception):
    """Stops a read at its first record."""


class DlqTopic:
    """A tenant's DLQ topic as one caller reads it: its end offsets, then single records.

    Opening it reads the end offset of every partition as ``conn``'s principal (default: the
    admin), before anything else: Kafka's ACLs decide whether the caller may read the tenant's
    DLQ (:class:`~scheduler.kafka.errors.AccessDenied`, a refused login, or LookupError for a
    topic that does not exist), never the history store. :attr:`ends` is that snapshot: "indexed
    to the end" means to it. Close it (or use it as a context manager)."""

    def __init__(self, settings: Settings, tenant: str, conn: KafkaConnection | None = None) -> None:
        self.tenant = tenant
        self.topic = topic_name(settings, "dlq", tenant)
        # a fetch at a partition's end is held by the broker up to fetch.wait.max.ms (500 ms) and
        # the next record's fetch waits behind it: one record at a time wants short holds
        self._c = consumer(conn or settings.kafka(), None, **{"enable.partition.eof": True,
                                                              "fetch.wait.max.ms": _FETCH_WAIT_MS})
        try:
            tps = all_partitions(self._c, self.topic)
            self.ends = {tp.partition: watermarks(self._c, tp)[1] for tp in tps}
        except BaseException:
            self._c.close()
            raise

    def __enter__(self) -> DlqTopic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._c.close()

    def behind(self, store: StoreQueries) -> bool:
        """Whether the store lacks a committed record before :attr:`ends` (reads at most one record
        per partition the store has not indexed to its end: transaction markers and aborted
        records are skipped by the client, so they never count)."""

        def stop(m: Message) -> None:
            raise _Found

        indexed = store.indexed_to(self.topic)
        tps = [TopicPartition(self.topic, p, indexed.get(p, 0)) for p, end in self.ends.items()
               if indexed.get(p, 0) < end]
        try:
            read_to_end(self._c, tps, stop, timeout_s=10, poll_s=0.05, stop_before=self.ends)
        except _Found:
            return True
        return False

    def wait_indexed(self, store: StoreQueries, wait_s: float = 2.0) -> None:
        """Return once the store holds every record before :attr:`ends`; :class:`DlqNotIndexedYet`
        after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while self.behind(store):
            if time.monotonic() >= deadline:
                raise DlqNotIndexedYet(self.not_indexed(""))
            time.sleep(0.1)

    def not_indexed(self, what: str) -> str:
        return (f"{what}the history store has not indexed the DLQ of tenant {self.tenant} ({self.topic}) to "
                "its end yet (not indexed yet): retry in a second; if this lasts, check that "
                "`ksched history` is running")

    def read_at(self, partition: int, offset: int) -> DlqEntry | None:
        """The DLQ entry at ``partition``/``offset`` (one fetch of one record), None if gone."""
        m = read_one(self._c, TopicPartition(self.topic, partition, offset))
        try:
            return None if m is None else decode(m.value() or b"", DlqEntry)
        except RecordDecodeError:
            return None

    def find(self, store: StoreQueries, occurrence_id: str, *, wait_s: float = 2.0) -> DlqEntry:
        """The latest dead-letter entry of the tenant's ``occurrence_id``: its partition and offset
        from the store, then that one record from the topic.

        Not in the store: :class:`NotInDlq` if the store holds every record before :attr:`ends`
        (:meth:`behind`), else, after waiting up to ``wait_s`` for the indexer,
        :class:`DlqNotIndexedYet`. Never reads the whole topic."""
        deadline = time.monotonic() + wait_s
        while (where := store.dlq_location(self.tenant, occurrence_id)) is None:
            if not self.behind(store):
                raise NotInDlq(f"occurrence_id {occurrence_id!r} is not in the DLQ of tenant {self.tenant}")
            if time.monotonic() >= deadline:
                raise DlqNotIndexedYet(self.not_indexed(f"occurrence_id {occurrence_id!r}: "))
            time.sleep(0.1)
        return self.entry(occurrence_id, *where)

    def entry(self, occurrence_id: str, partition: int, offset: int) -> DlqEntry:
        """The record the store located for ``occurrence_id``; :class:`NotInDlq` when it is gone."""
        found = self.read_at(partition, offset)
        if found is None or found.occurrence_id != occurrence_id or found.tenant != self.tenant:
            raise NotInDlq(f"occurrence_id {occurrence_id!r}: its DLQ record ({self.topic} partition "
                           f"{partition} offset {offset}) is gone (past the topic's retention)")
        return found


def find_dead(
    settings: Settings, store: StoreQueries, tenant: str, occurrence_id: str, *, wait_s: float = 2.0,
    conn: KafkaConnection | None = None,
) -> DlqEntry:
    """:meth:`DlqTopic.find` on a :class:`DlqTopic` opened for this one look-up."""
    with DlqTopic(settings, tenant, conn) as dlq:
        return dlq.find(store, occurrence_id, wait_s=wait_s)


def every_dead(dlq: DlqTopic, store: StoreQueries) -> list[DeadLetterView]:
    """Every item of the store's listing of ``dlq``'s tenant (the latest death of each occurrence,
    oldest death first), read to its last page before the caller replays any: a replay that dies
    again while this runs is not listed, so not replayed twice. An occurrence whose death moves
    to a later page while the indexer runs is listed once (its first sighting)."""
    out: dict[str, DeadLetterView] = {}
    cursor: str | None = None
    while True:
        page = store.dead_letters(dlq.tenant, cursor=cursor, limit=MAX_LIMIT)
        for d in page.items:
            out.setdefault(d.occurrence_id, d)
        if (cursor := page.next_cursor) is None:
            return list(out.values())


def replay(
    settings: Settings, entries: list[DlqEntry], now_ms: int, conn: KafkaConnection | None = None
) -> list[Occurrence]:
    """Dispatch each entry's occurrence again (same occurrence id, attempt = attempts + 1), as
    ``conn``'s principal (default: the admin)."""
    p = producer(conn or settings.kafka())
    sent: list[Occurrence] = []
    for d in entries:
        occ = Occurrence(
            occurrence_id=d.occurrence_id,
            schedule_id=d.schedule_id,
            tenant=d.tenant,
            version=d.version,
            scheduled_for_ms=d.scheduled_for_ms,
            available_at_ms=d.available_at_ms,
            enqueued_at_ms=now_ms,
            attempt=d.attempts + 1,
            lane="RETRY",
            handler=d.handler,
            payload=d.payload,
        )
        p.produce(topic_name(settings, "dispatch", d.tenant), encode(occ), d.schedule_id.encode())
        sent.append(occ)
    if p.flush(30) > 0:
        raise TimeoutError("replay: the broker did not acknowledge every record within 30 s")
    return sent
