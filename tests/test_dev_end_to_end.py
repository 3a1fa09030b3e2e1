"""End to end on `compassmem dev`: turns posted over HTTP flow through the broker and the worker into memory,
and a question whose evidence spans two sessions is answered with both turns."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dev_process import FAST_STREAM_ENV, free_port, running_dev

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"


@pytest.fixture
def dev_api(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, **FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(tmp_path / "data"),
           "COMPASSMEM_API_PORT": str(free_port()), "COMPASSMEM_DEV_BROKER_PORT": "0"}
    with running_dev(env, tmp_path / "dev.log") as url:
        yield url


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
