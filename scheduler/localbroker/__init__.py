"""The embedded local Apache Kafka 4.x broker behind ``ksched kafka start`` (development and tests).

One combined broker+controller JVM (KRaft) bound to 127.0.0.1 -- or a cluster of them
(:mod:`~scheduler.localbroker.cluster`, ``--nodes 3``) -- its jars
resolved once with Maven into a per-user cache and reused offline afterwards.
Not part of the Kafka client layer (:mod:`scheduler.kafka`): nothing in the
scheduler's runtime path imports this package.

Modules: :mod:`~scheduler.localbroker.java` (finding Java 17+),
:mod:`~scheduler.localbroker.maven` (the jar cache), :mod:`~scheduler.localbroker.config`
(settings and generated config text), :mod:`~scheduler.localbroker.storage` (the data
dir and its KRaft format), :mod:`~scheduler.localbroker.system` (processes, ports,
locks, log tails), :mod:`~scheduler.localbroker.broker` (the process lifecycle).

Layout::

    cache_dir/m2/                 ksched's own Maven local repository (so "cold" is reproducible)
    cache_dir/<version>/pom.xml   the generated resolver pom
    cache_dir/<version>/libs/     the broker's classpath (``libs/*``)
    cache_dir/<version>/.complete marker: written last, lists every jar; no marker = not reused
    data_dir/server.properties    generated on every start
    data_dir/log4j2.properties    generated on every start
    data_dir/kraft/               KRaft metadata + topic data (``log.dirs``)
    data_dir/broker.pid           pid of the broker JVM
    data_dir/broker.json          ports and cluster id the storage was formatted with
    data_dir/logs/server.log      log4j2 output (rolled at 10 MB, 3 kept)
    data_dir/logs/kafka.out       the JVM's stdout/stderr of the latest start (crashes, JVM warnings)

Every error is a :class:`LocalBrokerError` whose ``str()`` is one line naming the fix.
"""

from __future__ import annotations

from scheduler.localbroker.broker import BrokerStatus, LocalBroker
from scheduler.localbroker.cluster import LocalCluster, for_settings
from scheduler.localbroker.config import BrokerConfig, kafka_uuid, server_properties
from scheduler.localbroker.errors import LocalBrokerError
from scheduler.localbroker.java import find_java, parse_java_major
from scheduler.localbroker.maven import last_maven_error
from scheduler.localbroker.system import port_in_use

__all__ = [
    "BrokerConfig",
    "BrokerStatus",
    "LocalBroker",
    "LocalBrokerError",
    "LocalCluster",
    "find_java",
    "for_settings",
    "kafka_uuid",
    "last_maven_error",
    "parse_java_major",
    "port_in_use",
    "server_properties",
]
