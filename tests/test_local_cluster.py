"""The embedded three-node cluster (``ksched kafka start --nodes 3``): config (pure) and a real
cluster that loses a node to SIGKILL in the middle of a write (``slow``).

The cluster runs on free ports of its own with a temporary data dir (sharing the jar cache), so it
never touches the session broker of conftest.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.localbroker import BrokerConfig, LocalBrokerError, LocalCluster, server_properties
from scheduler.localbroker.cluster import node_config
from scheduler.settings import load_settings


def _props(cfg: BrokerConfig, tmp_path: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in server_properties(cfg, tmp_path / "kraft").splitlines()
        if line and not line.startswith("#")
    )


def test_each_node_has_its_ports_its_data_dir_and_one_static_quorum(tmp_path: Path) -> None:
    base = BrokerConfig(port=2000, controller_port=2001, cache_dir=tmp_path, data_dir=tmp_path, heap_mb=768)
    nodes = [node_config(base, i, 3) for i in (1, 2, 3)]
    assert [(n.node_id, n.port, n.controller_port) for n in nodes] == [(1, 2000, 2001), (2, 2002, 2003),
                                                                       (3, 2004, 2005)]
    assert len({n.data_dir for n in nodes}) == 3
    assert {n.credentials_path for n in nodes} == {tmp_path / "credentials.json"}  # one admin password
    props = _props(nodes[1], tmp_path)
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:2001,2@127.0.0.1:2003,3@127.0.0.1:2005"
    assert "controller.quorum.bootstrap.servers" not in props  # a static quorum, no --standalone
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:2002,CONTROLLER://127.0.0.1:2003"
    for key in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert props[f"{key}.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == props["min.insync.replicas"] == "2"


def test_cluster_sizes_and_overlapping_ports_are_refused_with_the_fix(tmp_path: Path) -> None:
    base = BrokerConfig(port=2000, controller_port=2001, cache_dir=tmp_path, data_dir=tmp_path)
    with pytest.raises(LocalBrokerError, match="2 to 5 nodes"):
        LocalCluster(base, 7)
    clash = BrokerConfig(port=2000, controller_port=2002, cache_dir=tmp_path, data_dir=tmp_path)
    with pytest.raises(LocalBrokerError, match="KSCHED_KAFKA_CONTROLLER_PORT"):
        LocalCluster(clash, 3)


def test_settings_bootstrap_lists_every_local_node() -> None:
    s = load_settings(env={"KSCHED_KAFKA_PORT": "3000", "KSCHED_KAFKA_NODES": "3"})
    assert s.bootstrap_servers == "127.0.0.1:3000,127.0.0.1:3002,127.0.0.1:3004"
    assert load_settings(env={"KSCHED_KAFKA_PORT": "3000"}).bootstrap_servers == "127.0.0.1:3000"


def _free_pair_base() -> int:
    """A port p with p .. p+5 free (three nodes' listener and controller ports)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        if p + 5 > 65535:
            continue
        free = True
        for q in range(p, p + 6):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    free = False
                    break
        if free:
            return p
    raise RuntimeError("no six free consecutive ports")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cache = Path(os.environ.get("KSCHED_KAFKA_CACHE_DIR") or load_settings(env={}).kafka_cache_dir)
    p = _free_pair_base()
    c = LocalCluster(BrokerConfig(port=p, controller_port=p + 1, cache_dir=cache, data_dir=tmp_path / "data",
                                  heap_mb=384 * 3), 3)
    yield c
    c.stop(timeout_s=10)


def _isr_complete(admin: object, topic: str) -> bool:
    md = admin.list_topics(topic, timeout=5)  # type: ignore[attr-defined]
    return all(len(pm.isrs) == 3 for pm in md.topics[topic].partitions.values())


@pytest.mark.kafka
@pytest.mark.slow
def test_a_node_killed_mid_write_loses_and_doubles_nothing_and_rejoins(cluster: LocalCluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    st = cluster.start(timeout_s=240)
    assert st.healthy, st.detail
    conn = cluster.nodes[0].connection()
    conf = {**conn.config(), "bootstrap.servers": cluster.bootstrap}
    admin = AdminClient(conf)
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    topic = "rf3"
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])["rf3"].result(30)

    n, acked, errors = 100_000, [0], []

    def delivered(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1
        else:
            errors.append(str(err))

    prod = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    victim = cluster.nodes[2]
    victim_pid = victim.status().pid
    assert victim_pid is not None
    for i in range(n):
        if i == n // 3:
            os.kill(victim_pid, signal.SIGKILL)  # mid-write, without a controlled shutdown
        while True:
            try:
                prod.produce(topic, str(i).encode(), str(i).encode(), on_delivery=delivered)
                break
            except BufferError:
                prod.poll(0.05)
        prod.poll(0)
    assert prod.flush(120) == 0
    assert errors == [] and acked[0] == n
    del prod  # its connections would complain once the cluster stops

    restarted = time.monotonic()
    cluster.start(timeout_s=240)  # relaunches the dead node, reuses the two running ones
    deadline = time.monotonic() + 120
    while not _isr_complete(admin, topic):
        assert time.monotonic() < deadline, "the restarted node did not rejoin every ISR in 120 s"
        time.sleep(0.5)
    rejoin_s = time.monotonic() - restarted

    cons = Consumer({**conf, "group.id": "rf3-check", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "isolation.level": "read_committed"})
    cons.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 120
    while len(seen) < n and time.monotonic() < deadline:
        for m in cons.consume(10_000, 1.0):
            if m.error() is None:
                seen.append(int(m.value()))
    cons.close()
    assert len(seen) == n and set(seen) == set(range(n)), (
        f"read {len(seen)} records, {len(set(seen))} distinct, of {n}"
    )
    print(f"three nodes: {n} acknowledged with node 3 killed at {n // 3}; "
          f"rejoined every ISR in {rejoin_s:.1f} s")

    del admin
    assert cluster.stop(timeout_s=20)
    assert not any(node.status().running for node in cluster.nodes)
    with pytest.raises(LocalBrokerError, match="3 nodes, not 2"):
        LocalCluster(cluster.config, 2).start(timeout_s=5)
