"""A real Prometheus (Debian's `prometheus` package, installed by `make test` with promtool) for end-to-end tests:
the shipped scrape config and alert rules, pointed at test targets, scraping and evaluating every second."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

PROMETHEUS_DIR = Path(__file__).resolve().parent.parent / "compassmem" / "monitoring" / "prometheus"


def prometheus_config(targets: Mapping[str, str]) -> dict[str, Any]:
    """compassmem/monitoring/prometheus/prometheus.yml with only the jobs in ``targets`` (job -> host:port)."""
    shipped = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
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
    with (workdir / "prometheus.log").open("w") as log:
        process = subprocess.Popen([executable, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}"
                try:
                    if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "prometheus was not ready within 60 s"
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def query(url: str, expression: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def firing_alerts(url: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()
    return [alert for alert in body["data"]["alerts"] if alert["state"] == "firing"]
