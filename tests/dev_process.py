"""Servers as child processes for end-to-end tests (`compassmem dev`, Prometheus): started, ready once an HTTP
endpoint answers, stopped with SIGTERM (SIGKILL after 30 s) with their whole process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
from conftest import STREAM_FAST_GROUP_ENV


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Quick consumer-group joins and quick idle closes, so tests do not wait on timers.
FAST_STREAM_ENV = {
    **{name: STREAM_FAST_GROUP_ENV[name] for name in ("COMPASSMEM_KAFKA_SESSION_TIMEOUT_S",
                                                      "COMPASSMEM_KAFKA_HEARTBEAT_INTERVAL_S",
                                                      "COMPASSMEM_KAFKA_REBALANCE_TIMEOUT_S")},
    "COMPASSMEM_IDLE_CLOSE_S": "1",
    "COMPASSMEM_API_VIEW_MAX_AGE_S": "0.5",
}


@contextmanager
def serving_child(args: Sequence[str], log_path: Path, ready_url: str, ready_timeout_s: float,
                  env: Mapping[str, str] | None = None,
                  ready_status: int = 200) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server as a child (in its own process group, so its own children go with it), output into
    ``log_path``; ready once ``ready_url`` answers ``ready_status``; yields the child. Stopped with SIGTERM,
    SIGKILL after 30 s."""
    name = Path(args[0]).name if args[0] != sys.executable else " ".join(args[1:4])
    with log_path.open("w") as log:
        process = subprocess.Popen(list(args), env=dict(env) if env is not None else None, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                assert process.poll() is None, f"{name} exited: {log_path.read_text()[-3000:]}"
                try:
                    if httpx.get(ready_url, timeout=2).status_code == ready_status:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"{name} did not answer {ready_url} within {ready_timeout_s} s"
                time.sleep(0.2)
            yield process
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextmanager
def running_dev(env: Mapping[str, str], log_path: Path, ready_timeout_s: float = 120.0) -> Iterator[str]:
    """Run `compassmem dev` with ``env`` (which must set COMPASSMEM_API_PORT); yields the API's base URL."""
    url = f"http://127.0.0.1:{env['COMPASSMEM_API_PORT']}"
    with serving_child([sys.executable, "-m", "compassmem.cli", "dev"], log_path, f"{url}/healthz",
                       ready_timeout_s, env):
        yield url
