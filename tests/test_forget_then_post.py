"""A turn acknowledged right after a forget is kept (issue #59, item 2), on a real `compassmem dev`.

The forget takes effect in the stream at the markers the worker writes into every turns partition; a turn produced
before its partition's marker is erased with the conversation. DELETE therefore answers only once the worker placed
them (``markers_placed``), so a 202 after it means kept. The loop below forgets a conversation that has memory and
posts to it at once (one turn, then three batches at the same time), round after round, and counts: every
acknowledged turn must be in memory once the stream has settled, and no turn from before any forget."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from dev_process import FAST_STREAM_ENV, free_port, running_dev

ROUNDS = 8
START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def dev_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("forget-then-post")
    env = {**os.environ, **FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(folder / "data"),
           "COMPASSMEM_API_PORT": str(free_port()), "COMPASSMEM_DEV_BROKER_PORT": "0"}
    with running_dev(env, folder / "dev.log") as url:
        yield url


def _turn(conversation_id: str, turn_id: str, minute: int, text: str) -> dict[str, Any]:
    return {"conversation_id": conversation_id, "turn_id": turn_id, "speaker": "Ana" if minute % 2 else "Ben",
            "text": text, "timestamp": (START + timedelta(minutes=minute)).isoformat(), "session_id": "1"}


def _turn_ids(client: httpx.Client, conversation_id: str) -> set[str]:
    response = client.get(f"/v1/conversations/{conversation_id}/events", params={"limit": 200})
    if response.status_code == 404:
        return set()
    assert response.status_code == 200, response.text
    return {turn for event in response.json()["events"] for turn in event["turn_ids"]}


def _wait_for(client: httpx.Client, conversation_id: str, wanted: set[str], timeout_s: float = 60) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        held = _turn_ids(client, conversation_id)
        if wanted <= held or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def test_turns_acknowledged_after_a_forget_are_kept(dev_api: str) -> None:
    sent = acknowledged = 0
    expected: dict[str, set[str]] = {}
    with httpx.Client(base_url=dev_api, timeout=60) as client, ThreadPoolExecutor(3) as pool:
        for round_ in range(ROUNDS):
            conversation = f"loop-{round_}"
            old = [_turn(conversation, f"old-{n}", n, f"Before the forget, round {round_}, line {n}: the canary "
                                                       f"word is heliotrope.") for n in range(3)]
            assert client.post("/v1/turns", json=old).status_code == 202
            assert _wait_for(client, conversation, {t["turn_id"] for t in old}) >= {t["turn_id"] for t in old}
            forgotten = client.delete(f"/v1/conversations/{conversation}")
            assert forgotten.status_code == 200, forgotten.text
            assert forgotten.json()["markers_placed"] is True
            first = _turn(conversation, "new-0", 10, f"After the forget, round {round_}: I moved to Lisbon.")
            batches = [[_turn(conversation, f"new-{b}-{n}", 11 + 3 * b + n, f"Round {round_}, batch {b}, "
                                                                             f"line {n}: the tram was late.")
                        for n in range(3)] for b in range(3)]
            answers = [client.post("/v1/turns", json=first)]
            answers += list(pool.map(lambda batch: httpx.post(f"{dev_api}/v1/turns", json=batch, timeout=60), batches))
            posted = [[first], *batches]
            for turns, answer in zip(posted, answers, strict=True):
                sent += len(turns)
                if answer.status_code == 202:
                    acknowledged += len(turns)
                    expected.setdefault(conversation, set()).update(t["turn_id"] for t in turns)
        for conversation, wanted in expected.items():
            _wait_for(client, conversation, wanted)
        time.sleep(2)  # any marker still on its way would land by now; count what stayed
        kept = lost = resurrected = 0
        for round_ in range(ROUNDS):
            conversation = f"loop-{round_}"
            held = _turn_ids(client, conversation)
            wanted = expected.get(conversation, set())
            kept += len(wanted & held)
            lost += len(wanted - held)
            resurrected += len({t for t in held if t.startswith("old-")})
    print(f"forget -> post: sent {sent}, acknowledged {acknowledged}, kept {kept}, lost {lost}")
    assert acknowledged == sent == ROUNDS * 10
    assert lost == 0 and kept == acknowledged
    assert resurrected == 0
