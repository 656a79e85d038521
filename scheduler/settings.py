"""Settings: built-in defaults < a TOML file < ``KSCHED_*`` environment variables.

The defaults are documented, one per line, in ``config/defaults.toml``; a test
pins that file to :class:`Settings`. The file read is ``$KSCHED_CONFIG`` when
set, else ``config/ksched.toml`` in the working directory when present.
Every field ``name`` can be overridden by ``KSCHED_<NAME>`` (upper case).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from scheduler.access import ADMIN_USER
from scheduler.kafka.connection import MECHANISMS, PROTOCOLS, KafkaConnection, resolve
from scheduler.records import schema_ids


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ksched"


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "ksched"


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it and the fix."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    # Where Kafka is. Empty means "the embedded local broker" (ksched kafka start).
    bootstrap: str = ""
    # How clients authenticate (docs/security.md). Empty username: the process's own principal;
    # empty password: that user's password from the credentials file.
    security_protocol: str = "SASL_PLAINTEXT"  # PLAINTEXT | SASL_PLAINTEXT | SASL_SSL | SSL
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_ca_location: str = ""
    credentials_file: str = ""  # empty: <kafka_data_dir>/credentials.json
    # Embedded broker.
    kafka_version: str = "4.1.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    kafka_heap_mb: int = 768
    kafka_nodes: int = 1  # 3: a local cluster (ksched kafka start --nodes 3), node i on kafka_port + 2(i-1)
    kafka_cache_dir: Path = field(default_factory=lambda: _cache_home() / "kafka")
    kafka_data_dir: Path = field(default_factory=lambda: _data_home() / "kafka-data")
    # Topics.
    namespace: str = "ksched"
    partitions: int = 4
    environment: str = "local"  # local | production
    tenants_file: Path = Path("config/tenants.toml")
    # Processor and worker.
    tick_interval_ms: int = 100
    prepare_ahead_s: int = 30  # dispatch records due within this horizon are encoded ahead of time
    tick_budget: int = 20_000  # max dispatches per shard per transaction
    # Under a stream of commands and reports, a shard's transactions start at least this far apart
    # (scheduler/processor/runtime.py, linger_until; docs/api.md): 0 turns it off.
    command_linger_ms: int = 30
    lease_s: int = 30  # a started attempt without a heartbeat for this long is retried
    finished_retention_s: int = 7 * 86_400  # COMPLETED / CANCELED schedules kept this long, then purged
    # Blue/green repartition (docs/operations.md): emit nothing whose time is at or after this
    # epoch second (0: no limit), so the old side of a migration stops at the cutover instant.
    emit_until: int = 0
    start_lease_s: int = 300  # a tracked occurrence not STARTED this long after its dispatch is retried
    # A processor that stops heartbeating loses its shards after this long (docs/operations.md):
    # part of the failover time a strict occurrence can see. Brokers refuse less than their
    # group.min.session.timeout.ms (Kafka's default 6000; the embedded broker allows 1000).
    processor_session_timeout_ms: int = 3000
    # Each processor keeps warm copies of the shards it does not own (scheduler/processor/standby.py):
    # a failover then reads only their tail. 0: none (a new owner restores from the start).
    standby_replicas: int = 1
    metrics_port: int = 9464
    # The address /metrics and the API listen on. 127.0.0.1 everywhere but in a container, where
    # Prometheus and the published ports reach the process from outside (docker/compose.yaml).
    bind_host: str = "127.0.0.1"
    api_port: int = 8080
    api_rate_per_s: int = 2000  # requests per second per tenant on each API instance; 0: no limit
    # Prometheus (docs/operations.md): where every process registers its /metrics endpoint (a
    # file_sd folder; empty: <kafka_data_dir>/../prometheus/targets), the port of the Prometheus
    # `ksched demo` starts, and the URL `ksched status` links to (empty: that local one).
    prometheus_sd_dir: str = ""
    prometheus_port: int = 9468
    prometheus_url: str = ""
    # History store (ksched history): empty = the SQLite file history.db in the data dir; else
    # sqlite:///PATH, a file path, or a PostgreSQL URL / libpq string (docs/history.md).
    history_dsn: str = ""
    # How the processor frames the records other services read (docs/contract.md, "Framing"):
    # single-object (Avro's own, no extra service) or confluent (00 + registry schema id) against
    # the Confluent-compatible schema registry API at schema_registry_url. Readers decode both.
    record_framing: str = "single-object"  # single-object | confluent
    schema_registry_url: str = ""  # e.g. http://127.0.0.1:8080/apis/ccompat/v7 (Apicurio)
    # The processor writes a run of occurrence events as OccurrenceEvents records, several events
    # each (docs/contract.md §4); false: one OccurrenceEvent record an event, for readers older
    # than that record. Confluent framing always writes one an event (one schema a subject).
    batch_events: bool = True

    @property
    def bootstrap_servers(self) -> str:
        """The bootstrap list to connect to: the configured one, or the local broker."""
        if self.bootstrap:
            return self.bootstrap
        return ",".join(f"127.0.0.1:{self.kafka_port + 2 * i}" for i in range(self.kafka_nodes))

    @property
    def history_default_sqlite(self) -> Path:
        """The SQLite file used when ``history_dsn`` is empty."""
        return _data_home() / "history.db"

    @property
    def prometheus_targets_dir(self) -> Path:
        """The file_sd folder the processes register their /metrics endpoint in."""
        if self.prometheus_sd_dir:
            return Path(self.prometheus_sd_dir).expanduser()
        return Path(self.kafka_data_dir).expanduser().parent / "prometheus" / "targets"

    @property
    def prometheus_link(self) -> str:
        """The Prometheus an operator should open: the setting, else the local one."""
        return self.prometheus_url or f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def embedded(self) -> bool:
        return not self.bootstrap

    @property
    def credentials_path(self) -> Path:
        """The credentials file: the setting, else the embedded broker's under its data dir."""
        if self.credentials_file:
            return Path(self.credentials_file).expanduser()
        return Path(self.kafka_data_dir).expanduser() / "credentials.json"

    def kafka(self, principal: str = ADMIN_USER, *, group_prefix: str = "ksched-") -> KafkaConnection:
        """The connection of ``principal`` (default: the admin) — unless ``sasl_username`` names
        another user: explicit settings win. Raises ``CredentialsError`` when no password is found.
        ``group_prefix``: where the principal's consumer group ids live (``scheduler.access``)."""
        return resolve(
            self.bootstrap_servers,
            protocol=self.security_protocol,
            mechanism=self.sasl_mechanism,
            username=self.sasl_username,
            password=self.sasl_password,
            ssl_ca_location=self.ssl_ca_location,
            credentials_file=self.credentials_path,
            principal=principal,
            group_prefix=group_prefix,
        )

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _coerce(name: str, raw: Any, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            return str(raw).lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, Path):
            return Path(str(raw)).expanduser()
        return str(raw)
    except ValueError:
        raise SettingsError(
            f"setting {name}: {raw!r} is not a valid {type(default).__name__}; "
            f"set KSCHED_{name.upper()} to e.g. {default!r}"
        ) from None


