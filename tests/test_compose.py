"""docker-compose.yml, the Dockerfile and the settings table of docs/settings.md, checked without a Docker engine:
the stack is wired the way the settings model and `compassmem api` expect, and the files it mounts exist."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_file import COMPOSE_FILE, compose_environment, load_compose

from compassmem.core.config import API_KEY_VARIABLE, CONFIG_FILE_VARIABLE, ENV_PREFIX, Settings
from compassmem.query_api.host_check import HostCheckMiddleware
from compassmem.query_api.server import check_api_topology, check_exposure

ROOT = COMPOSE_FILE.parent
SERVICES = {"kafka", "qdrant", "falkordb", "worker", "api", "prometheus", "alertmanager", "grafana"}
STATEFUL = {"kafka", "qdrant", "falkordb", "prometheus", "alertmanager", "grafana"}
COMPASSMEM = ("worker", "api")
KNOWN_VARIABLES = ({f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
                   | {CONFIG_FILE_VARIABLE, API_KEY_VARIABLE})
# The worker and the API must read and write the same topics, consumer group, collection and embedding space.
SHARED = ["kafka_bootstrap", "qdrant_url", "qdrant_collection", "falkordb_url", "embedding_model", "kafka_app_id",
          "kafka_partitions", "turns_topic", "control_topic", "events_topic", "relations_topic", "clusters_topic",
          "dlq_topic"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


def settings_of(service: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a container of ``service`` starts with: its environment alone (no .env file, no TOML)."""
    for name in [n for n in os.environ if n.upper().startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in compose_environment(service).items():
        monkeypatch.setenv(name, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def container_ports(service: dict[str, Any]) -> set[int]:
    """Container side of ``ports`` ("127.0.0.1:${X:-8080}:8080" -> 8080)."""
    return {int(str(entry).rsplit(":", 1)[-1].split("/")[0]) for entry in service.get("ports", [])}


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of every volume entry that names a host path rather than a named volume."""
    entries = [str(entry).split(":") for entry in service.get("volumes", [])]
    return [(parts[0], parts[1]) for parts in entries if parts[0].startswith((".", "/"))]


def test_every_service_exists_and_has_a_healthcheck(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert SERVICES <= set(services), f"missing: {sorted(SERVICES - set(services))}"
    for name, service in services.items():
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no health check"


def test_stateful_services_keep_their_data_in_declared_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        named = [str(v).split(":")[0] for v in service.get("volumes", []) if not str(v).startswith((".", "/"))]
        assert set(named) <= declared, f"{name} mounts undeclared volumes {sorted(set(named) - declared)}"
        if name in STATEFUL:
            assert named, f"{name} keeps its data in the container only"


def test_services_start_in_order_and_compassmem_restarts(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
    for name in COMPASSMEM:
        assert {"kafka", "qdrant", "falkordb"} <= set(services[name]["depends_on"]), name
        # The worker exits with code 70 on a store failure and must come back.
        assert services[name].get("restart") in {"always", "unless-stopped", "on-failure"}, name
        assert services[name].get("build") in (".", {"context": "."}), f"{name} is not built from the Dockerfile"
    # The API must not produce before the worker has created the topics with their partition counts.
    assert "worker" in services["api"]["depends_on"]


def test_every_compassmem_variable_is_a_setting(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        variables = {v for v in compose_environment(name) if v.upper().startswith(ENV_PREFIX)}
        assert variables <= KNOWN_VARIABLES, f"{name}: not settings: {sorted(variables - KNOWN_VARIABLES)}"
    # Interpolated from the user's shell or .env: a COMPASSMEM_* name there must be a setting as well, or every
    # compassmem command run from that shell would refuse to start. Every interpolation needs a default.
    text = COMPOSE_FILE.read_text()
    interpolated = re.findall(r"\$\{([A-Za-z0-9_]+)([^}]*)\}", text)
    assert all(rest.startswith(":-") for _, rest in interpolated), "an interpolation without a default"
    prefixed = {name for name, _ in interpolated if name.startswith(ENV_PREFIX)}
    assert prefixed <= KNOWN_VARIABLES, sorted(prefixed - KNOWN_VARIABLES)


@pytest.mark.parametrize("service", COMPASSMEM)
def test_compassmem_environment_validates_into_the_split_topology(service: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_of(service, monkeypatch)
    check_api_topology(settings)  # raises unless both stores are servers
    assert settings.kafka_bootstrap == "kafka:9092"
    assert settings.qdrant_url == "http://qdrant:6333" and settings.falkordb_url == "redis://falkordb:6379"
    # Inside a container, 127.0.0.1 would be unreachable from Prometheus and the published ports.
    assert settings.api_host == "0.0.0.0" and settings.metrics_host == "0.0.0.0"


def test_worker_and_api_share_one_environment_block(compose: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    shared = compose["x-compassmem-env"]
    for name in ["COMPASSMEM_KAFKA_APP_ID", "COMPASSMEM_KAFKA_PARTITIONS", "COMPASSMEM_TURNS_TOPIC",
                 "COMPASSMEM_CONTROL_TOPIC"]:
        assert name in shared, f"{name} is not in x-compassmem-env"
    for service in COMPASSMEM:
        environment = compose["services"][service]["environment"]
        overridden = {k for k, v in shared.items() if environment.get(k) != v}
        assert not overridden, f"{service} overrides the shared {sorted(overridden)}"
    worker, api = settings_of("worker", monkeypatch), settings_of("api", monkeypatch)
    assert {f: getattr(worker, f) for f in SHARED} == {f: getattr(api, f) for f in SHARED}


def test_published_ports_and_healthchecks_match_the_settings(compose: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose["services"]
    worker, api = settings_of("worker", monkeypatch), settings_of("api", monkeypatch)
    assert worker.metrics_port in container_ports(services["worker"])
    assert api.api_port in container_ports(services["api"])
    assert f":{worker.metrics_port}/metrics" in " ".join(services["worker"]["healthcheck"]["test"])
    assert f":{api.api_port}/healthz" in " ".join(services["api"]["healthcheck"]["test"])


def test_kafka_advertises_the_bootstrap_address_the_containers_use(compose: dict[str, Any],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = compose["services"]["kafka"]["environment"]
    advertised = [address.split("://", 1)[1] for address in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")]
    assert settings_of("worker", monkeypatch).kafka_bootstrap in advertised
    assert "broker" in kafka["KAFKA_PROCESS_ROLES"] and "controller" in kafka["KAFKA_PROCESS_ROLES"]
    # KRaft formats its storage with CLUSTER_ID: it must be a Kafka UUID (16 bytes, base64url without padding).
    assert len(base64.urlsafe_b64decode(kafka["CLUSTER_ID"] + "==")) == 16


def test_every_bind_mounted_host_path_exists(compose: dict[str, Any]) -> None:
    mounts = [(name, host) for name, service in compose["services"].items() for host, _ in bind_mounts(service)]
    assert any(name == "prometheus" for name, _ in mounts) and any(name == "grafana" for name, _ in mounts)
    missing = [f"{name}: {host}" for name, host in mounts if not (ROOT / host).exists()]
    assert not missing, f"bind-mounted paths missing from the repository: {missing}"


def test_prometheus_scrapes_the_worker_and_the_api_and_loads_the_mounted_rules(
        compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    mounts = dict(bind_mounts(compose["services"]["prometheus"]))
    config_host = next(host for host, target in mounts.items() if target == "/etc/prometheus/prometheus.yml")
    config = yaml.safe_load((ROOT / config_host).read_text())
    targets = {t for job in config["scrape_configs"] for group in job.get("static_configs", [])
               for t in group["targets"]}
    worker, api = settings_of("worker", monkeypatch), settings_of("api", monkeypatch)
    assert {f"worker:{worker.metrics_port}", f"api:{api.api_port}"} <= targets
    for rule_file in config.get("rule_files", []):
        assert str(Path("/etc/prometheus") / rule_file) in mounts.values(), f"{rule_file} is not mounted"
    # The API answers the Host Prometheus sends, and the healthcheck's.
    hosts = HostCheckMiddleware(None, bind_host=api.api_host, allowed_hosts=api.api_allowed_hosts)  # type: ignore[arg-type]
    assert hosts.answers(f"api:{api.api_port}") and hosts.answers(f"127.0.0.1:{api.api_port}")


def test_the_api_container_may_listen_on_every_interface(compose: dict[str, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.0.0.0 without keys needs saying so; the published port is bound to the host's 127.0.0.1 only.
    command = compose["services"]["api"]["command"]
    check_exposure(settings_of("api", monkeypatch), insecure_no_auth="--insecure-no-auth" in command)
    assert all(port.startswith("127.0.0.1:") for port in compose["services"]["api"]["ports"])


def test_prometheus_reaches_the_alertmanager_service_which_reads_the_mounted_config(
        compose: dict[str, Any]) -> None:
    prometheus, alertmanager = compose["services"]["prometheus"], compose["services"]["alertmanager"]
    config_host = next(host for host, target in bind_mounts(prometheus) if target == "/etc/prometheus/prometheus.yml")
    config = yaml.safe_load((ROOT / config_host).read_text())
    targets = [t for manager in config["alerting"]["alertmanagers"] for group in manager["static_configs"]
               for t in group["targets"]]
    assert targets == [f"alertmanager:{port}" for port in container_ports(alertmanager)]
    assert "alertmanager" in prometheus["depends_on"]
    config_flag = next(arg for arg in alertmanager["command"] if arg.startswith("--config.file="))
    assert config_flag.removeprefix("--config.file=") in dict(bind_mounts(alertmanager)).values()


def test_grafana_provisions_the_dashboard_the_docs_name(compose: dict[str, Any]) -> None:
    mounts = dict(bind_mounts(compose["services"]["grafana"]))
    dashboards = next(host for host, target in mounts.items() if target == "/var/lib/grafana/dashboards")
    titles = {json.loads(path.read_text()).get("title") for path in (ROOT / dashboards).glob("*.json")}
    assert "compassmem" in titles, f"dashboards found: {titles}"


def test_dockerfile_pins_cpu_torch_and_runs_compassmem() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.M)
    assert re.search(r"pip install --index-url https://download\.pytorch\.org/whl/cpu torch==2\.13\.0", dockerfile)
    assert re.search(r'^ENTRYPOINT \["compassmem"\]', dockerfile, re.M)
    assert re.search(r"^USER (?!root\b|0\b)\S+", dockerfile, re.M), "the image must not run as root"
    assert "HF_HUB_OFFLINE=1" in dockerfile
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", dockerfile, re.M) for p in line.split()}
    defaults = Settings.model_fields
    assert {defaults["api_port"].default, defaults["metrics_port"].default} <= exposed


def documented_settings_rows() -> dict[str, str]:
    """Variable -> default cell of the settings table of the documentation (docs/settings.md)."""
    text = (ROOT / "docs" / "settings.md").read_text()
    rows = re.findall(r"^\| `(COMPASSMEM_[A-Z0-9_]+)` \| ([^|]*) \|", text, re.M)
    return {name: default.strip() for name, default in rows}


def test_settings_page_lists_every_setting_with_its_default() -> None:
    rows = documented_settings_rows()
    assert set(rows) == KNOWN_VARIABLES, (f"missing: {sorted(KNOWN_VARIABLES - set(rows))}, "
                                          f"not settings: {sorted(set(rows) - KNOWN_VARIABLES)}")
    for name, field in Settings.model_fields.items():
        cell = rows[f"{ENV_PREFIX}{name.upper()}"]
        expected = "unset" if field.default is None or field.default_factory else f"`{field.default}`"
        assert cell == expected, f"{ENV_PREFIX}{name.upper()}: docs/settings.md says {cell}, Settings says {expected}"
