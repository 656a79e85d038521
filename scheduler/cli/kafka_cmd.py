"""``ksched kafka start | stop | status | logs``: the embedded local Apache Kafka broker.

With ``KSCHED_BOOTSTRAP`` set, ksched uses that cluster instead: ``start`` and
``stop`` change nothing and ``status`` shows the cluster's metadata.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.localbroker import BrokerStatus, LocalBroker, LocalCluster
    from scheduler.settings import Settings


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("kafka", help="run the embedded local Kafka broker")
    ksub = p.add_subparsers(dest="kafka_cmd", metavar="ACTION")
    ksub.required = True
    s = ksub.add_parser("start", help="start the local broker (fetches Kafka once with Maven)")
    s.add_argument("--fresh", action="store_true", help="wipe the broker's data first")
    s.add_argument("--timeout", type=float, default=180.0, help="seconds to wait until it serves (180)")
    s.add_argument("--nodes", type=int, default=None,
                   help="KRaft nodes: 1 broker, or a local cluster of 3 (default: setting kafka_nodes)")
    s.set_defaults(handler=_start)
    st = ksub.add_parser("stop", help="stop the local broker")
    st.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL (30)")
    st.set_defaults(handler=_stop)
    ss = ksub.add_parser("status", help="is it running, which version, which topics")
    ss.add_argument("--json", action="store_true", help="print one JSON object")
    ss.set_defaults(handler=_status)
    cc = ksub.add_parser(
        "container-config",
        help="write the files an apache/kafka container runs (docker/compose.yaml) into kafka_data_dir")
    cc.add_argument("--advertised-host", required=True,
                    help="the host name clients reach the container by (compose: its service name)")
    cc.set_defaults(handler=_container_config)
    lg = ksub.add_parser("logs", help="the broker's log")
    lg.add_argument("-n", "--lines", type=int, default=100, help="lines to show (100)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    lg.add_argument("--node", type=int, default=None,
                    help="a local cluster's node (default: all; --follow: 1)")
    lg.set_defaults(handler=_logs)


def _settings() -> Settings:
    from scheduler.settings import load_settings

    return load_settings()


def _broker(settings: Settings, nodes: int | None = None) -> LocalBroker | LocalCluster:
    from scheduler.localbroker import for_settings

    return for_settings(settings, nodes)


def _fail(exc: Exception) -> int:
    print(f"ksched: error: {exc}", file=sys.stderr)
    return 1


def _print_status(st: BrokerStatus) -> None:
    print(f"running:  {'yes' if st.running else 'no'}" + (f" (pid {st.pid})" if st.pid else ""))
    print(f"healthy:  {'yes' if st.healthy else 'no'}")
    print(f"version:  {st.version or '-'}")
    print(f"listener: {st.listener}")
    print(f"data dir: {st.data_dir}")
    print(f"topics:   {len(st.topics)}" + (f" ({', '.join(st.topics)})" if st.topics else ""))
    print(f"detail:   {st.detail}")


def _start(args: argparse.Namespace) -> int:
    from scheduler.localbroker import LocalBrokerError

    settings = _settings()
    if settings.bootstrap:
        print(f"kafka: KSCHED_BOOTSTRAP is set; using the existing cluster at {settings.bootstrap}")
        return 0
    try:
        broker = _broker(settings, args.nodes)
        before = broker.status()
        if not before.running and not broker.artifacts_ready():
            print(
                f"kafka: fetching Apache Kafka {settings.kafka_version} with Maven into "
                f"{broker.version_dir} (once)...",
                file=sys.stderr,
            )
        t0 = time.monotonic()
        st = broker.start(fresh=args.fresh, timeout_s=args.timeout)
    except LocalBrokerError as exc:
        return _fail(exc)
    if broker.notice:
        print(f"kafka: {broker.notice}", file=sys.stderr)
    took = time.monotonic() - t0
    if before.running and before.pid == st.pid:
        print(f"kafka: already running: Kafka {st.version} pid {st.pid} on {st.listener}")
    else:
        print(f"kafka: started Kafka {st.version} pid {st.pid} on {st.listener} in {took:.1f}s")
    print(f"kafka: data {st.data_dir}; logs: ksched kafka logs")
    print(f"kafka: credentials (mode 0600, read by ksched itself) in {broker.credentials_file}")
    from scheduler.access_admin import ensure_services
    from scheduler.kafka.admin import AdminError

    try:  # the service principals of this namespace and their ACLs (idempotent)
        issued = ensure_services(settings)
    except AdminError as exc:
        return _fail(exc)
    if issued:
        print(f"kafka: created the service principal(s) {', '.join(issued)} and their ACLs")
    return 0


def _stop(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.bootstrap:
        print(f"kafka: KSCHED_BOOTSTRAP is set ({settings.bootstrap}); not ksched's broker, nothing stopped")
        return 0
    broker = _broker(settings)
    pid = broker.status().pid
    if broker.stop(timeout_s=args.timeout):
        print(f"kafka: stopped pid {pid}")
    else:
        print(f"kafka: not running ({broker.data_dir})")
    return 0


def _external_status(settings: Settings) -> dict[str, Any]:
    from confluent_kafka import KafkaException

    from scheduler.kafka.admin import admin_client

    bootstrap = settings.bootstrap
    admin = admin_client(settings.kafka(), log_level=0)
    try:
        md = admin.list_topics(timeout=5)
    except KafkaException as exc:
        return {
            "external": True, "bootstrap": bootstrap, "healthy": False,
            "detail": f"does not answer metadata: {exc.args[0] if exc.args else exc}",
        }  # fmt: skip
    brokers = sorted(f"{b.id}@{b.host}:{b.port}" for b in md.brokers.values())
    return {
        "external": True,
        "bootstrap": bootstrap,
        "healthy": bool(md.brokers),
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": brokers,
        "topics": sorted(md.topics),
        "detail": f"{len(brokers)} broker(s), {len(md.topics)} topics",
    }


def _status(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.bootstrap:
        info = _external_status(settings)
        if args.json:
            print(json.dumps(info))
        else:
            print(f"external cluster (KSCHED_BOOTSTRAP): {settings.bootstrap}")
            for key in ("healthy", "cluster_id", "controller_id", "brokers", "topics", "detail"):
                if key in info:
                    value = info[key]
                    shown = ", ".join(value) if isinstance(value, list) else value
                    print(f"{key + ':':15} {shown}")
        return 0 if info["healthy"] else 1
    st = _broker(settings).status()
    if args.json:
        print(json.dumps(st.to_json()))
    else:
        _print_status(st)
    return 0 if st.healthy else 1


def _container_config(args: argparse.Namespace) -> int:
    from scheduler.localbroker.container import write_container_files

    s = _settings()
    credentials = write_container_files(
        s.kafka_data_dir, version=s.kafka_version, advertised_host=args.advertised_host,
        port=s.kafka_port, controller_port=s.kafka_controller_port)
    print(f"wrote the broker's files to {s.kafka_data_dir} (credentials: {credentials})")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from scheduler.localbroker import LocalCluster

    broker = _broker(_settings())
    if isinstance(broker, LocalCluster):
        if args.node is None and not args.follow:
            print(broker.logs(args.lines))
            return 0
        node = args.node or 1
        if not 1 <= node <= len(broker.nodes):
            return _fail(ValueError(f"--node {node}: the cluster has nodes 1 to {len(broker.nodes)}"))
        broker = broker.nodes[node - 1]
    text = broker.logs(args.lines)
    if not text:
        print(f"kafka: no logs yet in {broker.logs_dir}", file=sys.stderr)
        if not args.follow:
            return 0
    else:
        print(text)
    if not args.follow:
        return 0
    path = broker.logs_dir / "server.log"
    pos = path.stat().st_size if path.exists() else 0
    try:
        while True:
            time.sleep(0.5)
            if not path.exists():
                continue
            size = path.stat().st_size
            if size < pos:  # rolled over
                pos = 0
            if size > pos:
                with path.open("rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
                pos += len(chunk)
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
