"""The shipped Prometheus rules and config (deploy/prometheus/), checked by promtool.

``make test`` installs promtool (make prometheus-tools): a missing binary is a failure, not a skip.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from scheduler.prometheus_server import binary, deploy_dir, render_config, scaled_rules


def promtool(*args: str, cwd: Path | None = None, stdin: str | None = None) -> str:
    r = subprocess.run([binary("promtool"), *args], cwd=cwd, input=stdin, capture_output=True, text=True)
    assert r.returncode == 0, f"promtool {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_the_rules_are_valid_and_their_unit_tests_pass() -> None:
    promtool("check", "rules", "rules.yml", cwd=deploy_dir())
    assert "SUCCESS" in promtool("test", "rules", "rules_test.yml", cwd=deploy_dir())


def test_every_alert_has_a_unit_test() -> None:
    rules = set(re.findall(r"^\s*- alert: (\w+)", (deploy_dir() / "rules.yml").read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", (deploy_dir() / "rules_test.yml").read_text()))
    assert rules and rules == tested, f"without a test: {rules - tested}; unknown: {tested - rules}"


def test_the_rendered_config_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(render_config(tmp_path / "targets"))
    promtool("check", "config", str(config))


def test_time_scaled_rules_keep_the_expressions_and_divide_every_duration(tmp_path: Path) -> None:
    """The alert-firing test runs the shipped rules 12 times faster; nothing else may change."""
    scaled = scaled_rules(1 / 12)
    (tmp_path / "rules.yml").write_text(scaled)
    promtool("check", "rules", str(tmp_path / "rules.yml"))
    assert "for: 10000ms" in scaled and "[5000ms]" in scaled and "offset 75000ms" in scaled
    durations = re.compile(r"(?:for: |\[|offset )\d+(?:ms|s|m|h)\]?")
    assert durations.sub("D", scaled) == durations.sub("D", (deploy_dir() / "rules.yml").read_text())
