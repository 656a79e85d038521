"""``LocalCluster``: N combined KRaft nodes on 127.0.0.1 (``ksched kafka start --nodes 3``).

Each node is a :class:`~scheduler.localbroker.broker.LocalBroker` with its own data dir
(``data_dir/node-<i>``) and ports: node ``i`` (from 1) listens on ``port + 2(i-1)`` and its
controller on ``controller_port + 2(i-1)``, so the defaults give 9092/9093, 9094/9095, 9096/9097.
Every node is a voter of one static quorum and is formatted with the same cluster id, recorded in
``data_dir/cluster.json``; the nodes share one credentials file (one admin password). With three
nodes the internal topics get three replicas, two in sync (``config.server_properties``): the
topics' production profile (``KSCHED_ENVIRONMENT=production``) asks the same of ksched's topics.

Start launches every JVM before waiting for any (none serves before a quorum is up); stop
signals every node at once and kills what is left at the timeout — a node stopped last waits
in a controlled shutdown that no quorum can complete any more.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.localbroker.broker import BrokerStatus, LocalBroker, quiet_admin
from scheduler.localbroker.config import BrokerConfig, kafka_uuid
from scheduler.localbroker.errors import LocalBrokerError
from scheduler.localbroker.system import locked

if TYPE_CHECKING:
    from scheduler.settings import Settings

MAX_NODES = 5


def node_config(config: BrokerConfig, node_id: int, nodes: int) -> BrokerConfig:
    """Node ``node_id``'s config in a cluster of ``nodes`` built from the one-node ``config``."""
    step = 2 * (node_id - 1)
    return replace(
        config,
        node_id=node_id,
        port=config.port + step,
        controller_port=config.controller_port + step,
        data_dir=Path(config.data_dir) / f"node-{node_id}",
        credentials_file=config.credentials_path,
        heap_mb=max(384, config.heap_mb // nodes),
        quorum=tuple((i, config.controller_port + 2 * (i - 1)) for i in range(1, nodes + 1)),
    )


class LocalCluster:
    """Start, stop and inspect ``nodes`` local KRaft nodes owned by ``config.data_dir``."""

    def __init__(self, config: BrokerConfig, nodes: int) -> None:
        if not 2 <= nodes <= MAX_NODES:
            raise LocalBrokerError(
                f"--nodes {nodes}: a local cluster has 2 to {MAX_NODES} nodes (1: one broker)"
            )
        steps = [2 * i for i in range(nodes)]
        if {config.controller_port + i for i in steps} & {config.port + i for i in steps}:
            raise LocalBrokerError(
                f"listener ports from {config.port} and controller ports from {config.controller_port} "
                f"(step 2) overlap for {nodes} nodes: set KSCHED_KAFKA_CONTROLLER_PORT to the listener "
                "port + 1"
            )
        self.config = config
        self.data_dir = Path(config.data_dir).expanduser().absolute()
        self.nodes = [LocalBroker(node_config(config, i, nodes)) for i in range(1, nodes + 1)]
        self.meta_file = self.data_dir / "cluster.json"
        self.credentials_file = config.credentials_path
        self.notice = ""

    @staticmethod
    def recorded_nodes(data_dir: Path) -> int:
        """How many nodes the cluster formatted under ``data_dir`` has (1: no cluster there)."""
        try:
            return int(json.loads((Path(data_dir) / "cluster.json").read_text())["nodes"])
        except (OSError, ValueError, KeyError, TypeError):
            return 1

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    # Shorthands the CLI uses, as for one broker.
    @property
    def version_dir(self) -> Path:
        return self.nodes[0].version_dir

    def artifacts_ready(self) -> bool:
        return self.nodes[0].artifacts_ready()

    def logs(self, lines: int = 100) -> str:
        return "\n".join(f"=== node {n.config.node_id} ===\n{n.logs(lines)}" for n in self.nodes)

    def start(self, *, fresh: bool = False, timeout_s: float = 180) -> BrokerStatus:
        """Start every node (or reuse the running ones) and wait until the cluster lists them all."""
        deadline = time.monotonic() + timeout_s
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with locked(self.data_dir / ".cluster-lock"):
            if fresh:
                self.stop()
                for n in self.nodes:
                    n.storage.wipe()  # every node first: each wipe also removes the shared credentials
                self.meta_file.unlink(missing_ok=True)
            cluster_id = self._cluster_id()
            pids = [n.launch(cluster_id=cluster_id) for n in self.nodes]
            for n, pid in zip(self.nodes, pids, strict=True):
                n.wait_healthy(pid, deadline)
            self._wait_members(deadline)
        return self.status()

    def _cluster_id(self) -> str:
        """The id every node is formatted with: recorded on first start, reused after."""
        try:
            meta = json.loads(self.meta_file.read_text())
            if meta.get("nodes") == len(self.nodes):
                return str(meta["cluster_id"])
            raise LocalBrokerError(
                f"{self.data_dir} holds a cluster of {meta.get('nodes')} nodes, not {len(self.nodes)}: "
                "start it with that --nodes, or add --fresh (wipes its data)"
            )
        except (OSError, ValueError, KeyError):
            if any(n.storage.formatted() for n in self.nodes):
                raise LocalBrokerError(
                    f"{self.data_dir} has formatted nodes but no cluster.json: run with --fresh "
                    "(wipes its data)"
                ) from None
        cluster_id = kafka_uuid()
        self.meta_file.write_text(json.dumps({"cluster_id": cluster_id, "nodes": len(self.nodes)}))
        return cluster_id

    def _wait_members(self, deadline: float) -> None:
        """Wait until the metadata lists every node as a broker (each node answering alone is not enough)."""
        seen: set[int] = set()
        admin = quiet_admin(self.nodes[0].connection())
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                md = admin.list_topics(timeout=3)
                seen = set(md.brokers)
                if len(seen) == len(self.nodes):
                    return
            time.sleep(0.25)
        raise LocalBrokerError(
            f"the cluster lists brokers {sorted(seen)} of {len(self.nodes)} in time: see `ksched kafka logs`"
        )

    def stop(self, *, timeout_s: float = 30) -> bool:
        """Stop every node at once (SIGTERM, SIGKILL after ``timeout_s``); True if any was running."""
        deadline = time.monotonic() + timeout_s
        pids = [(n, n.terminate()) for n in self.nodes]
        for n, pid in pids:
            if pid is not None:
                n.reap(pid, deadline)
        return any(pid is not None for _, pid in pids)

    def status(self) -> BrokerStatus:
        """One status for the cluster: running when every node runs, healthy when every node is."""
        states = [n.status() for n in self.nodes]
        pids = [s.pid for s in states if s.pid]
        detail = "; ".join(
            f"node {n.config.node_id}: {s.detail}" for n, s in zip(self.nodes, states, strict=True)
        )
        return BrokerStatus(
            running=all(s.running for s in states), pid=pids[0] if pids else None,
            version=next((s.version for s in states if s.version), None), listener=self.bootstrap,
            data_dir=self.data_dir, topics=next((s.topics for s in states if s.topics), []),
            healthy=all(s.healthy for s in states), detail=detail,
        )  # fmt: skip


def for_settings(settings: Settings, nodes: int | None = None) -> LocalBroker | LocalCluster:
    """The local broker, or the local cluster, of ``settings``: of ``nodes``, else of the node count
    recorded in the data dir by the cluster's first start, else of the setting ``kafka_nodes``."""
    config = BrokerConfig(
        version=settings.kafka_version,
        port=settings.kafka_port,
        controller_port=settings.kafka_controller_port,
        heap_mb=settings.kafka_heap_mb,
        cache_dir=settings.kafka_cache_dir,
        data_dir=settings.kafka_data_dir,
        credentials_file=settings.credentials_path,
    )
    recorded = LocalCluster.recorded_nodes(settings.kafka_data_dir)
    count = nodes or (recorded if recorded > 1 else settings.kafka_nodes)
    return LocalCluster(config, count) if count > 1 else LocalBroker(config)
