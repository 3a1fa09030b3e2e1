"""End to end on `compassmem dev`: turns posted over HTTP flow through the broker and the worker into memory,
and a question whose evidence spans two sessions is answered with both turns."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def dev_api(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "COMPASSMEM_DATA_DIR": str(tmp_path / "data"),
        "COMPASSMEM_API_PORT": str(port),
        "COMPASSMEM_DEV_BROKER_PORT": "0",
        "COMPASSMEM_IDLE_CLOSE_S": "1",
        "COMPASSMEM_API_VIEW_MAX_AGE_S": "0.5",
        "COMPASSMEM_KAFKA_SESSION_TIMEOUT_S": "6",
        "COMPASSMEM_KAFKA_HEARTBEAT_INTERVAL_S": "1",
        "COMPASSMEM_KAFKA_REBALANCE_TIMEOUT_S": "6",
    }
    log = (tmp_path / "dev.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "compassmem.cli", "dev"], env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"compassmem dev exited: {(tmp_path / 'dev.log').read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "compassmem dev did not serve /healthz within 120 s"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_posted_turns_become_evidence_across_sessions(dev_api: str) -> None:
    turns = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    accepted = httpx.post(f"{dev_api}/v1/turns", json=turns, timeout=30)
    assert accepted.status_code == 202, accepted.text
    question = {"conversation_id": "priya-tom",
                "question": "Why was the Atlas launch moved, and when did it finally launch?", "budget_turns": 8}
    deadline = time.monotonic() + 90
    turn_ids: list[str] = []
    while time.monotonic() < deadline:
        response = httpx.post(f"{dev_api}/v1/query", json=question, timeout=30)
        if response.status_code == 200:
            turn_ids = response.json()["turn_ids"]
            if {"S2:2", "S3:1"} <= set(turn_ids):
                break
        time.sleep(1)
    assert "S2:2" in turn_ids, f"the session-2 cause is missing from {turn_ids}"
    assert "S3:1" in turn_ids, f"the session-3 launch is missing from {turn_ids}"
