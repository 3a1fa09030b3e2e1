"""The monitoring files of the docker-compose stack: Prometheus alert rules, their unit tests, the Prometheus config,
the Alertmanager config, the Grafana provisioning and dashboard (compassmem/monitoring/), and the runbook of every
alert (docs/runbooks.md).

promtool checks and runs the rules; the metric names they and the dashboard use are checked against the registry
``MemoryMetrics`` builds, so a renamed metric breaks this test rather than a dashboard nobody looks at.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from markdown_anchors import heading_anchors

from compassmem.monitoring.metrics import MemoryMetrics

ROOT = Path(__file__).resolve().parent.parent
MONITORING = ROOT / "compassmem" / "monitoring"
PROMETHEUS = MONITORING / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts_test.yml"
PROMETHEUS_CONFIG = PROMETHEUS / "prometheus.yml"
GRAFANA = MONITORING / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "compassmem.json"
DATASOURCE = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDER = GRAFANA / "provisioning" / "dashboards" / "compassmem.yml"
ALERTMANAGER_CONFIG = MONITORING / "alertmanager" / "alertmanager.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

METRIC_NAME = re.compile(r"\bcompassmem_[a-z0-9_]+")
# Grafana's variables, replaced by something Prometheus parses before promtool sees a dashboard expression.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "1m", "$job": ".*",
                     "$instance": ".*"}
BUILTIN_METRICS = {"up"}


# -- promtool ---------------------------------------------------------------------------------------------------------

def run_tool(tool: str, package: str, *args: str, cwd: Path) -> None:
    """Runs promtool or amtool; fails (never skips) when it is missing: `make test` installs both."""
    executable = shutil.which(tool)
    if executable is None:
        pytest.fail(f"{tool} is not on PATH: run `make test`, which installs it (Debian package `{package}`), "
                    f"or install it yourself (apt-get install {package})")
    result = subprocess.run([executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        f"{tool} {' '.join(args)} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
        f"{result.stderr}")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> None:
    run_tool("promtool", "prometheus", *args, cwd=cwd)


def test_alert_rules_are_valid() -> None:
    promtool("check", "rules", ALERTS.name)


def test_alert_rule_unit_tests_pass() -> None:
    promtool("test", "rules", ALERTS_TEST.name)


def test_prometheus_config_is_valid() -> None:
    promtool("check", "config", PROMETHEUS_CONFIG.name)


def test_alertmanager_config_is_valid() -> None:
    run_tool("amtool", "prometheus-alertmanager", "check-config", ALERTMANAGER_CONFIG.name,
             cwd=ALERTMANAGER_CONFIG.parent)


def test_dashboard_expressions_are_valid_promql(tmp_path: Path) -> None:
    """Each panel query, with Grafana's variables filled in, as a recording rule: promtool parses every one."""
    rules = []
    for index, (title, expr) in enumerate(dashboard_expressions()):
        for variable in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
            expr = expr.replace(variable, GRAFANA_VARIABLES[variable])
        assert "$" not in expr, f"panel {title!r}: a Grafana variable this test does not know: {expr}"
        rules.append({"record": f"dashboard:panel_{index}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    promtool("check", "rules", str(path), cwd=tmp_path)


# -- the files' contents ----------------------------------------------------------------------------------------------

def load_yaml(path: Path) -> dict:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def alert_rules() -> list[dict]:
    groups = load_yaml(ALERTS)["groups"]
    assert [group["name"] for group in groups] == ["compassmem"]
    return [rule for group in groups for rule in group["rules"]]


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_panels(panels: list[dict]) -> Iterator[dict]:
    """Every panel, rows left out (a collapsed row holds its panels inside)."""
    for panel in panels:
        if panel.get("type") == "row":
            yield from dashboard_panels(panel.get("panels", []))
        else:
            yield panel


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable of the dashboard."""
    dashboard = load_dashboard()
    found = [(panel["title"], target["expr"]) for panel in dashboard_panels(dashboard["panels"])
             for target in panel.get("targets", []) if target.get("expr")]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            query = query.get("query", "") if isinstance(query, dict) else query
            match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
            found.append((f"variable {variable['name']}", match.group(1) if match else query))
    return found


def exported_metric_names() -> set[str]:
    """The series names a MemoryMetrics registry exports (labelled metrics included before their first sample)."""
    names: set[str] = set()
    for family in MemoryMetrics().registry.collect():
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def test_every_referenced_metric_exists() -> None:
    exported = exported_metric_names()
    assert "compassmem_dead_letters_total" in exported and "compassmem_query_hops_bucket" in exported
    references = [(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()] + [
        (f"panel {title!r}", expr) for title, expr in dashboard_expressions()]
    assert len(references) > 30
    unknown = [(where, name) for where, expr in references for name in METRIC_NAME.findall(expr)
               if name not in exported]
    assert not unknown, f"metrics not in MemoryMetrics: {unknown}"
    # Names outside compassmem_ must be Prometheus built-ins or the process collectors' metrics.
    other = {name for _, expr in references for name in re.findall(r"\b(up|process_[a-z_]+)\b", expr)}
    assert other <= BUILTIN_METRICS | exported, other - BUILTIN_METRICS - exported


def test_every_alert_is_complete() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "duplicate alert names"
    for rule in rules:
        assert "for" in rule, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        # What was measured ($value; for TargetDown, whose value is always 0, the target's labels).
        assert "{{ $value" in rule["annotations"]["description"] or rule["alert"] == "CompassmemTargetDown", \
            rule["alert"]
    expected = {"CompassmemLowGraphDegree", "CompassmemHighDuplicateRate", "CompassmemRelationConfidenceFalling",
                "CompassmemConsumerLagGrowing", "CompassmemDeadLetters", "CompassmemStoreErrors",
                "CompassmemSlowQueries", "CompassmemTargetDown"}
    assert expected <= set(names), expected - set(names)


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = load_yaml(ALERTS_TEST)
    assert tests["rule_files"] == [ALERTS.name]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert not names - firing, f"alerts never shown firing in {ALERTS_TEST.name}: {sorted(names - firing)}"
    assert not names - silent, f"alerts never shown silent in {ALERTS_TEST.name}: {sorted(names - silent)}"
    assert not (firing | silent) - names, f"tests name unknown alerts: {sorted((firing | silent) - names)}"


def runbook_sections() -> dict[str, str]:
    """Second-level heading -> the text under it, in docs/runbooks.md."""
    parts = RUNBOOKS.read_text(encoding="utf-8").split("\n## ")[1:]
    return {part.split("\n", 1)[0].strip(): part.split("\n", 1)[1] for part in parts}


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    anchors = heading_anchors(RUNBOOKS.read_text(encoding="utf-8"))
    for rule in alert_rules():
        path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert path == "docs/runbooks.md", rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in anchors, (rule["alert"], anchor)


def test_every_runbook_section_is_an_alerts_and_complete() -> None:
    sections = runbook_sections()
    assert set(sections) == {rule["alert"] for rule in alert_rules()}
    for name, text in sections.items():
        for part in ("**Meaning.**", "**Check.**", "**Act.**"):
            assert part in text, f"runbook {name} has no {part}"


def test_prometheus_sends_alerts_to_alertmanager_and_it_to_a_webhook() -> None:
    alerting = load_yaml(PROMETHEUS_CONFIG)["alerting"]
    assert [t for manager in alerting["alertmanagers"] for group in manager["static_configs"]
            for t in group["targets"]] == ["alertmanager:9093"]
    config = load_yaml(ALERTMANAGER_CONFIG)
    receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
    routed = [config["route"]["receiver"], *(route["receiver"] for route in config["route"].get("routes", []))]
    assert set(routed) <= set(receivers)
    webhooks = [hook for receiver in receivers.values() for hook in receiver.get("webhook_configs", [])]
    assert webhooks and all(hook["url"].startswith(("http://", "https://")) for hook in webhooks)


def test_prometheus_scrapes_the_worker_and_the_api() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    assert config["rule_files"] == [ALERTS.name]
    targets = {job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
               for job in config["scrape_configs"]}
    assert targets["compassmem-worker"] == ["worker:9464"]
    assert targets["compassmem-api"] == ["api:8080"]


def test_dashboard_panels_use_the_provisioned_datasource() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "compassmem" and dashboard["title"] == "compassmem"
    assert dashboard["schemaVersion"] == 39
    panels = list(dashboard_panels(dashboard["panels"]))
    assert len(panels) >= 20
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    rows = [panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"]
    assert rows[:4] == ["Memory health", "Ingestion", "Queries", "Stores"]
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target.get("datasource", {}).get("uid", "prometheus") == "prometheus", panel["title"]
            assert target["expr"].strip(), panel["title"]

    datasources = load_yaml(DATASOURCE)["datasources"]
    assert [(d["name"], d["uid"], d["url"], d["isDefault"]) for d in datasources] == [
        ("Prometheus", "prometheus", "http://prometheus:9090", True)]
    providers = load_yaml(DASHBOARD_PROVIDER)["providers"]
    assert [(p["type"], p["options"]["path"]) for p in providers] == [("file", "/var/lib/grafana/dashboards")]
