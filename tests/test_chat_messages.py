"""Plain chat messages (``{"role": ..., "content": ...}`` as OpenAI's and LangChain's APIs write them) are turns on
every way in: ``Memory.add``, ``compassmem ingest`` of a JSONL file and ``POST /v1/turns``, their speaker, ids and
times filled in by the rules of ``compassmem/core/chat_messages.py`` (the MCP tool's too), so that the same input
again adds nothing (issue #57 item 7)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from compassmem import BadRequest, Memory
from compassmem.cli.main import main
from compassmem.core.chat_messages import TurnFiller
from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.mcp.server import NewTurn, new_turns
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services

CHAT = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "We moved the Lisbon trip to May because Ben's passport expired."},
    {"role": "assistant", "content": "Noted: Lisbon in May. When does the new passport arrive?"},
    {"role": "user", "content": "On April 20, so May works."},
    {"role": "user", "content": "On April 20, so May works."},  # said twice: two turns
    {"role": "user", "name": "Ana", "content": "Ana here: I booked the flights."},
]


def messages(conversation_id: str) -> list[dict[str, Any]]:
    return [{"conversation_id": conversation_id, **message} for message in CHAT]


def settings(data_dir: Path) -> Settings:
    return Settings(_env_file=None, data_dir=data_dir)  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Memory]:
    with Memory(settings(tmp_path_factory.mktemp("chat-messages")), embedder=embedder) as opened:
        yield opened


def read(items: list[dict[str, Any]]) -> list[Turn]:
    """The turns of one input, as every way in reads it."""
    filler = TurnFiller(datetime.now(UTC))
    return [filler.read(item) for item in items]


def stored_turns(memory: Memory, conversation_id: str) -> list[Any]:
    events = memory.events(conversation_id, limit=200).events
    return sorted((o for event in memory.get_events([e.id for e in events]) for o in event.observations),
                  key=lambda o: o.timestamp)


def test_memory_add_takes_chat_messages_and_fills_in_speaker_ids_and_times(memory: Memory) -> None:
    before = datetime.now(UTC)
    memory.add(messages("lisbon"))
    turns = stored_turns(memory, "lisbon")
    assert [(t.speaker, t.text) for t in turns] == [(m.get("name", m["role"]), m["content"]) for m in CHAT]
    ids = [t.turn_id for t in turns]
    assert len(set(ids)) == len(CHAT) and all(i.startswith("m-") and len(i) == 18 for i in ids)
    # The time it was read, a millisecond apart in order.
    assert all(before <= t.timestamp <= datetime.now(UTC) for t in turns)
    assert [(b.timestamp - a.timestamp).total_seconds() for a, b in zip(turns, turns[1:])] == [0.001] * 5
    answer = memory.query("Why was the Lisbon trip moved?", conversation_id="lisbon")
    assert ids[1] in answer.turn_ids


def test_the_same_messages_again_add_nothing(memory: Memory) -> None:
    memory.add(messages("again"))
    first = [t.turn_id for t in stored_turns(memory, "again")]
    # A chat history sent again whole (one message more), as agents do: only the new message is a new turn.
    more = [*messages("again"), {"conversation_id": "again", "role": "assistant", "content": "Enjoy Lisbon!"}]
    assert [t.text for t in memory.new_turns(read(more))] == ["Enjoy Lisbon!"]
    memory.add(more)
    again = [t.turn_id for t in stored_turns(memory, "again")]
    assert again[:len(first)] == first and len(again) == len(first) + 1


def test_given_ids_and_times_are_kept_and_a_time_tells_the_same_words_apart() -> None:
    filler = TurnFiller(datetime(2024, 3, 4, tzinfo=UTC))
    kept = filler.read({"conversation_id": "c", "role": "user", "content": "ok", "turn_id": "mine",
                        "timestamp": "2024-03-05T10:00:00+00:00"})
    assert (kept.turn_id, kept.timestamp) == ("mine", datetime(2024, 3, 5, 10, tzinfo=UTC))
    monday, tuesday = (TurnFiller(datetime.now(UTC)).read(
        {"conversation_id": "c", "role": "user", "content": "ok", "timestamp": when})
        for when in ("2024-03-04T10:00:00+00:00", "2024-03-05T10:00:00+00:00"))
    assert monday.turn_id != tuesday.turn_id
    # The MCP tool fills in its turns by the same rules: the same words give the same id.
    [remembered] = new_turns("c", [NewTurn(speaker="user", text="ok")], "default", None, datetime.now(UTC))
    assert remembered.turn_id == TurnFiller(datetime.now(UTC)).read(
        {"conversation_id": "c", "role": "user", "content": "ok"}).turn_id


@pytest.mark.parametrize(("message", "named"), [
    ({"role": "user", "content": "hi"}, "[0].conversation_id: is required"),
    ({"conversation_id": "c", "role": "", "content": "hi"}, "[0].role:"),
    ({"conversation_id": "c", "role": "user", "content": "  "}, "[0].content:"),
    ({"conversation_id": "c", "role": "user", "name": "\u0000", "content": "hi"}, "[0].name:"),
    ({"conversation_id": "c", "role": "user", "content": "hi", "timestamp": 5}, "[0].timestamp:"),
    ({"conversation_id": "c", "role": "user", "content": "hi", "speaker": "x"}, "[0].speaker: is not a known field"),
])
def test_a_bad_message_is_a_bad_request_naming_its_field(memory: Memory, message: dict[str, Any],
                                                         named: str) -> None:
    with pytest.raises(BadRequest, match=named.replace("[", r"\[").replace("]", r"\]")):
        memory.add([message])


def test_ingest_reads_a_jsonl_file_of_chat_messages_and_again_adds_nothing(tmp_path: Path, embedder: Any) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps(m) + "\n" for m in messages("from-file")), encoding="utf-8")
    data_dir = tmp_path / "data"
    for _ in range(2):
        assert main(["--data-dir", str(data_dir), "ingest", str(chat)]) == 0
    with Memory(settings(data_dir), embedder=embedder) as opened:
        turns = stored_turns(opened, "from-file")
    assert [(t.speaker, t.text) for t in turns] == [(m.get("name", m["role"]), m["content"]) for m in CHAT]


class _Recording:
    """POST /v1/turns's publisher: keeps what it was given (no broker in these tests)."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    def publish_turns(self, turns: Sequence[Turn]) -> None:
        self.turns += turns