def _validate_security(s: Settings) -> None:
    if s.security_protocol not in PROTOCOLS:
        raise SettingsError(
            f"setting security_protocol: {s.security_protocol!r} is not one of {', '.join(PROTOCOLS)}; "
            "set KSCHED_SECURITY_PROTOCOL"
        )
    if s.security_protocol.startswith("SASL_") and s.sasl_mechanism not in MECHANISMS:
        raise SettingsError(
            f"setting sasl_mechanism: {s.sasl_mechanism!r} is not one of {', '.join(MECHANISMS)}; "
            "set KSCHED_SASL_MECHANISM"
        )
    if s.sasl_password and not s.sasl_username:
        raise SettingsError(
            "setting sasl_password is set but sasl_username is empty; set KSCHED_SASL_USERNAME too"
        )


def _validate(s: Settings) -> Settings:
    _validate_security(s)
    if s.environment not in ("local", "production"):
        raise SettingsError(
            f"setting environment: {s.environment!r} is not one of local, production"
        )
    if s.partitions < 1:
        raise SettingsError(f"setting partitions: {s.partitions} must be at least 1")
    if not 1 <= s.kafka_nodes <= 5:
        raise SettingsError(f"setting kafka_nodes: {s.kafka_nodes} must be 1 to 5 (local nodes)")
    if not s.namespace or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-_" for c in s.namespace):
        raise SettingsError(
            f"setting namespace: {s.namespace!r} must be lower-case letters, digits, '-' or '_'"
        )
    _validate_processor(s)
    if s.api_rate_per_s < 0:
        raise SettingsError(f"setting api_rate_per_s: {s.api_rate_per_s} must be 0 (no limit) or more")
    _validate_framing(s)
    return s


