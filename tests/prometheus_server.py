"""A real Prometheus (Debian's `prometheus` package, installed by `make test` with promtool) for end-to-end tests:
the shipped scrape config and alert rules, pointed at test targets, scraping and evaluating every second."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from dev_process import serving_child

PROMETHEUS_DIR = Path(__file__).resolve().parent.parent / "compassmem" / "monitoring" / "prometheus"


def prometheus_config(targets: Mapping[str, str]) -> dict[str, Any]:
    """compassmem/monitoring/prometheus/prometheus.yml with only the jobs in ``targets`` (job -> host:port)."""
    shipped = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    # No Alertmanager here: the tests read firing alerts from Prometheus's own API.
    shipped.pop("alerting", None)
    jobs = []
    for job in shipped["scrape_configs"]:
        if job["job_name"] in targets:
            jobs.append({**job, "scrape_interval": "1s", "scrape_timeout": "1s",
                         "static_configs": [{"targets": [targets[job["job_name"]]]}]})
    missing = set(targets) - {job["job_name"] for job in jobs}
    assert not missing, f"no such job in prometheus.yml: {sorted(missing)}"
    return {**shipped, "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(PROMETHEUS_DIR / name) for name in shipped["rule_files"]], "scrape_configs": jobs}


@contextmanager
def running_prometheus(targets: Mapping[str, str], workdir: Path, port: int) -> Iterator[str]:
    """Yields Prometheus's base URL once it is ready."""
    executable = shutil.which("prometheus")
    if executable is None:
        pytest.fail("prometheus is not on PATH: run `make test`, which installs it (Debian package `prometheus`)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(targets)))
    url = f"http://127.0.0.1:{port}"
    with serving_child([executable, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{port}"], workdir / "prometheus.log", f"{url}/-/ready", 60):
        yield url


def query(url: str, expression: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def firing_alerts(url: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
    return [alert for alert in body["data"]["alerts"] if alert["state"] == "firing"]