def test_post_turns_takes_chat_messages(memory: Memory, embedder: Any) -> None:
    published = _Recording()
    services = build_services(memory.settings, memory.stores, embedder, MemoryMetrics(process_collectors=False),
                              turn_publisher=published)
    with BackgroundServer(create_app(services)) as server:
        answer = httpx.post(f"{server.url}/v1/turns", json=messages("posted"), timeout=30)
        assert answer.status_code == 202, answer.text
        one = httpx.post(f"{server.url}/v1/turns", json={**messages("posted")[1], "content": "Another one."},
                         timeout=30)
        assert one.status_code == 202, one.text
        for bad, field in [({"conversation_id": "posted", "role": "user", "content": " "}, "[1].content"),
                           ({"role": "user", "content": "hi"}, "[1].conversation_id")]:
            refused = httpx.post(f"{server.url}/v1/turns", json=[messages("posted")[0], bad], timeout=30)
            assert refused.status_code == 422
            assert [e["field"] for e in refused.json()["detail"]] == [field]
    assert [(t.speaker, t.text) for t in published.turns] == [
        *((m.get("name", m["role"]), m["content"]) for m in CHAT), ("user", "Another one.")]
    # The ids Memory.add gives the same messages.
    assert [t.turn_id for t in published.turns[:len(CHAT)]] == [t.turn_id for t in read(messages("posted"))]
