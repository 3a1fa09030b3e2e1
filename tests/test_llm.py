"""The LLM client against a small local server speaking the chat-completions protocol, and its fallbacks.

The server (fake_chat_server.py) is a FastAPI app under uvicorn on a loopback port; each test sets how it
behaves (answer, slow, HTTP 500, flaky, malformed JSON). Through the query API: an answer comes back in
``answer``, and every failure leaves ``answer`` null while the evidence is still returned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fake_chat_server import ANSWER, FakeChatServer
from fastapi import FastAPI

from compassmem.core.config import Settings
from compassmem.llm.client import ChatClient, ChatMessage, LlmAnswerer, LlmDecomposer, LlmError, chat_completions_url
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.query_api.app import create_app
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

TENANT = "llm-test"
TIMEOUT_S = 0.5


@pytest.fixture
def llm(fake_llm: tuple[FakeChatServer, str]) -> tuple[FakeChatServer, str]:
    fake_llm[0].reset()
    return fake_llm


def _client(url: str) -> ChatClient:
    return ChatClient(url, "test-model", api_key="k-123", timeout_s=TIMEOUT_S)


# -- the client -----------------------------------------------------------------------------------------------


def test_chat_speaks_the_protocol(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    reply = _client(url).chat([ChatMessage(role="user", content="hi")], max_tokens=12)
    assert reply == ANSWER
    [sent] = fake.requests
    assert sent["model"] == "test-model" and sent["messages"] == [{"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 12 and sent["stream"] is False
    assert fake.headers[0]["authorization"] == "Bearer k-123"


def test_endpoint_url_forms() -> None:
    assert chat_completions_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_completions_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"


@pytest.mark.parametrize(("mode", "requests", "reason"), [
    ("slow", 1, "timed out"),
    ("error", 2, "HTTP 500"),
    ("garbage", 1, "not a chat completion"),
    ("wrong-shape", 1, "not a chat completion"),
])
def test_failures_raise_one_typed_error(llm: tuple[FakeChatServer, str], mode: str, requests: int,
                                        reason: str) -> None:
    fake, url = llm
    fake.mode = mode
    started = time.monotonic()
    with pytest.raises(LlmError, match=reason):
        _client(url).chat([ChatMessage(role="user", content="hi")])
    assert time.monotonic() - started < TIMEOUT_S * 2 + 1  # a timeout is not retried
    assert len(fake.requests) == requests  # a 500 is retried once, nothing else is


def test_one_retry_cures_a_transient_failure(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.mode = "flaky"
    assert _client(url).chat([ChatMessage(role="user", content="hi")]) == ANSWER
    assert len(fake.requests) == 2


def test_unreachable_endpoint_raises_the_typed_error() -> None:
    with BackgroundServer(FastAPI()) as server:
        url = server.url  # a port that was just free, and is closed again below
    with pytest.raises(LlmError, match="cannot reach"):
        _client(url).chat([ChatMessage(role="user", content="hi")])


# -- decomposition --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "expected"), [
    ('["When did Priya adopt Biscuit?", "Why did the launch slip?"]',
     ["When did Priya adopt Biscuit?", "Why did the launch slip?"]),
    ('Sure!\n```json\n["Who is Biscuit?", "Who is Biscuit?", " "]\n```', ["Who is Biscuit?"]),
    ("I cannot split this question.", None),
    ('["unterminated", ', None),
    ('[1, 2]', None),
    ("[]", None),
])
def test_decomposer_parses_a_json_list_or_falls_back(llm: tuple[FakeChatServer, str], reply: str,
                                                     expected: list[str] | None) -> None:
    fake, url = llm
    fake.reply = reply
    assert LlmDecomposer(_client(url)).decompose("When and why?") == expected
    assert "JSON array" in fake.requests[0]["messages"][0]["content"]


def test_decomposer_falls_back_on_errors_and_offline(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.mode = "error"
    assert LlmDecomposer(_client(url)).decompose("Why?") is None
    assert LlmDecomposer(None).decompose("Why?") is None
    assert LlmAnswerer(None)("Why?", []) is None


# -- answers through the query API ----------------------------------------------------------------------------

T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
TURNS = [
    Turn(tenant=TENANT, conversation_id="c1", turn_id=f"L1:{i}", speaker=speaker, text=text,
         timestamp=T0 + timedelta(minutes=i), session_id="1")
    for i, (speaker, text) in enumerate([
        ("Priya", "The Atlas launch slipped because the client changed the requirements on Friday."),
        ("Tom", "So the team worked overtime all weekend to re-plan the sprint."),
        ("Priya", "We moved the launch to April 15."),
        ("Tom", "I adopted a beagle called Biscuit yesterday."),
    ], start=1)
]


@pytest.fixture(scope="module")
def query_api(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
              fake_llm: tuple[FakeChatServer, str]) -> Iterator[httpx.Client]:
    """The query API wired from settings that name the fake endpoint, as ``compassmem api`` would."""
    _, url = fake_llm
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("llm-qdrant") / "qdrant", embedder.dim)
    graph = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    stores = Stores(vectors=vectors, graph=graph)
    settings = Settings(llm_url=url, llm_model="test-model", llm_timeout_s=TIMEOUT_S)
    try:
        # The write path's LLM steps are off in these settings: building memory sends the fake server nothing.
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            writer.add(TURNS)
        with BackgroundServer(create_app(build_services(settings, stores, embedder, MemoryMetrics()))) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        stores.close()


def _ask(client: httpx.Client) -> dict[str, Any]:
    response = client.post("/v1/query", json={"tenant": TENANT, "conversation_id": "c1",
                                              "question": "Why did the Atlas launch slip?"})
    assert response.status_code == 200, response.text
    return response.json()


def test_answer_comes_back_in_the_query_response(query_api: httpx.Client, llm: tuple[FakeChatServer, str]) -> None:
    fake, _ = llm
    body = _ask(query_api)
    assert body["answer"] == ANSWER
    assert body["timings_ms"]["answer"] > 0
    # Decomposition asks first, then the answer; both through the same configured endpoint.
    decompose, sent = fake.requests
    assert decompose["messages"][-1]["content"] == "Why did the Atlas launch slip?"
    prompt = sent["messages"][-1]["content"]
    assert "Question: Why did the Atlas launch slip?" in prompt
    assert "the client changed the requirements" in prompt and "2024-03-04 09:01" in prompt
    assert "Monday" in prompt  # the weekday, for resolving relative dates
    assert sent["model"] == "test-model"


@pytest.mark.parametrize("mode", ["slow", "error", "garbage"])
def test_llm_failure_falls_back_to_evidence_only(query_api: httpx.Client, llm: tuple[FakeChatServer, str],
                                                 mode: str) -> None:
    fake, _ = llm
    fake.mode = mode
    started = time.monotonic()
    body = _ask(query_api)
    assert body["answer"] is None
    assert "L1:1" in body["turn_ids"] and body["evidence"]
    assert time.monotonic() - started < TIMEOUT_S * 2 + 2
