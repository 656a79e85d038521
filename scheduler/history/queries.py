"""The history store's read queries: one SQL text per question, for both backends.

:class:`StoreQueries` is mixed into :class:`~scheduler.history.base.HistoryStore`, so every
store (SQLite, PostgreSQL) answers them through its one primitive :meth:`StoreQueries.select`;
the SDK, the CLI and the HTTP API call exactly these. Contract of every method:

* **Tenancy.** Each takes the asking tenant and filters on it in SQL: another tenant's
  schedule or occurrence id is answered exactly like an unknown one (None / an empty page).
* **Paging.** Listings are keyset-paginated (``docs/history.md``, "Queries"): a page holds at
  most ``limit`` items (1..:data:`MAX_LIMIT`) and an opaque ``next_cursor`` (None on the last
  page); a cursor from another listing is refused with a ValueError naming it.
* **Freshness.** The store trails the topics by the indexer's delay (about a second); the
  SDK adds read-your-writes on top (``scheduler/client/queries.py``).

The pure parts (rows → values, cursors, next fire times) are in ``scheduler/history/answers.py``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from scheduler.history import answers
from scheduler.history.sql import POSTGRES, Dialect
from scheduler.history.views import (
    ChangeView,
    DeadLetterView,
    OccurrenceDetail,
    OccurrenceView,
    Page,
    VersionView,
)
from scheduler.records import Schedule

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100

_OCC_COLS = ("occurrence_id, schedule_id, version, scheduled_for_ms, available_at_ms, enqueued_at_ms,"
             " state, state_at_ms, attempt_count, reason")
_ATT_COLS = ("attempt_no, token, worker_id, started_at_ms, last_heartbeat_ms, finished_at_ms, result,"
             " retryable, error_class, error_message")
_DLQ_COLS = ("occurrence_id, schedule_id, version, scheduled_for_ms, handler, attempts, last_error_class,"
             " last_error_message, dead_at_ms, reason, dlq_partition, dlq_offset")
_CHG_COLS = "version, command, state, request_id, applied_at_ms, effective_from_ms"
_LAST_CHANGE = (" FROM schedule_changes ch WHERE ch.schedule_id = {a}.schedule_id"
                " AND ch.version = {a}.version"
                " ORDER BY ch.applied_at_ms DESC, ch.recorded_at_ms DESC LIMIT 1")


def state_of(alias: str) -> str:
    """The state of the version row ``alias``: COMPLETED (the processor's own change, no command)
    or else the state of its latest accepted command; the row's rank-merged state until that is
    indexed. (PAUSE / RESUME keep the version, so a rank merge alone would stay PAUSED.)"""
    return (f"CASE WHEN {alias}.state = 'COMPLETED' THEN 'COMPLETED' ELSE"
            f" COALESCE((SELECT ch.state{_LAST_CHANGE.format(a=alias)}), {alias}.state) END")


def _last_at(command: str) -> str:
    return (f"(SELECT max(ch.applied_at_ms) FROM schedule_changes ch WHERE ch.schedule_id = s.schedule_id"
            f" AND ch.command = '{command}')")


_VER_COLS = (f"s.schedule_id, s.version, {state_of('s')}, s.command, s.request_id, s.applied_at_ms,"
             " s.effective_from_ms, s.effective_until_ms, s.spec_json")


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit {limit} is out of range: pass 1 to {MAX_LIMIT}")
    return limit


def _json_text(d: Dialect, expr: str, key: str) -> str:
    """The text value of top-level ``key`` of the JSON text ``expr`` (the one dialect difference)."""
    if d == POSTGRES:
        return f"(CAST({expr} AS json) ->> '{key}')"
    return f"json_extract({expr}, '$.{key}')"


def _optional(where: list[str], params: list[object], mark: str, filters: list[tuple[str, object]]) -> None:
    """Add ``expr = value`` to ``where`` for each filter whose value is given (not None)."""
    for expr, value in filters:
        if value is not None:
            where.append(f"{expr} = {mark}")
            params.append(value)


def latest_schedules(
    d: Dialect, tenant: str, *, schedule_id: str | None = None, state: str | None = None,
    handler: str | None = None, after: str | None = None, limit: int = DEFAULT_LIMIT,
) -> tuple[str, list[object]]:
    """The latest version of each of ``tenant``'s schedules (one, with ``schedule_id``), with the
    spec in force (the latest non-NULL ``spec_json`` up to it), the creation time and the
    idempotency key; schedules whose spec is not indexed yet are left out. Ordered by id, after
    ``after``, at most ``limit`` rows."""
    m = d.mark
    spec = ("(SELECT p.spec_json FROM schedules p WHERE p.schedule_id = s.schedule_id AND p.version <="
            " s.version AND p.spec_json IS NOT NULL ORDER BY p.version DESC LIMIT 1)")
    inner = (
        f"SELECT s.schedule_id, s.version, s.tenant, {state_of('s')} AS state, s.effective_from_ms,"
        f" COALESCE((SELECT ch.request_id{_LAST_CHANGE.format(a='s')}), s.request_id) AS request_eff,"
        " (SELECT max(ch.applied_at_ms) FROM schedule_changes ch WHERE ch.schedule_id = s.schedule_id)"
        f" AS updated_eff, {spec} AS spec_eff,"
        " (SELECT min(COALESCE(c.created_at_ms, c.applied_at_ms)) FROM schedules c"
        " WHERE c.schedule_id = s.schedule_id) AS created_eff,"
        " (SELECT max(k.idempotency_key) FROM schedules k WHERE k.schedule_id = s.schedule_id) AS key_eff,"
        f" COALESCE({_last_at('PAUSE')}, s.paused_at_ms), COALESCE({_last_at('RESUME')}, s.resumed_at_ms)"
        " FROM schedules s"
        f" WHERE s.tenant = {m} AND s.version = (SELECT max(v.version) FROM schedules v"
        " WHERE v.schedule_id = s.schedule_id)"
    )
    params: list[object] = [tenant]
    if schedule_id is not None:
        inner += f" AND s.schedule_id = {m}"
        params.append(schedule_id)
    where = ["q.spec_eff IS NOT NULL"]
    _optional(where, params, m, [("q.state", state), (_json_text(d, "q.spec_eff", "handler"), handler)])
    if after is not None:
        where.append(f"q.schedule_id > {m}")
        params.append(after)
    params.append(limit)
    text = f"SELECT * FROM ({inner}) q WHERE {' AND '.join(where)} ORDER BY q.schedule_id LIMIT {m}"
    return text, params


def occurrences_query(
    d: Dialect, tenant: str, *, schedule_id: str | None, from_ms: int, to_ms: int,
    state: str | None, after: tuple[int, str] | None, limit: int,
) -> tuple[str, list[object]]:
    """``tenant``'s occurrences (of one schedule, or all) with ``from_ms <= scheduled_for_ms <
    to_ms``, ordered by ``(scheduled_for_ms, occurrence_id)``, after the cursor ``after``."""
    m = d.mark
    where = [f"tenant = {m}", f"scheduled_for_ms >= {m}", f"scheduled_for_ms < {m}"]
    # the cursor also raises the window's lower bound: an index range, not a scan of every page before
    params: list[object] = [tenant, from_ms if after is None else max(from_ms, after[0]), to_ms]
    _optional(where, params, m, [("schedule_id", schedule_id), ("state", state)])
    if after is not None:
        where.append(f"(scheduled_for_ms > {m} OR (scheduled_for_ms = {m} AND occurrence_id > {m}))")
        params.extend([after[0], after[0], after[1]])
    params.append(limit)
    text = (f"SELECT {_OCC_COLS} FROM occurrences WHERE {' AND '.join(where)}"
            f" ORDER BY scheduled_for_ms, occurrence_id LIMIT {m}")
    return text, params


class StoreQueries:
    """The read queries of a history store (see the module docstring for their contract)."""

    @property
    @abstractmethod
    def dialect(self) -> Dialect:
        """The store's SQL dialect."""

    @abstractmethod
    def select(self, query: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        """Run one read-only ``query`` (placeholders of :attr:`dialect`) and return its rows; leaves
        no transaction open."""

    def schedule(self, tenant: str, schedule_id: str) -> Schedule | None:
        """The current ``Schedule`` of ``schedule_id`` for ``tenant`` (rebuilt from its versions), or
        None when ``tenant`` has no such schedule (or the store has not indexed it yet)."""
        text, params = latest_schedules(self.dialect, tenant, schedule_id=schedule_id, limit=1)
        rows = self.select(text, params)
        return answers.schedule_record(rows[0]) if rows else None

    def schedules(
        self, tenant: str, *, state: str | None = None, handler: str | None = None,
        cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[Schedule]:
        """One page of ``tenant``'s schedules in id order, optionally only those in ``state`` and/or
        whose current spec targets ``handler``."""
        after = answers.decode_cursor(cursor, "schedules")
        text, params = latest_schedules(
            self.dialect, tenant, state=state, handler=handler,
            after=None if after is None else after[1], limit=check_limit(limit) + 1,
        )
        records = [answers.schedule_record(r) for r in self.select(text, params)]
        return answers.page(records, limit, lambda s: answers.encode_cursor("schedules", 0, s.schedule_id))

    def versions(self, tenant: str, schedule_id: str) -> tuple[VersionView, ...]:
        """Every indexed version of ``tenant``'s ``schedule_id``, oldest first (empty: none)."""
        m = self.dialect.mark
        rows = self.select(
            f"SELECT {_VER_COLS} FROM schedules s WHERE s.tenant = {m} AND s.schedule_id = {m}"
            " ORDER BY s.version",
            [tenant, schedule_id],
        )
        return answers.versions(rows)

    def changes(self, tenant: str, schedule_id: str) -> tuple[ChangeView, ...]:
        """Every indexed accepted command of ``tenant``'s ``schedule_id``, oldest first."""
        m = self.dialect.mark
        rows = self.select(
            f"SELECT {_CHG_COLS} FROM schedule_changes WHERE tenant = {m} AND schedule_id = {m}"
            " ORDER BY version, applied_at_ms, recorded_at_ms",
            [tenant, schedule_id],
        )
        return tuple(answers.change(r) for r in rows)

    def has_change(self, tenant: str, schedule_id: str, request_id: str) -> bool:
        """Whether the accepted command ``request_id`` of ``schedule_id`` is indexed (read-your-writes)."""
        m = self.dialect.mark
        return bool(self.select(
            f"SELECT 1 FROM schedule_changes WHERE tenant = {m} AND schedule_id = {m} AND request_id = {m}",
            [tenant, schedule_id, request_id],
        ))

    def occurrence(self, tenant: str, occurrence_id: str) -> OccurrenceDetail | None:
        """``tenant``'s occurrence ``occurrence_id`` with every attempt, or None."""
        m = self.dialect.mark
        occ = self.select(
            f"SELECT {_OCC_COLS} FROM occurrences WHERE tenant = {m} AND occurrence_id = {m}",
            [tenant, occurrence_id],
        )
        if not occ:
            return None
        attempts = self.select(
            f"SELECT {_ATT_COLS} FROM attempts WHERE tenant = {m} AND occurrence_id = {m}"
            " ORDER BY attempt_no, started_at_ms, token",
            [tenant, occurrence_id],
        )
        return OccurrenceDetail(occurrence=answers.occurrence(occ[0]),
                                attempts=tuple(answers.attempt(a) for a in attempts))

    def occurrences(
        self, tenant: str, *, schedule_id: str | None = None, from_ms: int, to_ms: int,
        state: str | None = None, cursor: str | None = None, limit: int = DEFAULT_LIMIT,
    ) -> Page[OccurrenceView]:
        """One page of ``tenant``'s occurrences with ``from_ms <= scheduled_for_ms < to_ms`` (of
        ``schedule_id`` when given, in ``state`` when given), by scheduled time then id."""
        if to_ms < from_ms:
            raise ValueError(f"the window [{from_ms}, {to_ms}) ends before it starts: pass to >= from")
        text, params = occurrences_query(
            self.dialect, tenant, schedule_id=schedule_id, from_ms=from_ms, to_ms=to_ms, state=state,
            after=answers.decode_cursor(cursor, "occurrences"), limit=check_limit(limit) + 1,
        )
        views = [answers.occurrence(r) for r in self.select(text, params)]
        return answers.page(
            views, limit, lambda o: answers.encode_cursor("occurrences", o.scheduled_for_ms, o.occurrence_id)
        )

    def last_occurrences(self, tenant: str, schedule_id: str, n: int) -> tuple[OccurrenceView, ...]:
        """The ``n`` latest occurrences of ``tenant``'s ``schedule_id`` by scheduled time, newest first."""
        m = self.dialect.mark
        rows = self.select(
            f"SELECT {_OCC_COLS} FROM occurrences WHERE tenant = {m} AND schedule_id = {m}"
            f" ORDER BY scheduled_for_ms DESC, occurrence_id DESC LIMIT {m}",
            [tenant, schedule_id, check_limit(n)],
        )
        return tuple(answers.occurrence(r) for r in rows)

    def dead_letters(self, tenant: str, *, cursor: str | None = None,
                     limit: int = DEFAULT_LIMIT) -> Page[DeadLetterView]:
        """One page of ``tenant``'s DLQ, one item per dead occurrence (its latest death), in order
        of death then id (the index ``dlq_entries_death``)."""
        m = self.dialect.mark
        after = answers.decode_cursor(cursor, "dlq")
        where = f"tenant = {m}"
        params: list[object] = [tenant]
        if after is not None:
            where += f" AND (dead_at_ms > {m} OR (dead_at_ms = {m} AND occurrence_id > {m}))"
            params += [after[0], after[0], after[1]]
        rows = self.select(
            f"SELECT {_DLQ_COLS} FROM dlq_entries WHERE {where} ORDER BY dead_at_ms, occurrence_id LIMIT {m}",
            [*params, check_limit(limit) + 1],
        )
        views = [answers.dead_letter(r) for r in rows]
        return answers.page(views, limit,
                            lambda d: answers.encode_cursor("dlq", d.dead_at_ms, d.occurrence_id))

    def dlq_location(self, tenant: str, occurrence_id: str) -> tuple[int, int] | None:
        """``(partition, offset)`` of the latest dead-letter record of ``tenant``'s
        ``occurrence_id`` in its DLQ topic, or None when the store holds none (yet)."""
        m = self.dialect.mark
        rows = self.select(
            f"SELECT dlq_partition, dlq_offset FROM dlq_entries WHERE tenant = {m} AND occurrence_id = {m}",
            [tenant, occurrence_id],
        )
        return (int(rows[0][0]), int(rows[0][1])) if rows else None  # type: ignore[call-overload]

    def indexed_to(self, topic: str) -> dict[int, int]:
        """partition -> the next offset of ``topic`` some indexer group of this store has stored
        (the furthest of them): every record before it is in the store."""
        m = self.dialect.mark
        rows = self.select(
            f"SELECT partition, max(next_offset) FROM consumer_offsets WHERE topic = {m} GROUP BY partition",
            [topic],
        )
        return {int(p): int(n) for p, n in rows}  # type: ignore[call-overload]

    def indexed(self, namespace: str) -> bool:
        """Whether an indexer has stored offsets of ``namespace``'s topics here (has fed this store)."""
        m = self.dialect.mark
        prefix = namespace + "."
        rows = self.select(f"SELECT count(*) FROM consumer_offsets WHERE substr(topic, 1, {m}) = {m}",
                           [len(prefix), prefix])
        return bool(rows and int(rows[0][0]))  # type: ignore[call-overload]
