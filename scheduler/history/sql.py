"""The history store's SQL, written once for both dialects (SQLite 3.24+, PostgreSQL 10+).

The ``ON CONFLICT DO UPDATE`` clauses are the SQL form of the merge rules in
:mod:`scheduler.history.rows` (read that docstring first); ``SET`` expressions see the row's
old values, so every column of one winner is taken together.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.history.rows import (
    ATTEMPT_COLUMNS,
    CHANGE_COLUMNS,
    DLQ_COLUMNS,
    OCCURRENCE_COLUMNS,
    VERSION_COALESCED,
    VERSION_COLUMNS,
)

#: Every table of the store, in the order ``reset`` empties them.
TABLES = ("occurrences", "attempts", "schedules", "consumer_offsets", "history_skipped", "schedule_changes",
          "dlq_entries")


@dataclass(frozen=True)
class Dialect:
    """What differs between the backends: placeholders, types, the two-argument max, collation."""

    mark: str  # "?" or "%s"
    bigint: str
    boolean: str
    greatest: str  # "max" (SQLite's scalar max) or "GREATEST"
    collate: str  # appended to a text operand compared by code point
    fill: str = ""  # storage parameters of the tables updated in place (PostgreSQL: room for HOT updates)

    def text(self, expr: str) -> str:
        return f"{expr}{self.collate}"


SQLITE = Dialect(mark="?", bigint="INTEGER", boolean="INTEGER", greatest="max", collate="")
POSTGRES = Dialect(mark="%s", bigint="bigint", boolean="boolean", greatest="GREATEST", collate=' COLLATE "C"',
                   fill=" WITH (fillfactor = 70)")


def ddl(d: Dialect) -> list[str]:
    """CREATE TABLE IF NOT EXISTS of every table."""
    b, t = d.bigint, "text"
    return [
        "CREATE TABLE IF NOT EXISTS occurrences ("
        f" occurrence_id {t} PRIMARY KEY, tenant {t} NOT NULL, schedule_id {t} NOT NULL,"
        f" version {b} NOT NULL, scheduled_for_ms {b} NOT NULL, available_at_ms {b},"
        f" enqueued_at_ms {b}, state {t} NOT NULL, state_rank {b} NOT NULL, state_at_ms {b} NOT NULL,"
        f" attempt_count {b} NOT NULL, reason {t},"
        # UNIQUE (schedule_id, version, scheduled_for) with time before version: the same constraint
        # (a set of columns), and its index also serves one schedule's occurrences by time (queries.py),
        # which had an index of their own: one index fewer to maintain per row (a rebuild's cost).
        f" UNIQUE (schedule_id, scheduled_for_ms, version)){d.fill}",
        "CREATE INDEX IF NOT EXISTS occurrences_tenant_time ON occurrences (tenant, scheduled_for_ms)",
        "CREATE TABLE IF NOT EXISTS attempts ("
        f" occurrence_id {t} NOT NULL, attempt_no {b} NOT NULL, token {t} NOT NULL, tenant {t} NOT NULL,"
        f" schedule_id {t} NOT NULL, worker_id {t} NOT NULL, started_at_ms {b}, last_heartbeat_ms {b},"
        f" finished_at_ms {b}, result {t}, retryable {d.boolean}, error_class {t}, error_message {t},"
        f" PRIMARY KEY (occurrence_id, attempt_no, token)){d.fill}",
        "CREATE TABLE IF NOT EXISTS schedules ("
        f" schedule_id {t} NOT NULL, version {b} NOT NULL, tenant {t} NOT NULL, state {t} NOT NULL,"
        f" effective_from_ms {b} NOT NULL, effective_until_ms {b}, command {t}, request_id {t},"
        f" applied_at_ms {b}, spec_json {t}, created_at_ms {b}, idempotency_key {t}, paused_at_ms {b},"
        f" resumed_at_ms {b}, PRIMARY KEY (schedule_id, version))",
        "CREATE INDEX IF NOT EXISTS schedules_tenant ON schedules (tenant, schedule_id)",
        "CREATE TABLE IF NOT EXISTS consumer_offsets ("
        f" group_id {t} NOT NULL, topic {t} NOT NULL, partition {b} NOT NULL, next_offset {b} NOT NULL,"
        " PRIMARY KEY (group_id, topic, partition))",
        f"CREATE TABLE IF NOT EXISTS history_skipped (reason {t} PRIMARY KEY, records {b} NOT NULL)",
        # added for the queries (issue 12 item 2): every accepted command, PAUSE/RESUME/CANCEL included
        "CREATE TABLE IF NOT EXISTS schedule_changes ("
        f" schedule_id {t} NOT NULL, request_id {t} NOT NULL, tenant {t} NOT NULL, version {b} NOT NULL,"
        f" command {t} NOT NULL, state {t} NOT NULL, applied_at_ms {b} NOT NULL,"
        f" effective_from_ms {b} NOT NULL, recorded_at_ms {b} NOT NULL,"
        " PRIMARY KEY (schedule_id, request_id))",
        # issue 13: a DLQ replay reads one offset of ksched.dlq.<tenant>, found here, not the topic
        "CREATE TABLE IF NOT EXISTS dlq_entries ("
        f" tenant {t} NOT NULL, occurrence_id {t} NOT NULL, schedule_id {t} NOT NULL, version {b} NOT NULL,"
        f" scheduled_for_ms {b} NOT NULL, handler {t} NOT NULL, attempts {b} NOT NULL,"
        f" last_error_class {t}, last_error_message {t}, dead_at_ms {b} NOT NULL, reason {t},"
        f" dlq_partition {b} NOT NULL, dlq_offset {b} NOT NULL, PRIMARY KEY (tenant, occurrence_id))",
        "CREATE INDEX IF NOT EXISTS dlq_entries_death ON dlq_entries (tenant, dead_at_ms, occurrence_id)",
    ]


def _values(d: Dialect, n: int) -> str:
    return ", ".join([d.mark] * n)


def upsert_occurrences(d: Dialect, source: str | None = None) -> str:
    """Upsert of occurrence rows: VALUES (``source`` None) or ``SELECT * FROM source``."""
    o, x = "occurrences", "excluded"
    wins = (
        f"({x}.state_rank, {x}.state_at_ms, {d.text(x + '.state')})"
        f" > ({o}.state_rank, {o}.state_at_ms, {d.text(o + '.state')})"
    )
    taken = ", ".join(
        f"{c} = CASE WHEN {wins} THEN {x}.{c} ELSE {o}.{c} END"
        for c in ("state", "state_rank", "state_at_ms", "reason")
    )
    return (
        f"{_insert('occurrences', OCCURRENCE_COLUMNS, d, source)} ON CONFLICT (occurrence_id) DO UPDATE SET"
        f" available_at_ms = COALESCE({o}.available_at_ms, {x}.available_at_ms),"
        f" enqueued_at_ms = CASE WHEN {o}.enqueued_at_ms IS NULL OR {x}.enqueued_at_ms < {o}.enqueued_at_ms"
        f" THEN {x}.enqueued_at_ms ELSE {o}.enqueued_at_ms END,"
        f" attempt_count = {d.greatest}({o}.attempt_count, {x}.attempt_count), {taken}"
    )


def upsert_attempts(d: Dialect, source: str | None = None) -> str:
    a, x = "attempts", "excluded"
    final = (
        f"({x}.finished_at_ms IS NOT NULL AND ({a}.finished_at_ms IS NULL OR"
        f" ({x}.finished_at_ms, {d.text(f'COALESCE({x}.result, {chr(39) * 2})')})"
        f" > ({a}.finished_at_ms, {d.text(f'COALESCE({a}.result, {chr(39) * 2})')})))"
    )
    taken = ", ".join(
        f"{c} = CASE WHEN {final} THEN {x}.{c} ELSE {a}.{c} END"
        for c in ("finished_at_ms", "result", "retryable", "error_class", "error_message")
    )
    return (
        f"{_insert('attempts', ATTEMPT_COLUMNS, d, source)}"
        " ON CONFLICT (occurrence_id, attempt_no, token) DO UPDATE SET"
        f" worker_id = CASE WHEN {d.text(x + '.worker_id')} > {d.text(a + '.worker_id')}"
        f" THEN {x}.worker_id ELSE {a}.worker_id END,"
        f" started_at_ms = CASE WHEN {a}.started_at_ms IS NULL OR {x}.started_at_ms < {a}.started_at_ms"
        f" THEN {x}.started_at_ms ELSE {a}.started_at_ms END,"
        f" last_heartbeat_ms = CASE WHEN {a}.last_heartbeat_ms IS NULL"
        f" OR {x}.last_heartbeat_ms > {a}.last_heartbeat_ms THEN {x}.last_heartbeat_ms"
        f" ELSE {a}.last_heartbeat_ms END, {taken}"
    )


def _state_rank(expr: str) -> str:
    return (f"CASE {expr} WHEN 'ACTIVE' THEN 0 WHEN 'PAUSED' THEN 1 WHEN 'COMPLETED' THEN 2"
            " WHEN 'CANCELED' THEN 3 ELSE 4 END")


def upsert_versions(d: Dialect) -> str:
    s, x = "schedules", "excluded"
    filled = ", ".join(f"{c} = COALESCE({s}.{c}, {x}.{c})" for c in VERSION_COALESCED)
    return (
        f"{_insert('schedules', VERSION_COLUMNS, d, None)} ON CONFLICT (schedule_id, version) DO UPDATE SET"
        f" state = CASE WHEN {_state_rank(x + '.state')} > {_state_rank(s + '.state')}"
        f" THEN {x}.state ELSE {s}.state END, {filled}"
    )


def insert_changes(d: Dialect) -> str:
    """A change is immutable: the same history entry read twice is one row."""
    insert = _insert("schedule_changes", CHANGE_COLUMNS, d, None)
    return f"{insert} ON CONFLICT (schedule_id, request_id) DO NOTHING"


def upsert_dlq(d: Dialect) -> str:
    """The later death wins (``rows.merge_dlq``): every column of it, taken together."""
    q, x = "dlq_entries", "excluded"
    later = (f"({x}.dead_at_ms, {x}.dlq_partition, {x}.dlq_offset)"
             f" > ({q}.dead_at_ms, {q}.dlq_partition, {q}.dlq_offset)")
    taken = ", ".join(f"{c} = CASE WHEN {later} THEN {x}.{c} ELSE {q}.{c} END" for c in DLQ_COLUMNS[2:])
    return f"{_insert(q, DLQ_COLUMNS, d, None)} ON CONFLICT (tenant, occurrence_id) DO UPDATE SET {taken}"


def effective_until(d: Dialect, where: str) -> str:
    """Recompute ``effective_until_ms`` of the versions of the schedules selected by ``where``."""
    return (
        "UPDATE schedules SET effective_until_ms = (SELECT min(n.effective_from_ms) FROM schedules n"
        " WHERE n.schedule_id = schedules.schedule_id AND n.version > schedules.version)"
        f" WHERE {where}"
    )


def upsert_offset(d: Dialect) -> str:
    """An offset never moves back: a zombie indexer's late commit cannot undo a newer one."""
    return (
        f"INSERT INTO consumer_offsets (group_id, topic, partition, next_offset) VALUES ({_values(d, 4)})"
        " ON CONFLICT (group_id, topic, partition) DO UPDATE SET next_offset ="
        f" {d.greatest}(consumer_offsets.next_offset, excluded.next_offset)"
    )


def add_skipped(d: Dialect) -> str:
    return (
        f"INSERT INTO history_skipped (reason, records) VALUES ({_values(d, 2)})"
        " ON CONFLICT (reason) DO UPDATE SET records = history_skipped.records + excluded.records"
    )


def select_offsets(d: Dialect) -> str:
    return f"SELECT topic, partition, next_offset FROM consumer_offsets WHERE group_id = {d.mark}"


_KEYS = {"occurrences": "occurrence_id", "attempts": "occurrence_id, attempt_no, token"}


def _insert(table: str, columns: tuple[str, ...], d: Dialect, source: str | None) -> str:
    """INSERT of VALUES, or of every row of ``source`` in key order: concurrent indexers then lock
    the rows they share in the same order and cannot deadlock."""
    cols = ", ".join(columns)
    if source is None:
        return f"INSERT INTO {table} ({cols}) VALUES ({_values(d, len(columns))})"
    return f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {source} WHERE true ORDER BY {_KEYS[table]}"
