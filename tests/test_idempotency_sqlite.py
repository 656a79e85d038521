"""SQLiteStore specifics, on temp files."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from idempotency_backends import DbBackend

from scheduler.idempotency import (
    EffectBrokeTransactionError,
    SQLiteStore,
    StoreBusyError,
    StoreUnavailableError,
)


@pytest.fixture
def db(tmp_path: Path) -> DbBackend:
    backend = DbBackend("sqlite", str(tmp_path / "idem.db"))
    backend.create_effects_table()
    return backend


def test_the_file_is_in_wal_mode_and_the_effect_is_inside_the_transaction(db: DbBackend) -> None:
    def effect(conn: sqlite3.Connection) -> bool:
        assert conn.execute("SELECT count(*) FROM ksched_processed").fetchone() == (1,)
        return conn.in_transaction

    with SQLiteStore(db.target) as store:
        assert store.run_once("occ-1", effect).value is True
    assert db.execute("PRAGMA journal_mode") == [("wal",)]


def test_processed_at_is_iso_utc(db: DbBackend) -> None:
    with SQLiteStore(db.target) as store:
        store.run_once("occ-1", lambda conn: None)
    [(text,)] = db.execute("SELECT processed_at FROM ksched_processed")
    stamp = dt.datetime.fromisoformat(text)
    assert stamp.utcoffset() == dt.timedelta(0)
    assert abs(dt.datetime.now(dt.UTC) - stamp) < dt.timedelta(minutes=1)


def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "idem.db"
    with SQLiteStore(path) as store:
        assert store.run_once("occ-1", lambda conn: None).first
    assert path.is_file()


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_in_memory_paths_are_rejected(path: str) -> None:
    with pytest.raises(ValueError, match="pass a file path, or use MemoryStore"):
        SQLiteStore(path)


def test_a_directory_or_a_non_database_file_is_unavailable(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path) as store, pytest.raises(StoreUnavailableError, match="cannot open"):
        store.seen("occ-1")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an sqlite database" * 100)
    with SQLiteStore(junk) as store, pytest.raises(StoreUnavailableError, match="not a usable SQLite"):
        store.run_once("occ-1", lambda conn: None)


def test_another_process_holding_the_write_lock_past_the_timeout_is_a_busy_error(db: DbBackend) -> None:
    with SQLiteStore(db.target, busy_timeout_s=0.2) as store:
        store.seen("warm-up")  # the file exists and is in WAL mode
        other = sqlite3.connect(db.target, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusyError, match=r"busy_timeout_s=0\.2"):
                store.run_once("occ-1", lambda conn: pytest.fail("ran without the write lock"))
            assert not store.seen("occ-1")  # readers are not blocked by the writer (WAL)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert store.run_once("occ-1", lambda conn: None).first


@pytest.mark.parametrize("how", ["commit()", "rollback()", "COMMIT then more writes", "close()"])
def test_an_effect_that_ends_the_transaction_is_refused(db: DbBackend, how: str) -> None:
    def effect(conn: sqlite3.Connection) -> None:
        db.write_effect(conn, "occ-1", "inside")
        if how == "commit()":
            conn.commit()
        elif how == "rollback()":
            conn.rollback()
        elif how == "close()":
            conn.close()
        else:
            conn.execute("COMMIT")
            db.write_effect(conn, "occ-1", "autocommitted")

    with SQLiteStore(db.target) as store:
        with pytest.raises(EffectBrokeTransactionError, match="ended the store's transaction"):
            store.run_once("occ-1", effect)
        assert store.run_once("occ-2", lambda conn: None).first  # the store recovered
    expected = {
        "commit()": Counter({"occ-1": 1}),
        "rollback()": Counter(),
        "close()": Counter(),
        "COMMIT then more writes": Counter({"occ-1": 2}),  # why it is refused: not atomic any more
    }[how]
    assert db.effect_counts() == expected


def test_a_savepoint_inside_the_effect_is_fine(db: DbBackend) -> None:
    def effect(conn: sqlite3.Connection) -> None:
        db.write_effect(conn, "occ-1", "kept")
        conn.execute("SAVEPOINT maybe")
        db.write_effect(conn, "occ-1", "undone")
        conn.execute("ROLLBACK TO maybe")
        conn.execute("RELEASE maybe")

    with SQLiteStore(db.target) as store:
        assert store.run_once("occ-1", effect).first
    assert [row[0] for row in db.execute("SELECT worker FROM effects")] == ["kept"]

