"""Faults a benchmark injects while it measures: a local cluster's node killed and restarted, a
processor killed."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.settings import Settings


class BrokerFault:
    """Kills the local cluster's last node ``before_s`` before ``due`` and restarts it ``down_s`` later,
    on a thread of its own; :attr:`facts` says what happened (for the report)."""

    def __init__(self, settings: Settings, before_s: float, down_s: float) -> None:
        from scheduler.localbroker import LocalCluster, for_settings

        cluster = None if settings.bootstrap else for_settings(settings)
        if not isinstance(cluster, LocalCluster):
            raise SystemExit("--kill-broker needs the local cluster: `ksched kafka start --nodes 3` and "
                             "KSCHED_KAFKA_NODES=3 (KSCHED_BOOTSTRAP unset)")
        self.cluster, self.before_s, self.down_s = cluster, before_s, down_s
        self.facts: dict[str, float | str] = {}
        self._thread: threading.Thread | None = None

    def arm(self, due: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(due,), name="broker-fault", daemon=True)
        self._thread.start()

    def _run(self, due: int) -> None:
        node = self.cluster.nodes[-1]
        time.sleep(max(0.0, due - self.before_s - time.time()))
        pid = node.status().pid
        if pid is None:
            self.facts["error"] = "the node to kill was not running"
            return
        os.kill(pid, signal.SIGKILL)
        self.facts["broker_killed_s_before_due"] = due - time.time()
        time.sleep(self.down_s)
        started = time.monotonic()
        try:
            self.cluster.start(timeout_s=240)
            self.facts["broker_restart_s"] = time.monotonic() - started
        except Exception as exc:  # reported, not raised: the burst's figures still count
            self.facts["error"] = f"restart failed: {exc}"

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(300)


class ProcessorFault:
    """SIGKILLs one processor process ``before_s`` seconds before ``due`` (on a thread of its own): the
    failover the 5 s SLO must survive. With two processors the killed one owns half the shards;
    :attr:`facts` says when it died."""

    def __init__(self, before_s: float) -> None:
        self.before_s = before_s
        self.facts: dict[str, float | str] = {}
        self.killed: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def arm(self, due: int, victim: subprocess.Popen[bytes]) -> None:
        self._thread = threading.Thread(target=self._run, args=(due, victim), name="processor-fault",
                                        daemon=True)
        self._thread.start()

    def _run(self, due: int, victim: subprocess.Popen[bytes]) -> None:
        time.sleep(max(0.0, due - self.before_s - time.time()))
        if victim.poll() is not None:
            self.facts["error"] = "the processor to kill had already exited"
            return
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.killed = victim
        self.facts["processor_killed_s_before_due"] = due - time.time()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(300)
