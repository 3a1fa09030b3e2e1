"""The one settings model: environment, .env and an optional TOML file; wrong input stops start-up by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compassmem.core.config import Settings, SettingsFileError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.upper().startswith("COMPASSMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no stray .env file


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_toml_file_sets_values_and_the_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = write(tmp_path / "compassmem.toml", 'qdrant_url = "http://qdrant:6333"\napi_port = 9000\n'
                                                 'kafka_partitions = 8\n')
    monkeypatch.setenv("COMPASSMEM_CONFIG_FILE", str(config))
    settings = Settings()
    assert (settings.qdrant_url, settings.api_port, settings.kafka_partitions) == ("http://qdrant:6333", 9000, 8)
    monkeypatch.setenv("COMPASSMEM_API_PORT", "7000")
    assert Settings().api_port == 7000


def test_a_dotenv_file_in_the_working_directory_is_read(tmp_path: Path) -> None:
    write(tmp_path / ".env", "COMPASSMEM_METRICS_PORT=9999\n")
    assert Settings().metrics_port == 9999


@pytest.mark.parametrize(("content", "expected"), [
    ('api_portt = 9000\n', "unknown setting 'api_portt'"),
    ('api_port = \n', "is not valid TOML"),
])
def test_a_bad_toml_file_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str,
                                            expected: str) -> None:
    monkeypatch.setenv("COMPASSMEM_CONFIG_FILE", str(write(tmp_path / "bad.toml", content)))
    with pytest.raises(SettingsFileError, match=expected):
        Settings()


def test_a_missing_config_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COMPASSMEM_CONFIG_FILE", str(tmp_path / "nowhere.toml"))
    with pytest.raises(SettingsFileError, match="COMPASSMEM_CONFIG_FILE: no such file"):
        Settings()


def test_an_unknown_environment_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPASSMEM_QDRANT_ULR", "http://typo:6333")
    with pytest.raises(SettingsFileError, match="unknown setting COMPASSMEM_QDRANT_ULR"):
        Settings()


def run_cli(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMPASSMEM_")}
    return subprocess.run([sys.executable, "-m", "compassmem.cli", "ask", "c1", "q"], env={**clean, **env},
                          cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("env", "message"), [
    ({"COMPASSMEM_API_PORT": "70000"}, "error: COMPASSMEM_API_PORT (api_port): Input should be less than or equal"),
    ({"COMPASSMEM_METRICS_LAG_INTERVAL_S": "0"}, "error: COMPASSMEM_METRICS_LAG_INTERVAL_S (metrics_lag_interval_s)"),
    ({"COMPASSMEM_KAFKA_BOOTSTRAP": "kafka"}, "error: COMPASSMEM_KAFKA_BOOTSTRAP (kafka_bootstrap)"),
    ({"COMPASSMEM_METRIC_PORT": "1"}, "error: unknown setting COMPASSMEM_METRIC_PORT"),
    ({"COMPASSMEM_CURSOR_SECRET": "short"}, "error: COMPASSMEM_CURSOR_SECRET (cursor_secret): Value error, must be at "
                                            "least 16 characters, got 5"),
])
def test_the_cli_stops_at_start_naming_the_setting(tmp_path: Path, env: dict[str, str], message: str) -> None:
    result = run_cli(env, tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_wrong_value_in_the_toml_file_is_named_too(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", 'log_level = "LOUD"\n')
    result = run_cli({"COMPASSMEM_CONFIG_FILE": str(config)}, tmp_path)
    assert result.returncode == 2 and "error: COMPASSMEM_LOG_LEVEL (log_level): String should match" in result.stderr


def test_one_key_for_two_tenants_stops_the_cli_naming_the_setting(tmp_path: Path) -> None:
    result = run_cli({"COMPASSMEM_API_KEYS": '{"acme": "k", "globex": "k"}'}, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: COMPASSMEM_API_KEYS (api_keys): ") and "'acme'" in line


@pytest.mark.parametrize("entry", ["http://memory.internal", "memory.internal:8080", "", "a b"])
def test_allowed_hosts_are_host_names(entry: str) -> None:
    with pytest.raises(ValueError, match="api_allowed_hosts"):
        Settings(_env_file=None, api_allowed_hosts=[entry])  # type: ignore[call-arg]
