from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from scheduler.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_file_documents_every_setting_with_its_default() -> None:
    documented = tomllib.loads((ROOT / "config" / "defaults.toml").read_text())
    text = (ROOT / "config" / "defaults.toml").read_text()
    base = Settings()
    for f in fields(Settings):
        assert f.name in text, f"config/defaults.toml does not mention {f.name}"
        if f.name in documented:
            value = getattr(base, f.name)
            assert str(documented[f.name]) == str(value), f.name


def test_env_overrides_file_overrides_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "k.toml"
    cfg.write_text('namespace = "fromfile"\npartitions = 8\n')
    s = load_settings(env={"KSCHED_PARTITIONS": "12"}, config_file=cfg)
    assert (s.namespace, s.partitions) == ("fromfile", 12)
    assert s.embedded and s.bootstrap_servers == "127.0.0.1:9092"
    s2 = load_settings(env={"KSCHED_BOOTSTRAP": "10.0.0.1:9092"})
    assert not s2.embedded and s2.bootstrap_servers == "10.0.0.1:9092"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KSCHED_PARTITIONS": "many"}, "setting partitions: 'many' is not a valid int"),
        ({"KSCHED_PARTITIONS": "0"}, "setting partitions: 0 must be at least 1"),
        ({"KSCHED_ENVIRONMENT": "staging"}, "setting environment: 'staging' is not one of local, production"),
        ({"KSCHED_NAMESPACE": "Bad.Name"}, "setting namespace: 'Bad.Name' must be lower-case"),
        ({"KSCHED_COMMAND_LINGER_MS": "-1"}, "setting command_linger_ms: -1 must be 0"),
    ],
)
def test_bad_settings_name_the_field(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_settings(env=env)


def test_unknown_key_in_file_is_rejected(tmp_path: Path) -> None:
    cfg = tmp_path / "k.toml"
    cfg.write_text("partitons = 3\n")
    with pytest.raises(SettingsError, match="unknown setting 'partitons'"):
        load_settings(env={}, config_file=cfg)
