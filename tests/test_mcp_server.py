"""``compassmem mcp`` driven by the MCP SDK's own client over stdio: the server is spawned as an agent would spawn
it, on real embedded stores in a temporary data directory."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from compassmem.core.contracts.limits import MAX_PAGE
from test_library import MODEL_CACHE

TURNS = [
    {"speaker": "Ann", "text": "I adopted a dog called Biscuit last week.", "turn_id": "1",
     "timestamp": "2024-05-01T10:00:00+00:00"},
    {"speaker": "Bob", "text": "Lovely! What breed is Biscuit?", "turn_id": "2",
     "timestamp": "2024-05-01T10:01:00+00:00"},
    {"speaker": "Ann", "text": "A beagle. She loves the park by the river.", "turn_id": "3",
     "timestamp": "2024-05-01T10:02:00+00:00"},
]

# A cursor as anyone can write one (unsigned base64 JSON, with a key of the wrong types).
FORGED_CURSOR = base64.urlsafe_b64encode(json.dumps({"v": 1, "l": "conversations:recent:", "k": ["a", "b"]})
                                         .encode()).decode()


def server_env() -> dict[str, str]:
    """This environment without COMPASSMEM_* settings of its own, sharing the tests' embedder cache."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    return {**env, "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE)}


@asynccontextmanager
async def mcp_session(data_dir: Path, log_path: Path) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(command=sys.executable,
                                   args=["-m", "compassmem.cli", "--data-dir", str(data_dir), "mcp"],
                                   env=server_env())
    with log_path.open("w") as log:
        async with stdio_client(server, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def run(test: Any, tmp_path: Path) -> None:  # noqa: ANN401 - an async test body taking a session
    async def main() -> None:
        with anyio.fail_after(120):
            async with mcp_session(tmp_path / "data", tmp_path / "mcp.log") as session:
                await test(session)

    try:
        anyio.run(main)
    except BaseException:
        log = tmp_path / "mcp.log"
        print(log.read_text()[-3000:] if log.exists() else "(no server log)")
        raise


def test_tools_remember_recall_list_redact_and_forget(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {"remember", "recall", "list_conversations", "forget", "redact_turn"}
        assert "conversation_id" in tools["recall"].input_schema["properties"]

        remembered = await session.call_tool("remember", {"conversation_id": "ann-bob", "turns": TURNS})
        assert not remembered.is_error, remembered.content
        assert remembered.structured_content["turn_ids"] == ["1", "2", "3"]
        generated = await session.call_tool("remember", {"conversation_id": "notes", "turns": [
            {"speaker": "user", "text": "Remind me that the boiler service is due in October."}]})
        assert not generated.is_error, generated.content
        assert len(generated.structured_content["turn_ids"]) == 1

        recalled = await session.call_tool("recall", {"question": "What breed is Biscuit?",
                                                      "conversation_id": "ann-bob", "budget_turns": 3,
                                                      "min_relevance": 0})
        assert not recalled.is_error, recalled.content
        turns = recalled.structured_content["turns"]
        ranked = [turn["turn_id"] for turn in turns]
        assert sorted(ranked) == ["1", "2", "3"]
        assert ranked.index("3") < ranked.index("2")  # the turn that answers before the one that asks
        assert {turn["speaker"] for turn in turns} <= {"Ann", "Bob"}
        assert any("beagle" in turn["text"] for turn in turns)
        event_ids = {event["event_id"] for event in recalled.structured_content["events"]}
        assert {turn["event_id"] for turn in turns} == event_ids

        listed = await session.call_tool("list_conversations", {})
        assert not listed.is_error, listed.content
        assert {c["conversation_id"] for c in listed.structured_content["conversations"]} == {"ann-bob", "notes"}

        redacted = await session.call_tool("redact_turn", {"conversation_id": "ann-bob", "turn_id": "3"})
        assert not redacted.is_error, redacted.content
        assert redacted.structured_content["turn_id"] == "3" and not redacted.structured_content["event_deleted"]
        without = await session.call_tool("recall", {"question": "What breed is Biscuit?",
                                                     "conversation_id": "ann-bob", "budget_turns": 3,
                                                     "min_relevance": 0})
        assert "3" not in {turn["turn_id"] for turn in without.structured_content["turns"]}
        assert not any("beagle" in turn["text"] for turn in without.structured_content["turns"])
        again = await session.call_tool("redact_turn", {"conversation_id": "ann-bob", "turn_id": "3"})
        assert again.is_error and "no turn '3'" in again.content[0].text

        forgotten = await session.call_tool("forget", {"conversation_id": "ann-bob"})
        assert not forgotten.is_error, forgotten.content
        assert forgotten.structured_content["events_deleted"] > 0
        gone = await session.call_tool("recall", {"question": "What breed is Biscuit?", "conversation_id": "ann-bob"})
        assert gone.is_error and "no memory for conversation 'ann-bob'" in gone.content[0].text

    run(body, tmp_path)


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        wrong_type = await session.call_tool("recall", {"question": 5, "conversation_id": "x"})
        assert wrong_type.is_error and "question" in wrong_type.content[0].text
        two_scopes = await session.call_tool("recall", {"question": "Who?", "conversation_id": "x",
                                                        "subject_id": "y"})
        assert two_scopes.is_error and "give exactly one scope" in two_scopes.content[0].text
        bad_turn = await session.call_tool("remember", {"conversation_id": "a/b", "turns": TURNS})
        assert bad_turn.is_error and "conversation_id" in bad_turn.content[0].text
        no_turns = await session.call_tool("remember", {"conversation_id": "c", "turns": []})
        assert no_turns.is_error and "at least one turn" in no_turns.content[0].text
        # The HTTP API's bounds (compassmem/core/contracts/limits.py), stated in the schema and held.
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert tools["list_conversations"].input_schema["properties"]["limit"]["maximum"] == MAX_PAGE
        too_many = await session.call_tool("list_conversations", {"limit": 1_000_000_000})
        assert too_many.is_error and "limit" in too_many.content[0].text
        forged = await session.call_tool("list_conversations", {"cursor": FORGED_CURSOR})
        assert forged.is_error and "cursor is not one this server handed out" in forged.content[0].text
        # Still serving after the refusals.
        ok = await session.call_tool("remember", {"conversation_id": "c", "turns": TURNS[:1]})
        assert not ok.is_error, ok.content

    run(body, tmp_path)


def test_streamable_http_with_a_port(tmp_path: Path) -> None:
    from dev_process import free_port, serving_child
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    env = {**server_env(), "COMPASSMEM_DATA_DIR": str(tmp_path / "data")}
    url = f"http://127.0.0.1:{port}/mcp"

    async def main() -> None:
        with anyio.fail_after(60):
            async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                assert "recall" in {tool.name for tool in (await session.list_tools()).tools}
                remembered = await session.call_tool("remember", {"conversation_id": "h", "turns": TURNS})
                assert not remembered.is_error, remembered.content

    # Ready once the port answers at all (a GET without a session is refused, which is an answer).
    with serving_child([sys.executable, "-m", "compassmem.cli", "mcp", "--port", str(port)], tmp_path / "mcp.log",
                       f"http://127.0.0.1:{port}/", 120, env, ready_status=404):
        anyio.run(main)


def test_a_data_directory_held_by_another_process_fails_at_start_in_one_line(tmp_path: Path) -> None:
    import subprocess

    from compassmem import Memory
    from test_library import library_settings

    with Memory(library_settings(tmp_path / "data")):
        started = subprocess.run([sys.executable, "-m", "compassmem.cli", "--data-dir", str(tmp_path / "data"), "mcp"],
                                 env=server_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=120)
    assert started.returncode == 2, started.stderr[-2000:]
    errors = [line for line in started.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "is held by another process" in errors[0], started.stderr[-2000:]
    assert "Traceback" not in started.stderr
