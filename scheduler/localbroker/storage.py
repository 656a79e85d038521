"""The broker's data dir: config generated on every start, KRaft storage formatted once.

``--fresh`` wipes the storage, logs and credentials; ``broker.json`` records the ports,
cluster id and authentication the storage was formatted with (layout: the package docstring).

The admin password is generated on first start, kept in the credentials file (mode 0600,
:mod:`scheduler.kafka.credentials`) and given to ``kafka-storage format --add-scram``, so the
super user exists before the broker first listens. ``server.properties`` holds it too and is
written 0600 as well.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from scheduler.kafka.credentials import ensure_user, write_secret_file
from scheduler.localbroker.config import (
    ADMIN_USER,
    AUTH_MARKER,
    TOOLS_LOG4J2,
    BrokerConfig,
    admin_scram,
    kafka_uuid,
    log4j2_properties,
    server_properties,
)
from scheduler.localbroker.errors import LocalBrokerError


class DataDir:
    """The files of one broker under ``data_dir`` and the ``kafka-storage`` steps on them."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.config = config
        self.data_dir = data_dir
        self.kraft_dir = data_dir / "kraft"
        self.logs_dir = data_dir / "logs"
        self.server_properties = data_dir / "server.properties"
        self.log4j_properties = data_dir / "log4j2.properties"
        self.meta_file = data_dir / "broker.json"
        self.credentials_file = config.credentials_path

    def formatted(self) -> bool:
        return (self.kraft_dir / "meta.properties").is_file()

    def unauthenticated(self) -> bool:
        """True when the storage was formatted by an older ksched, without SASL users and ACLs.

        Such a data dir has no admin SCRAM user, so nobody could connect to it: it is wiped
        (dev data, docs/security.md) by the caller.
        """
        if not self.formatted():
            return False
        try:
            meta = json.loads(self.meta_file.read_text())
        except (OSError, ValueError):
            return True
        marked = isinstance(meta, dict) and meta.get("auth") == AUTH_MARKER
        return not marked or not self.credentials_file.exists()

    def legacy_notice(self, pid: int | None) -> str:
        """What to tell the user before an :meth:`unauthenticated` data dir is wiped; raises
        instead while its old broker (``pid``) runs: never stopped behind its users' back (on a
        shared machine it may be another checkout's test session)."""
        if pid is not None:
            raise LocalBrokerError(
                f"the broker running on {self.data_dir} (pid {pid}) was started without "
                "authentication by an older ksched (or its credentials file is gone); stop it "
                "(`ksched kafka stop`) and start again: its local dev data is then wiped and "
                "formatted with SASL/SCRAM users and ACLs (or run `ksched kafka start --fresh`)"
            )
        return (
            f"{self.data_dir} was formatted without authentication (an older ksched) or lost its "
            "credentials file; wiping it (local dev data) and formatting it with SASL/SCRAM users and ACLs"
        )

    def admin_password(self) -> str:
        """The admin's password: from the credentials file, generated on first use."""
        return ensure_user(self.credentials_file, ADMIN_USER)

    def check_formatted_ports(self) -> None:
        """Refuse a controller port other than the one the storage was formatted for."""
        if not self.formatted():
            return
        try:
            meta = json.loads(self.meta_file.read_text())
        except (OSError, ValueError):
            return
        was = meta.get("controller_port")
        if isinstance(was, int) and was != self.config.controller_port:
            raise LocalBrokerError(
                f"{self.data_dir} was formatted for controller port {was}, not "
                f"{self.config.controller_port}; set the controller port back or run "
                "`ksched kafka start --fresh` (wipes its data)"
            )

    def write_config(self) -> None:
        """(Re)generate ``server.properties`` and ``log4j2.properties``; create the kraft and log dirs."""
        self.kraft_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        props = server_properties(self.config, self.kraft_dir, self.admin_password())
        write_secret_file(self.server_properties, props)  # it holds the admin password
        self.log4j_properties.write_text(log4j2_properties(self.logs_dir))

    def format(self, java: Path, libs: Path, cluster_id: str | None = None) -> None:
        """Format the KRaft storage with ``cluster_id`` (default: a new one); record it and the ports.

        One node formats as a standalone controller; a cluster's nodes are formatted with the same
        cluster id and no ``--standalone``: their static quorum is in ``server.properties``."""
        cluster_id = cluster_id or kafka_uuid()
        scram = admin_scram(self.admin_password())
        standalone = [] if self.config.quorum else ["--standalone"]
        self._run_tool(
            java, libs, "format", *standalone, "-t", cluster_id, "-c", str(self.server_properties),
            "--add-scram", scram,
        )  # fmt: skip
        self.meta_file.write_text(
            json.dumps(
                {
                    "cluster_id": cluster_id,
                    "version": self.config.version,
                    "port": self.config.port,
                    "controller_port": self.config.controller_port,
                    "node_id": self.config.node_id,
                    "nodes": self.config.nodes,
                    "auth": AUTH_MARKER,
                },
                indent=1,
            )
        )

    def wipe(self) -> None:
        shutil.rmtree(self.kraft_dir, ignore_errors=True)
        shutil.rmtree(self.logs_dir, ignore_errors=True)
        self.meta_file.unlink(missing_ok=True)
        # Its users lived in the wiped metadata log: their passwords are void.
        self.credentials_file.unlink(missing_ok=True)

    def _run_tool(self, java: Path, libs: Path, *args: str) -> str:
        tools_log4j = self.data_dir / "tools-log4j2.properties"
        tools_log4j.write_text(TOOLS_LOG4J2)
        cmd = [
            str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={tools_log4j}",
            "-cp", f"{libs}/*", "kafka.tools.StorageTool", *args,
        ]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            lines = [ln for ln in (out.stderr + "\n" + out.stdout).splitlines() if ln.strip()]
            raise LocalBrokerError(
                f"kafka-storage {args[0]} failed: {lines[-1] if lines else out.returncode}; "
                "run `ksched kafka start --fresh` to re-create the data dir"
            )
        return out.stdout
