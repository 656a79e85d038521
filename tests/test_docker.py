"""docker/ checked without Docker (no machine of the project runs it; docker/README.md).

The compose file validates against the Compose Specification schema (the copy check-jsonschema
vendors); every command a ksched service runs parses with the real CLI parser; every KSCHED_*
variable is a setting and loads; every port is the one the settings give; the Kafka service runs
the files ``ksched kafka container-config`` writes; Prometheus gets the shipped rules and
scrapes every service on its metrics port; Grafana's provisioning matches the dashboard; the
Dockerfile's base, user, entry point and command are what docker/README.md promises.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import shlex
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from test_prometheus_rules import promtool

from scheduler.cli import build_parser
from scheduler.localbroker import container
from scheduler.metrics_endpoint import JOBS
from scheduler.settings import Settings, load_settings
from scheduler.tenants import load_tenants

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
DEFAULTS = Settings()
# The metrics port of each job: the `--metrics-port` default of each command (docs/operations.md).
METRICS_PORTS = {"ksched-processor": DEFAULTS.metrics_port, "ksched-worker": DEFAULTS.metrics_port + 1,
                 "ksched-history": DEFAULTS.metrics_port + 2, "ksched-reconcile": DEFAULTS.metrics_port + 3,
                 "ksched-api": DEFAULTS.api_port}


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return data


def ksched_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose()["services"].items() if s.get("image") == "ksched:local"}


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "write environment as a mapping"
    return {str(k): str(v) for k, v in env.items()}


def host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def test_compose_validates_against_the_compose_specification() -> None:
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    broken = {"services": {"x": {"image": "a", "restart": 3, "no_such_key": 1}}}
    assert list(validator.iter_errors(broken)), "the schema must reject a broken file"


def test_every_ksched_command_parses_with_the_real_cli() -> None:
    parser = build_parser()
    services = ksched_services()
    assert {"kafka-config", "topics", "processor-1", "processor-2", "worker", "history", "api",
            "reconcile"} <= set(services)
    for name, service in services.items():
        args = parser.parse_args(service["command"])  # SystemExit(2) on anything unknown
        assert callable(args.handler), name
    worker = parser.parse_args(services["worker"]["command"])
    importlib.import_module(worker.handlers.split(":")[0])
    tenants = load_tenants(DOCKER / services["worker"]["volumes"][1].split(":")[0])
    assert worker.tenant in tenants
    assert parser.parse_args(services["reconcile"]["command"]).tenant in tenants


def test_every_ksched_variable_is_a_setting_that_loads() -> None:
    fields = {f"KSCHED_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    for name, service in ksched_services().items():
        env = env_of(service)
        assert set(env) <= fields, f"{name}: {sorted(set(env) - fields)} are no settings"
        settings = load_settings(env=env)  # raises SettingsError on a bad value
        for key, value in env.items():  # and none restates a default: one place for each
            attr = key.removeprefix("KSCHED_").lower()
            assert str(getattr(DEFAULTS, attr)) != value, f"{name}: {key} repeats the default"
        assert settings.bind_host == "0.0.0.0", f"{name}: Prometheus could not reach it"
    tenants_mount = {v.split(":")[1]: v.split(":")[0] for v in ksched_services()["worker"]["volumes"]}
    assert env_of(ksched_services()["worker"])["KSCHED_TENANTS_FILE"] in tenants_mount


def test_kafka_runs_the_generated_broker_files_on_the_settings_ports(tmp_path: Path) -> None:
    services = compose()["services"]
    kafka, config = services["kafka"], services["kafka-config"]
    env = env_of(config)
    settings = load_settings(env=env)
    assert kafka["image"] == container.image(settings.kafka_version)
    assert kafka["command"] == list(container.COMMAND)
    [volume] = kafka["volumes"]
    assert volume.split(":")[1] == container.MOUNT
    data_volume = f"{volume.split(':')[0]}:{settings.kafka_data_dir}"
    assert all(data_volume in s["volumes"] for s in ksched_services().values())
    uid = re.search(r"useradd --uid (\d+)", (DOCKER / "Dockerfile").read_text())
    assert uid and kafka["user"] == f"{uid[1]}:{uid[1]}"  # reads the 0600 files kafka-config wrote
    host, port = host_port(settings.bootstrap)
    args = build_parser().parse_args(config["command"])
    assert host == args.advertised_host == "kafka" and port == DEFAULTS.kafka_port
    assert f"/{DEFAULTS.kafka_port}" in " ".join(kafka["healthcheck"]["test"])
    written = container.write_container_files(
        tmp_path, version=settings.kafka_version, advertised_host=host, port=port,
        controller_port=settings.kafka_controller_port)
    props = (tmp_path / "server.properties").read_text()
    assert f"advertised.listeners=SASL_PLAINTEXT://kafka:{port}," in props
    assert f"listeners=SASL_PLAINTEXT://0.0.0.0:{port}," in props
    assert f"log.dirs={container.MOUNT}/kraft" in props
    assert written == tmp_path / settings.credentials_path.name
    script = (tmp_path / "start.sh").read_text()
    assert f"-c {container.MOUNT}/server.properties" in script and "--add-scram" in script
    assert (tmp_path / "start.sh").stat().st_mode & 0o077 == 0  # it holds the admin password


def test_history_uses_the_postgres_service() -> None:
    services = compose()["services"]
    dsn = env_of(services["history"])["KSCHED_HISTORY_DSN"]
    pg = env_of(services["postgres"])
    assert dsn == (f"postgresql://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/"
                   f"{pg['POSTGRES_DB']}")
    assert services["history"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_published_ports_are_the_settings_ports() -> None:
    services = compose()["services"]
    published = {n: [p.split(":") for p in s.get("ports", [])] for n, s in services.items()}
    for name, ports in published.items():
        assert all(p[0] == "127.0.0.1" for p in ports), f"{name}: bind published ports to 127.0.0.1"
    assert published["api"] == [["127.0.0.1", str(DEFAULTS.api_port), str(DEFAULTS.api_port)]]
    assert published["prometheus"] == [["127.0.0.1", str(DEFAULTS.prometheus_port), "9090"]]


def test_prometheus_loads_the_shipped_rules_and_scrapes_every_service(tmp_path: Path) -> None:
    services = compose()["services"]
    mounts = dict(reversed(v.split(":")[:2]) for v in services["prometheus"]["volumes"])
    config = yaml.safe_load((DOCKER / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    rules = ROOT / "deploy" / "prometheus" / "rules.yml"
    assert (DOCKER / mounts[config["rule_files"][0]]).resolve() == rules
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        assert job["job_name"] in (*JOBS, "ksched-api")
        for target in job["static_configs"][0]["targets"]:
            host, port = host_port(target)
            assert port == METRICS_PORTS[job["job_name"]], target
            scraped[host] = job["job_name"]
    ksched = ksched_services()
    expected = {n for n in ksched if ksched[n].get("restart") == "unless-stopped"}  # the long-running ones
    assert set(scraped) == expected
    # promtool on the same file, the rules path pointed at the repository's copy
    text = (DOCKER / "prometheus" / "prometheus.yml").read_text()
    local = tmp_path / "prometheus.yml"
    local.write_text(text.replace(config["rule_files"][0], str(rules)))
    promtool("check", "config", "--syntax-only", str(local))


def test_grafana_is_provisioned_with_the_dashboard() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(reversed(v.split(":")[:2]) for v in grafana["volumes"])
    provisioning = DOCKER / mounts["/etc/grafana/provisioning"]
    [provider] = yaml.safe_load((provisioning / "dashboards" / "ksched.yml").read_text())["providers"]
    dashboards = DOCKER / mounts[provider["options"]["path"]]
    [dashboard] = dashboards.glob("*.json")
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090"
    assert source["uid"] in dashboard.read_text()


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    return [(ln.split()[0].upper(), ln.split(None, 1)[1]) for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_dockerfile_is_one_slim_non_root_image_whose_entry_point_is_ksched() -> None:
    steps = dockerfile_instructions()
    [base] = [arg for op, arg in steps if op == "FROM"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base)
    [user] = [arg for op, arg in steps if op == "USER"]
    assert user not in ("root", "0")
    entry = {op: json.loads(arg) for op, arg in steps if op in ("ENTRYPOINT", "CMD")}
    scripts = re.search(r"\[project\.scripts\]\n(\w+) = ", (ROOT / "pyproject.toml").read_text())
    assert scripts and entry["ENTRYPOINT"] == [scripts[1]] == ["ksched"]
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(entry["CMD"])
    assert done.value.code == 0  # --help: a real flag, exits 0
    for op, arg in steps:
        if op == "COPY":
            *sources, _ = [a for a in shlex.split(arg) if not a.startswith("--")]
            assert all((ROOT / s).exists() for s in sources), arg
