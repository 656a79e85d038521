"""Sample handlers of the demo (``ksched worker --handlers scheduler.demo.handlers``).

Each records its effect in a SQLite database in the same transaction as the
occurrence id (:class:`scheduler.idempotency.SQLiteStore`), so a redelivered
occurrence is acknowledged without a second effect.
"""

from __future__ import annotations

import os
import sqlite3
from hashlib import blake2b
from pathlib import Path

from scheduler.idempotency import SQLiteStore
from scheduler.worker import Context, Handlers, RetryableError

handlers = Handlers()
_DB = Path(os.environ.get("KSCHED_DEMO_DB", "demo-effects.db"))
_store: SQLiteStore | None = None


def store() -> SQLiteStore:
    global _store
    if _store is None:
        _store = SQLiteStore(_DB)
    return _store


def _record(ctx: Context, what: str) -> None:
    def effect(conn: sqlite3.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS demo_effects"
            " (occurrence_id TEXT, tenant TEXT, handler TEXT, attempt INTEGER, what TEXT)"
        )
        conn.execute(
            "INSERT INTO demo_effects VALUES (?, ?, ?, ?, ?)",
            (ctx.occurrence_id, ctx.tenant, ctx.handler, ctx.attempt, what),
        )

    store().run_once(ctx.occurrence_id, effect)


@handlers.register("report")
def report(ctx: Context) -> None:
    """Writes one row per occurrence."""
    _record(ctx, f"report for {ctx.scheduled_for.isoformat()}")


@handlers.register("flaky")
def flaky(ctx: Context) -> None:
    """Fails retryably on about a third of first attempts (decided by the occurrence id, so a
    replay behaves the same); the retry succeeds."""
    roll = blake2b(ctx.occurrence_id.encode(), digest_size=1).digest()[0]
    if ctx.attempt == 1 and roll % 3 == 0:
        raise RetryableError("the upstream service is busy (demo)")
    _record(ctx, "flaky succeeded")


@handlers.register("slow")
def slow(ctx: Context) -> None:
    """Runs 90 s (its schedule fires every minute with SKIP_IF_RUNNING: every other one is skipped)."""
    if ctx.wait_cancelled(90):
        ctx.raise_if_cancelled()
    _record(ctx, "slow job done")