def _validate_processor(s: Settings) -> None:
    if s.prepare_ahead_s < 0:
        raise SettingsError(f"setting prepare_ahead_s: {s.prepare_ahead_s} must be 0 or more")
    if s.lease_s < 1:
        raise SettingsError(f"setting lease_s: {s.lease_s} must be at least 1 (seconds)")
    if s.finished_retention_s < 0:
        raise SettingsError(
            f"setting finished_retention_s: {s.finished_retention_s} must be 0 or more (seconds)"
        )
    if s.start_lease_s < 1:
        raise SettingsError(
            f"setting start_lease_s: {s.start_lease_s} must be at least 1 (seconds); "
            "set KSCHED_START_LEASE_S to e.g. 300"
        )
    if s.processor_session_timeout_ms < 1000:
        raise SettingsError(
            f"setting processor_session_timeout_ms: {s.processor_session_timeout_ms} must be at least "
            "1000; set KSCHED_PROCESSOR_SESSION_TIMEOUT_MS to e.g. 3000"
        )
    if s.standby_replicas < 0:
        raise SettingsError(
            f"setting standby_replicas: {s.standby_replicas} must be 0 (no warm copies) or more; "
            "set KSCHED_STANDBY_REPLICAS to 1"
        )
    if s.tick_budget < 1:
        raise SettingsError(f"setting tick_budget: {s.tick_budget} must be at least 1")
    if s.tick_interval_ms < 1:
        raise SettingsError(f"setting tick_interval_ms: {s.tick_interval_ms} must be positive")
    if s.command_linger_ms < 0:
        raise SettingsError(
            f"setting command_linger_ms: {s.command_linger_ms} must be 0 (off) or more; "
            "set KSCHED_COMMAND_LINGER_MS to e.g. 30"
        )


RECORD_FRAMINGS = ("single-object", "confluent")


def _validate_framing(s: Settings) -> None:
    if s.record_framing not in RECORD_FRAMINGS:
        raise SettingsError(
            f"setting record_framing: {s.record_framing!r} is not one of {', '.join(RECORD_FRAMINGS)}; "
            "set KSCHED_RECORD_FRAMING"
        )
    if s.record_framing == "confluent" and not s.schema_registry_url:
        raise SettingsError(
            "setting record_framing is confluent but schema_registry_url is empty: set "
            "KSCHED_SCHEMA_REGISTRY_URL to the registry's Confluent-compatible base URL (Apicurio: "
            "http://HOST:PORT/apis/ccompat/v7), or KSCHED_RECORD_FRAMING=single-object"
        )
    if s.schema_registry_url and not s.schema_registry_url.startswith(("http://", "https://")):
        raise SettingsError(
            f"setting schema_registry_url: {s.schema_registry_url!r} is not an http(s) URL; "
            "set KSCHED_SCHEMA_REGISTRY_URL to e.g. http://127.0.0.1:8080/apis/ccompat/v7"
        )


def load_settings(env: dict[str, str] | None = None, config_file: Path | None = None) -> Settings:
    """Build the effective settings.

    Pre: ``env`` defaults to ``os.environ``. Post: every field is typed and validated;
    an unknown key in the TOML file raises :class:`SettingsError` naming it.
    """
    env = dict(os.environ if env is None else env)
    base = Settings()
    values: dict[str, Any] = {}
    known = {f.name: getattr(base, f.name) for f in fields(Settings)}
    path = config_file or (Path(env["KSCHED_CONFIG"]) if env.get("KSCHED_CONFIG") else None)
    if path is None and Path("config/ksched.toml").is_file():
        path = Path("config/ksched.toml")
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"config file {path}: {exc}") from None
        for key, raw in data.items():
            if key not in known:
                raise SettingsError(
                    f"config file {path}: unknown setting {key!r}; known: {', '.join(sorted(known))}"
                )
            values[key] = _coerce(key, raw, known[key])
    for name, default in known.items():
        raw = env.get(f"KSCHED_{name.upper()}")
        if raw is not None:
            values[name] = _coerce(name, raw, default)
    settings = _validate(dataclasses.replace(base, **values))
    schema_ids.settings_loaded(settings.schema_registry_url)  # the registry readers of 00-framed records ask
    return settings
