"""A private PostgreSQL server for the test session (fixtures ``postgres_server`` and ``pg_dsn``).

``postgres_server`` runs ``initdb`` into a fresh temp dir and starts the server
on 127.0.0.1 at a free port (``KSCHED_TEST_PG_PORT`` to force one), trust
auth, unix socket inside the temp dir, fsync off; it stops the server and
removes the dir at the end of the session. It never uses a system cluster
(Debian's package may run one on 5432). The PostgreSQL server refuses to run as
root, so as root the binaries run as the ``postgres`` OS user via ``runuser``.

Binaries: ``KSCHED_TEST_PG_BINDIR``, else the newest ``/usr/lib/postgresql/*/bin``
(Debian/Ubuntu), else ``pg_ctl`` on ``PATH``. ``KSCHED_TEST_POSTGRES_DSN``
points the tests at an existing server instead (nothing is started).

If no server can be found or started, every test using it FAILS with one line
naming the fix -- nothing is skipped.

``pg_dsn`` gives each test a fresh schema (dropped afterwards) and a DSN whose
``search_path`` selects it, so tests never see each other's tables.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

HOST = "127.0.0.1"
SUPERUSER = "postgres"
START_TIMEOUT_S = 60
INSTALL_FIX = (
    "install the server (Debian: apt-get install -y postgresql, or `make postgres-server`), "
    "or set KSCHED_TEST_PG_BINDIR to the directory with initdb and pg_ctl"
)


class PgFixtureError(Exception):
    """The private server could not be found or started; ``str()`` is one line naming the fix."""


@dataclass(frozen=True)
class PgServer:
    """A running server: ``dsn`` connects as a superuser to the ``postgres`` database."""

    dsn: str

    def schema_dsn(self, schema: str) -> str:
        """``dsn`` with ``search_path`` set to ``schema`` (which must exist)."""
        return make_conninfo(self.dsn, options=f"-c search_path={schema}")


def find_bindir() -> Path:
    """Directory holding ``initdb`` and ``pg_ctl``, or PgFixtureError naming the fix."""
    forced = os.environ.get("KSCHED_TEST_PG_BINDIR")
    if forced:
        candidates = [Path(forced)]
    else:
        found = Path("/usr/lib/postgresql").glob("*/bin")
        candidates = sorted(found, key=lambda p: _version_key(p.parent.name), reverse=True)
        on_path = shutil.which("pg_ctl")
        if on_path:
            candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if (bindir / "pg_ctl").is_file() and (bindir / "initdb").is_file():
            return bindir
    where = f"KSCHED_TEST_PG_BINDIR={forced}" if forced else "/usr/lib/postgresql/*/bin or PATH"
    raise PgFixtureError(f"PostgreSQL server binaries (initdb, pg_ctl) not found in {where}: {INSTALL_FIX}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name)) or (0,)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """initdb + pg_ctl start/stop of a throwaway cluster in ``root`` (a fresh temp dir)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="ksched-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.started = False

    def start(self) -> PgServer:
        if self.as_root:
            try:
                account = pwd.getpwnam(SUPERUSER)
            except KeyError:
                raise PgFixtureError(
                    f"running as root, but there is no '{SUPERUSER}' OS user to run the server as "
                    f"(PostgreSQL refuses root): {INSTALL_FIX} (the package creates the user)"
                ) from None
            os.chown(self.root, account.pw_uid, account.pw_gid)
        self._run("initdb", ["-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
                             "--no-locale", "--no-sync"])
        forced_port = os.environ.get("KSCHED_TEST_PG_PORT")
        attempts = 1 if forced_port else 3
        for attempt in range(1, attempts + 1):
            self.port = int(forced_port) if forced_port else _free_port()
            self._write_config()
            self.log.unlink(missing_ok=True)  # pg_ctl appends: keep only this attempt's lines
            try:
                self._run("pg_ctl", ["-D", str(self.data), "-l", str(self.log), "-w",
                                     "-t", str(START_TIMEOUT_S), "start"])
            except PgFixtureError:
                if attempt == attempts or "already in use" not in self._log_reason():
                    raise
                continue  # lost the race for the free port: pick another
            self.started = True
            return PgServer(dsn=f"host={HOST} port={self.port} user={SUPERUSER} dbname=postgres")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        try:
            if self.started:
                self._run("pg_ctl", ["-D", str(self.data), "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _write_config(self) -> None:
        settings = {
            "listen_addresses": f"'{HOST}'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": "100",
            "fsync": "off",  # a throwaway cluster: durability is not under test, speed is welcome
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
        (self.data / "postgresql.auto.conf").write_text(lines)

    def _run(self, tool: str, args: Sequence[str]) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", SUPERUSER, "--", *cmd]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30,
                                  cwd=self.root, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PgFixtureError(f"{tool} could not run ({exc}): {INSTALL_FIX}") from exc
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            last = detail[-1] if detail else f"exit {proc.returncode}"
            log = self._log_reason()
            hint = f"; server log: {log}" if log else ""
            raise PgFixtureError(
                f"{tool} failed for the private test cluster in {self.root} (port {self.port}): "
                f"{last}{hint}; fix the cause above or set KSCHED_TEST_POSTGRES_DSN to an existing server"
            )

    def _log_reason(self) -> str:
        """The most telling line of the server log: a bind failure, else FATAL/PANIC/ERROR, else the last."""
        try:
            lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        for marks in (("could not bind",), ("FATAL:", "PANIC:"), ("ERROR:",)):
            for line in lines:
                if any(mark in line for mark in marks):
                    return line
        return lines[-1] if lines else ""


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    """The session's PostgreSQL server (private cluster, or ``KSCHED_TEST_POSTGRES_DSN``)."""
    external = os.environ.get("KSCHED_TEST_POSTGRES_DSN")
    if external:
        yield PgServer(dsn=external)
        return
    try:
        cluster = PrivateCluster(find_bindir())
    except PgFixtureError as exc:
        pytest.fail(f"the test PostgreSQL server could not start: {exc}", pytrace=False)
    try:
        server = cluster.start()
    except PgFixtureError as exc:
        cluster.stop()
        pytest.fail(f"the test PostgreSQL server could not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(postgres_server: PgServer) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh, empty schema of the session's server."""
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield postgres_server.schema_dsn(schema)
    finally:
        with contextlib.suppress(psycopg.Error), psycopg.connect(postgres_server.dsn, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {schema} CASCADE")
