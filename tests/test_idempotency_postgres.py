"""PostgresStore specifics, on the session's private PostgreSQL server (tests/pg_fixture.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from idempotency_backends import DbBackend
from pg_fixture import PgFixtureError, PgServer, find_bindir

from scheduler.idempotency import (
    EffectBrokeTransactionError,
    PostgresStore,
    StoreBusyError,
    StoreUnavailableError,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def db(pg_dsn: str) -> DbBackend:
    backend = DbBackend("postgres", pg_dsn)
    backend.create_effects_table()
    return backend


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore(pg_dsn) as s:
        yield s


def test_effect_gets_a_connection_inside_the_store_transaction(store: PostgresStore, db: DbBackend) -> None:
    def effect(conn: psycopg.Connection[Any]) -> str:
        assert isinstance(conn, psycopg.Connection)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        row = conn.execute("SELECT count(*) FROM ksched_processed WHERE occurrence_id = 'occ-1'").fetchone()
        assert row == (1,)  # the claim is already inserted in this transaction
        return str(conn.execute("SHOW transaction_isolation").fetchone()[0])  # type: ignore[index]

    assert store.run_once("occ-1", effect).value == "read committed"


def test_processed_at_is_the_commit_time(store: PostgresStore, db: DbBackend) -> None:
    before = dt.datetime.now(dt.UTC)
    store.run_once("occ-1", lambda conn: None)
    [(processed_at,)] = db.execute("SELECT processed_at FROM ksched_processed")
    slack = dt.timedelta(seconds=5)
    assert before - slack <= processed_at <= dt.datetime.now(dt.UTC) + slack


def test_a_savepoint_inside_the_effect_is_fine(store: PostgresStore, db: DbBackend) -> None:
    def effect(conn: psycopg.Connection[Any]) -> None:
        db.write_effect(conn, "occ-1", "kept")
        with pytest.raises(psycopg.errors.DivisionByZero), conn.transaction():
            db.write_effect(conn, "occ-1", "rolled back to the savepoint")
            conn.execute("SELECT 1/0")

    assert store.run_once("occ-1", effect).first
    assert [row[0] for row in db.execute("SELECT worker FROM effects")] == ["kept"]


def test_an_effect_that_swallows_a_database_error_is_refused(store: PostgresStore, db: DbBackend) -> None:
    # psycopg's commit() of an aborted transaction silently rolls back: without the
    # store's check, run_once would report first=True and nothing would be recorded.
    def effect(conn: psycopg.Connection[Any]) -> None:
        db.write_effect(conn, "occ-1", "lost")
        with contextlib.suppress(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")

    with pytest.raises(EffectBrokeTransactionError, match="swallowed a database error"):
        store.run_once("occ-1", effect)
    assert not store.seen("occ-1")
    assert db.effect_counts() == Counter()
    assert store.run_once("occ-1", lambda conn: None).first


@pytest.mark.parametrize("how", ["commit()", "COMMIT then more writes", "rollback()"])
def test_an_effect_that_ends_the_transaction_is_refused(
    store: PostgresStore, db: DbBackend, how: str
) -> None:
    def effect(conn: psycopg.Connection[Any]) -> None:
        if how == "commit()":
            conn.commit()
        elif how == "rollback()":
            conn.rollback()
        else:
            conn.execute("COMMIT")
            db.write_effect(conn, "occ-1", "outside the claim")

    with pytest.raises(EffectBrokeTransactionError, match="ended the store's transaction"):
        store.run_once("occ-1", effect)
    assert db.effect_counts() == Counter()  # the writes after the early commit were rolled back
    assert store.seen("occ-1") == (how != "rollback()")


def test_a_dead_pooled_connection_is_replaced_before_the_effect(
    store: PostgresStore, db: DbBackend, postgres_server: PgServer
) -> None:
    store.run_once("occ-1", lambda conn: db.write_effect(conn, "occ-1", "before"))
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:  # e.g. a server restart
        pids = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'ksched-idempotency'"
        ).fetchall()
        assert pids  # the store's idle pooled connection
        for (pid,) in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert store.run_once("occ-2", lambda conn: db.write_effect(conn, "occ-2", "after")).first
    assert db.effect_counts() == Counter({"occ-1": 1, "occ-2": 1})


def test_concurrent_first_use_creates_the_table_once(pg_dsn: str) -> None:
    stores = [PostgresStore(pg_dsn) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[bool] = []
    errors: list[BaseException] = []

    def run(s: PostgresStore, n: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes.append(s.run_once(f"occ-{n % 2}", lambda conn: None).first)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for s in stores:
        s.close()
    assert errors == []
    assert sorted(outcomes) == [False, False, False, False, True, True]


def test_pool_exhaustion_names_the_setting(pg_dsn: str) -> None:
    with PostgresStore(pg_dsn, max_connections=1, acquire_timeout_s=0.2) as s:
        release = threading.Event()
        started = threading.Event()

        def hold(conn: Any) -> None:
            started.set()
            release.wait(timeout=30)

        holder = threading.Thread(target=lambda: s.run_once("held", hold))
        holder.start()
        try:
            assert started.wait(timeout=30)
            with pytest.raises(StoreBusyError, match=r"raise max_connections \(now 1\)"):
                s.run_once("other", lambda conn: None)
        finally:
            release.set()
            holder.join(timeout=30)
        assert s.run_once("other", lambda conn: None).first


def test_lock_timeout_while_waiting_for_a_duplicate_is_a_busy_error(pg_dsn: str) -> None:
    options = str(psycopg.conninfo.conninfo_to_dict(pg_dsn)["options"])  # the test's search_path
    impatient_dsn = psycopg.conninfo.make_conninfo(pg_dsn, options=options + " -c lock_timeout=200ms")
    with PostgresStore(pg_dsn) as patient, PostgresStore(impatient_dsn) as impatient:
        release = threading.Event()
        started = threading.Event()

        def hold(conn: Any) -> None:
            started.set()
            release.wait(timeout=30)

        holder = threading.Thread(target=lambda: patient.run_once("occ-1", hold))
        holder.start()
        try:
            assert started.wait(timeout=30)
            with pytest.raises(StoreBusyError, match="lock_timeout"):
                impatient.run_once("occ-1", lambda conn: pytest.fail("ran while the holder runs"))
        finally:
            release.set()
            holder.join(timeout=30)
        assert impatient.run_once("occ-1", lambda conn: None).first is False


def test_a_role_that_may_not_create_the_table_gets_the_ddl(postgres_server: PgServer, pg_dsn: str) -> None:
    schema = str(psycopg.conninfo.conninfo_to_dict(pg_dsn)["options"]).split("=")[-1]
    role = f"app_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    app_dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
    try:
        with PostgresStore(app_dsn) as app, pytest.raises(StoreUnavailableError) as caught:
            app.run_once("occ-1", lambda conn: None)
        assert "may not create table ksched_processed" in str(caught.value)
        assert "CREATE TABLE IF NOT EXISTS ksched_processed" in str(caught.value)

        with PostgresStore(pg_dsn) as owner:  # the owner creates it once ...
            owner.seen("occ-1")
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f"GRANT SELECT, INSERT ON {schema}.ksched_processed TO {role}")
        with PostgresStore(app_dsn) as app:  # ... and the app role only needs SELECT, INSERT
            assert app.run_once("occ-1", lambda conn: None).first
            assert app.seen("occ-1")
    finally:
        with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def test_a_search_path_without_an_existing_schema_is_named(postgres_server: PgServer) -> None:
    with PostgresStore(postgres_server.schema_dsn("no_such_schema")) as s, pytest.raises(
        StoreUnavailableError, match="create the schema, or fix `options=-c search_path"
    ):
        s.seen("occ-1")


def test_an_unreachable_server_is_named_without_the_password() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    dsn = f"host=127.0.0.1 port={port} user=app password=s3cret dbname=jobs"
    with PostgresStore(dsn, connect_timeout_s=2) as s, pytest.raises(StoreUnavailableError) as caught:
        s.run_once("occ-1", lambda conn: None)
    message = str(caught.value)
    assert f"app@127.0.0.1:{port}/jobs" in message and "check the dsn" in message
    assert "s3cret" not in message


def test_a_malformed_dsn_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="dsn is not a libpq connection string"):
        PostgresStore("this is not a dsn")


def test_missing_server_binaries_fail_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KSCHED_TEST_PG_BINDIR", str(tmp_path))
    fix = r"not found in KSCHED_TEST_PG_BINDIR=.*apt-get install -y postgresql"
    with pytest.raises(PgFixtureError, match=fix):
        find_bindir()
