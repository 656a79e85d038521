"""The Grafana dashboard (docker/grafana/dashboards/ksched.json) queries only what ksched exports.

Every ``ksched_*`` name in a panel's PromQL must be a series name in ``deploy/prometheus/metrics.txt``;
that list is no hand-kept guess: tests/test_prometheus_e2e.py checks it against the expositions of
a real processor, worker, history indexer and reconciler (:func:`exposition_names`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "ksched.json"
DATASOURCES = ROOT / "docker" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
METRICS_LIST = ROOT / "deploy" / "prometheus" / "metrics.txt"

# The series a family of each type exposes (prometheus_client names a counter's family without _total).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}
_NAME = re.compile(r"\bksched_[a-zA-Z0-9_:]*")


def exposition_names(text: str) -> set[str]:
    """The ``ksched_*`` series names an exposition declares, sampled yet or not (a labelled metric
    with no child still has its HELP and TYPE lines)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.name.startswith("ksched_"):
            names.update(family.name + s for s in _SUFFIXES.get(family.type, ("",)))
    return names


def committed_names() -> set[str]:
    lines = METRICS_LIST.read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries(dash: dict[str, Any]) -> dict[str, list[str]]:
    """Panel title -> its PromQL expressions (rows hold none), plus the template variables'."""
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    out = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in panels}
    for var in dash["templating"]["list"]:
        out[f"${var['name']}"] = [var["definition"]]
    return out


def test_every_query_names_only_metrics_ksched_exports() -> None:
    known = committed_names()
    for title, exprs in queries(dashboard()).items():
        assert exprs, f"panel {title!r} has no query"
        for expr in exprs:
            names = set(_NAME.findall(expr))
            assert names, f"panel {title!r}: {expr!r} names no ksched metric"
            assert names <= known, f"panel {title!r}: {sorted(names - known)} not exported by ksched"


def test_the_dashboard_answers_the_operators_questions() -> None:
    used = {n for exprs in queries(dashboard()).values() for e in exprs for n in _NAME.findall(e)}
    wanted = {  # issue 16 item 4, one metric for each view it asks for
        "ksched_schedule_lag_seconds_bucket",  # per-tenant lag percentiles
        "ksched_emitted_total", "ksched_tenant_quota", "ksched_throttled_total",  # emission rate vs quota
        "ksched_upcoming_occurrences",  # backlog per bucket
        "ksched_shard_owned",  # shard ownership
        "ksched_worker_start_lag_seconds_bucket",  # worker lag
        "ksched_occurrences_total",  # retries / DLQ
        "ksched_reconcile_gaps_total",  # reconciler gaps
    }
    assert wanted <= used, sorted(wanted - used)


def test_panels_use_the_provisioned_datasource_and_fit_the_grid() -> None:
    dash = dashboard()
    [source] = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        uids = {p["datasource"]["uid"]} | {t["datasource"]["uid"] for t in p["targets"]}
        assert uids == {source["uid"]}, p["title"]
        assert [t["refId"] for t in p["targets"]] == [chr(65 + i) for i in range(len(p["targets"]))]


def test_exposition_names_expand_each_family_type() -> None:
    text = ("# HELP ksched_a_total a\n# TYPE ksched_a_total counter\n"
            "# HELP ksched_b_seconds b\n# TYPE ksched_b_seconds histogram\n"
            "# HELP ksched_c c\n# TYPE ksched_c gauge\nksched_c 1.0\n"
            "# HELP python_x x\n# TYPE python_x gauge\npython_x 1.0\n")
    assert exposition_names(text) == {
        "ksched_a_total", "ksched_a_created", "ksched_c",
        "ksched_b_seconds_bucket", "ksched_b_seconds_count", "ksched_b_seconds_sum",
        "ksched_b_seconds_created"}
