"""``explain`` on a query: the library (``Memory.query(..., explain=True)``), ``POST /v1/query`` over real HTTP
(uvicorn on loopback), the Python clients (sync and async) and the MCP ``recall`` tool (the SDK's own client, in
process), all over one ``Memory`` on real embedded stores built from a hand-written conversation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client as McpClient

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.models import Turn
from compassmem.library.client import AsyncClient, Client
from compassmem.library.memory import Memory
from compassmem.mcp.server import build_server
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import BackgroundServer
from compassmem.retrieval.engine import EngineConfig, RankingConfig

CONVERSATION = "garden-chat"
T0 = datetime(2024, 5, 6, 18, 0, tzinfo=UTC)  # a Monday
SESSIONS = [
    [("Ana", "I planted tomatoes and basil in the raised bed this afternoon."),
     ("Ben", "Nice! Did you use the compost from the allotment?"),
     ("Ana", "Yes, and I painted the shed door periwinkle while the soil settled."),
     ("Ben", "I adopted a kitten called Pepper last Saturday."),
     ("Ana", "Pepper is a lovely name for a kitten.")],
    [("Ben", "The wifi password at the cabin is periwinkle, by the way."),
     ("Ana", "Thanks, we drive up to the cabin on Friday."),
     ("Ben", "Pepper knocked a glass of water onto my laptop this morning."),
     ("Ana", "Oh no, is the laptop working?"),
     ("Ben", "It dried out overnight and boots again.")],
    [("Ana", "The tomatoes are ripening fast in this heat."),
     ("Ben", "We went hiking and swimming at the lake on Sunday."),
     ("Ana", "I started a pottery class on Wednesday evenings.")],
]
QUESTION = "When did Ben adopt Pepper, and what happened to his laptop?"


def _turns() -> list[Turn]:
    turns = []
    for number, session in enumerate(SESSIONS, start=1):
        began = T0 + timedelta(days=7 * (number - 1))
        for index, (speaker, text) in enumerate(session, start=1):
            turns.append(Turn(conversation_id=CONVERSATION, turn_id=f"S{number}:{index}", speaker=speaker, text=text,
                              timestamp=began + timedelta(minutes=index), session_id=str(number)))
    return turns


@pytest.fixture(scope="module")
def memory(embedder: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with Memory(Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("explain")),  # type: ignore[call-arg]
                embedder=embedder) as opened:
        opened.add(_turns())
        yield opened


@pytest.fixture(scope="module")
def server(memory: Memory) -> Iterator[str]:
    services = ApiServices(memory=memory, settings=memory.settings, metrics=MemoryMetrics(process_collectors=False))
    with BackgroundServer(create_app(services)) as served:
        yield served.url


def _text(turn_id: str) -> str:
    number, index = turn_id[1:].split(":")
    return SESSIONS[int(number) - 1][int(index) - 1][1]


# -- library -------------------------------------------------------------------------------------------------------


def test_explaining_leaves_the_ranking_as_it_is(memory: Memory) -> None:
    off = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=8)
    on = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=8, explain=True)
    assert off.explanation is None and on.explanation is not None
    assert on.turn_ids == off.turn_ids and on.turn_refs == off.turn_refs
    assert on.evidence == off.evidence and on.subgoals == off.subgoals
    assert "explain" in on.timings_ms and "explain" not in off.timings_ms
    # Without explain the record holds no explanation key at all.
    assert "explanation" not in json.loads(off.model_dump_json())


def test_every_turn_says_its_score_rank_channels_event_and_path(memory: Memory) -> None:
    response = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=8, explain=True)
    explanation = response.explanation
    assert explanation is not None
    turns = explanation.turns
    assert [(t.conversation_id, t.turn_id) for t in turns] == [(r.conversation_id, r.turn_id)
                                                              for r in response.turn_refs]
    assert [t.rank for t in turns] == list(range(1, len(turns) + 1))
    evidence = {item.event_id: item for item in response.evidence}
    weights = explanation.weights
    for turn in turns:
        # The contributions are the weights times the features, and sum to the final score.
        assert abs(sum(turn.contributions.values()) - turn.score) < 1e-6
        for name, contribution in turn.contributions.items():
            assert contribution == pytest.approx(weights[name] * turn.features[name], abs=1e-12)
        assert list(turn.contributions.values()) == sorted(turn.contributions.values(), key=lambda c: -abs(c))
        assert 1 <= turn.score_rank <= turn.candidates
        item = evidence[turn.event_id]
        assert turn.turn_id in [t.turn_id for t in item.turns]
        assert turn.path == item.path
        if item.turns[0].turn_id == turn.turn_id:  # the item's best turn: the item is scored as its place
            assert item.score == pytest.approx(turn.score, abs=1e-4)
        assert turn.subgoal in response.subgoals
        assert turn.found_with_event == (not any(c.stage == "search" for c in turn.channels))
        for channel in turn.channels:
            assert channel.rank >= 1
    # Without diversity or reserved places the order is the scores' order.
    scores = [t.score for t in turns]
    assert [t.score_rank for t in turns] == sorted(t.score_rank for t in turns)
    assert scores == sorted(scores, reverse=True)
    # The turn that says when Pepper came is found by the dense and keyword searches.
    adopted = next(t for t in turns if t.turn_id == "S1:4")
    assert {"dense", "keyword"} <= {c.channel for c in adopted.channels if c.stage == "search"}


def test_the_question_says_its_subgoals_shape_times_and_what_it_asks_for(memory: Memory) -> None:
    response = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=5, explain=True)
    question = response.explanation.question  # type: ignore[union-attr]
    assert [s.text for s in question.subgoals] == response.subgoals
    assert question.subgoals[0].text == QUESTION and question.subgoals[0].keywords
    assert question.temporal and not question.aggregate and question.shape == "when"
    assert question.asked_speakers == ["Ben"]
    listing = memory.query("What activities has Ben done in May 2024?",
                           conversation_id=CONVERSATION, budget_turns=5, explain=True).explanation
    assert listing is not None
    assert listing.question.aggregate and listing.question.shape == "names-a-date"
    assert "activity" in [c.name for c in listing.question.categories]
    assert [(s.start, s.end) for s in listing.question.time_spans] == [(date(2024, 5, 1), date(2024, 5, 31))]
    assert listing.question.time_reference == T0 + timedelta(days=14, minutes=3)


def test_a_turn_found_only_by_the_keyword_search_says_so(memory: Memory) -> None:
    # One nearest turn by meaning, no passages, wishes or times: every other candidate of a word both turns hold
    # came from the keyword search alone.
    config = EngineConfig(ranking=RankingConfig(dense_candidates=1, passage_candidates=0, wish_candidates=0,
                                                time_candidates=0))
    narrow = Memory(memory.settings, stores=memory.stores, embedder=memory.embedder, engine_config=config)
    question = "Which things are periwinkle?"
    response = narrow.query(question, conversation_id=CONVERSATION, budget_turns=10, explain=True)
    assert response.explanation is not None
    found = {t.turn_id: [c for c in t.channels if c.stage == "search"] for t in response.explanation.turns}
    periwinkle = [turn_id for turn_id in found if "periwinkle" in _text(turn_id)]
    assert sorted(periwinkle) == ["S1:3", "S2:1"]
    by_dense = [turn_id for turn_id, channels in found.items() if any(c.channel == "dense" for c in channels)]
    assert len(by_dense) == 1
    keyword_only = [turn_id for turn_id in periwinkle if turn_id not in by_dense]
    assert keyword_only
    for turn_id in keyword_only:
        (channel,) = found[turn_id]
        assert channel.channel == "keyword" and channel.rank in (1, 2) and channel.score > 0
        assert channel.subgoal == question
    # Turns no search returned came in with their event, and say so.
    with_event = [t for t in response.explanation.turns if "periwinkle" not in _text(t.turn_id)
                  and t.turn_id not in by_dense]
    assert with_event and all(t.found_with_event for t in with_event)
    # The same ranking as without explain.
    assert narrow.query(question, conversation_id=CONVERSATION, budget_turns=10).turn_ids == response.turn_ids


def test_a_scope_without_candidates_still_explains_the_question(memory: Memory) -> None:
    response = memory.engine.query(QueryRequest(conversation_id="no-such-conversation", question=QUESTION,
                                                explain=True))
    assert response.turn_ids == [] and response.explanation is not None
    assert response.explanation.turns == [] and response.explanation.question.asked_speakers == []
    assert [s.text for s in response.explanation.question.subgoals] == response.subgoals


# -- HTTP ----------------------------------------------------------------------------------------------------------


def test_http_without_explain_has_no_explanation_key(server: str, memory: Memory) -> None:
    body = {"conversation_id": CONVERSATION, "question": QUESTION, "budget_turns": 6}
    response = httpx.post(f"{server}/v1/query", json=body, timeout=30)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert "explanation" not in payload
    assert list(payload) == ["turn_ids", "turn_refs", "evidence", "subgoals", "answer", "answerable",
                             "answerable_probability", "timings_ms"]
    explicit = httpx.post(f"{server}/v1/query", json={**body, "explain": False}, timeout=30).json()
    assert "explanation" not in explicit and explicit["turn_ids"] == payload["turn_ids"]


def test_http_with_explain_returns_the_explanation(server: str, memory: Memory) -> None:
    body = {"conversation_id": CONVERSATION, "question": QUESTION, "budget_turns": 6}
    response = httpx.post(f"{server}/v1/query", json={**body, "explain": True}, timeout=30)
    assert response.status_code == 200, response.text
    payload = response.json()
    explanation = payload["explanation"]
    assert [t["turn_id"] for t in explanation["turns"]] == payload["turn_ids"]
    first = explanation["turns"][0]
    assert set(first) >= {"rank", "score", "score_rank", "channels", "features", "contributions", "event_id", "path"}
    assert abs(sum(first["contributions"].values()) - first["score"]) < 1e-6
    assert explanation["question"]["shape"] == "when"
    # The record the library gives, as JSON.
    parsed = QueryResponse.model_validate(payload)
    assert parsed.explanation is not None and parsed.explanation.turns[0].turn_id == payload["turn_ids"][0]
    assert httpx.post(f"{server}/v1/query", json=body, timeout=30).json()["turn_ids"] == payload["turn_ids"]


@pytest.mark.parametrize("value", ["yes", 1, "true", None, [True]])
def test_http_refuses_an_explain_that_is_no_bool(server: str, value: Any) -> None:
    response = httpx.post(f"{server}/v1/query", timeout=30,
                          json={"conversation_id": CONVERSATION, "question": QUESTION, "explain": value})
    assert response.status_code == 422, response.text
    assert "explain" in response.text


def test_the_openapi_document_describes_the_field_and_the_explanation(server: str) -> None:
    document = httpx.get(f"{server}/openapi.json", timeout=30).json()
    schemas = document["components"]["schemas"]
    request = schemas["QueryRequest"]["properties"]["explain"]
    assert request["type"] == "boolean" and request["default"] is False and request["description"]
    assert "explanation" not in schemas[next(n for n in schemas if n.startswith("QueryResponse"))].get("required", [])
    for name in ("ChannelHit", "TurnExplanation", "QuestionExplanation", "QueryExplanation"):
        for field, schema in schemas[name]["properties"].items():
            assert schema.get("description") or name == "TurnExplanation" and field in (
                "conversation_id", "turn_id") or "$ref" in schema or "items" in schema, (name, field)


# -- clients -------------------------------------------------------------------------------------------------------


def test_the_clients_round_trip_the_explanation(server: str, memory: Memory) -> None:
    local = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=6, explain=True)
    with Client(server) as client:
        plain = client.query(QUESTION, conversation_id=CONVERSATION, budget_turns=6)
        explained = client.query(QUESTION, conversation_id=CONVERSATION, budget_turns=6, explain=True)
        by_request = client.query(QueryRequest(conversation_id=CONVERSATION, question=QUESTION, budget_turns=6,
                                               explain=True))

    async def asynchronously() -> QueryResponse:
        async with AsyncClient(server) as client:
            return await client.query(QUESTION, conversation_id=CONVERSATION, budget_turns=6, explain=True)

    awaited = asyncio.run(asynchronously())
    assert plain.explanation is None
    for response in (explained, by_request, awaited):
        assert response.explanation is not None and local.explanation is not None
        assert response.turn_ids == plain.turn_ids == local.turn_ids
        assert response.explanation.model_dump(mode="json") == local.explanation.model_dump(mode="json")


def test_a_query_request_without_explain_is_sent_as_before(server: str) -> None:
    sent: list[dict[str, Any]] = []

    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    with Client(server) as client:
        client._http.event_hooks["request"].append(record)
        client.query(QueryRequest(conversation_id=CONVERSATION, question=QUESTION))
        client.query(QUESTION, conversation_id=CONVERSATION)
    assert all("explain" not in body for body in sent)


# -- MCP -----------------------------------------------------------------------------------------------------------


def test_mcp_recall_explains_when_asked(memory: Memory) -> None:
    async def main() -> tuple[Any, Any, Any, Any]:
        with anyio.fail_after(60):
            async with McpClient(build_server(memory)) as client:
                ask = {"question": QUESTION, "conversation_id": CONVERSATION, "budget_turns": 5}
                plain = await client.call_tool("recall", ask)
                explained = await client.call_tool("recall", {**ask, "explain": True})
                refused = await client.call_tool("recall", {**ask, "explain": "sure"})
                tools = await client.list_tools()
                return plain, explained, refused, tools

    plain, explained, refused, tools = anyio.run(main)
    assert not plain.is_error and not explained.is_error
    assert "explanation" not in plain.structured_content
    assert "explanation" not in json.loads(plain.content[0].text)
    explanation = explained.structured_content["explanation"]
    turn_ids = [t["turn_id"] for t in explained.structured_content["turns"]]
    assert [t["turn_id"] for t in explanation["turns"]] == turn_ids
    assert all(abs(sum(t["contributions"].values()) - t["score"]) < 1e-6 for t in explanation["turns"])
    assert explanation["question"]["asked_speakers"] == ["Ben"]
    assert refused.is_error
    recall = next(tool for tool in tools.tools if tool.name == "recall")
    assert recall.input_schema["properties"]["explain"]["description"]
