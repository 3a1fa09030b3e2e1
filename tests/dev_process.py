"""`compassmem dev` as a child process for end-to-end tests: started with a given environment, ready once its
query API answers /healthz, stopped with SIGTERM (SIGKILL after 30 s) with its whole process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
from conftest import STREAM_FAST_GROUP_ENV


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Quick consumer-group joins (DESIGN.md section 9) and quick idle closes, so tests do not wait on timers.
FAST_STREAM_ENV = {
    **{name: STREAM_FAST_GROUP_ENV[name] for name in ("COMPASSMEM_KAFKA_SESSION_TIMEOUT_S",
                                                      "COMPASSMEM_KAFKA_HEARTBEAT_INTERVAL_S",
                                                      "COMPASSMEM_KAFKA_REBALANCE_TIMEOUT_S")},
    "COMPASSMEM_IDLE_CLOSE_S": "1",
    "COMPASSMEM_API_VIEW_MAX_AGE_S": "0.5",
}


@contextmanager
def running_dev(env: Mapping[str, str], log_path: Path, ready_timeout_s: float = 120.0) -> Iterator[str]:
    """Run `compassmem dev` with ``env`` (which must set COMPASSMEM_API_PORT); yields the API's base URL."""
    url = f"http://127.0.0.1:{env['COMPASSMEM_API_PORT']}"
    with log_path.open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "compassmem.cli", "dev"], env=dict(env), stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                assert process.poll() is None, f"compassmem dev exited: {log_path.read_text()[-3000:]}"
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"compassmem dev did not serve /healthz within {ready_timeout_s} s"
                time.sleep(0.5)
            yield url
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
