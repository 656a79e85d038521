"""A local Prometheus (Debian's ``prometheus`` binary) scraping every registered ksched process.

``render_config`` fills ``deploy/prometheus/prometheus.yml``; ``LocalPrometheus`` runs the server on
127.0.0.1 with that config and ``deploy/prometheus/rules.yml`` (or a given rules file), its data in a
folder of its own. ``ksched demo`` and the tests use it; ``make prometheus-tools`` installs the binary.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from scheduler.resources import resource_dir
from scheduler.subprocesses import stop_all


class PrometheusError(RuntimeError):
    """Prometheus cannot be started or answered an error; the message says what to do."""


def deploy_dir() -> Path:
    return resource_dir("deploy") / "prometheus"


def binary(name: str = "prometheus") -> str:
    found = shutil.which(name)
    if found is None:
        raise PrometheusError(
            f"{name} not found on PATH: run `make prometheus-tools` (Debian's prometheus package)"
        )
    return found


def render_config(
    targets_dir: Path, rules_file: Path | None = None, *, scrape_interval_s: float = 5,
    evaluation_interval_s: float = 5,
) -> str:
    """prometheus.yml for ``targets_dir`` (file_sd) and ``rules_file`` (default: the shipped rules)."""
    template = Template((deploy_dir() / "prometheus.yml").read_text())
    return template.substitute(
        scrape_interval=_duration(scrape_interval_s),
        evaluation_interval=_duration(evaluation_interval_s),
        scrape_timeout=_duration(min(scrape_interval_s, 10)),
        rules_file=json.dumps(str(rules_file or deploy_dir() / "rules.yml")),
        targets_dir=str(targets_dir),
    )


def scaled_rules(factor: float) -> str:
    """The shipped rules with every duration (``for:`` and range selectors) multiplied by ``factor``:
    the same expressions, for a test that cannot wait minutes. Durations are whole milliseconds."""
    text = (deploy_dir() / "rules.yml").read_text()

    def scale(m: re.Match[str]) -> str:
        total = sum(int(n) * _UNIT_MS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h)", m.group(2)))
        return f"{m.group(1)}{max(1, round(total * factor))}ms{m.group(3)}"

    text = re.sub(r"(\[)((?:\d+(?:ms|s|m|h))+)(\])", scale, text)
    text = re.sub(r"(offset )((?:\d+(?:ms|s|m|h))+)()", scale, text)
    return re.sub(r"(for: )((?:\d+(?:ms|s|m|h))+)()", scale, text)


_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass
class LocalPrometheus:
    """``start()`` runs it; ``stop()`` (or the context manager) ends it. Data under ``folder``."""

    folder: Path
    port: int
    targets_dir: Path
    rules_file: Path | None = None
    scrape_interval_s: float = 5
    evaluation_interval_s: float = 5
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout_s: float = 30) -> LocalPrometheus:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        config = self.folder / "prometheus.yml"
        config.write_text(render_config(
            self.targets_dir, self.rules_file, scrape_interval_s=self.scrape_interval_s,
            evaluation_interval_s=self.evaluation_interval_s,
        ))
        log = open(self.folder / "prometheus.log", "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [binary(), f"--config.file={config}", f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError(
                    f"prometheus exited ({self.process.returncode}) at start: see "
                    f"{self.folder / 'prometheus.log'} (port {self.port} taken? "
                    "set prometheus_port / KSCHED_PROMETHEUS_PORT)"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusError(f"prometheus at {self.url} not ready after {ready_timeout_s} s")

    def stop(self) -> None:
        if self.process is not None:
            stop_all([self.process], 10)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/``path``; its ``data`` (PrometheusError when the status is not success)."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise PrometheusError(f"prometheus {path}: {body.get('error')}")
        return body["data"]
