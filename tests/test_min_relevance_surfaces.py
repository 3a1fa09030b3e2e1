"""``min_relevance`` and the calibrated figures on every surface: ``Memory.query``, ``POST /v1/query`` over real HTTP,
``Client``/``AsyncClient``, the MCP ``recall`` tool, the LangChain retriever and ``compassmem ask``.

Every returned turn carries a ``relevance`` in [0, 1] and every answer ``answerable`` with its probability; with
``min_relevance=m`` no returned turn is below ``m`` and the evidence holds only the returned turns; ``1.0`` answers
no turn (still 200, still with the answerable figures); a value outside [0, 1] or not a finite number is refused
naming ``min_relevance``. The agent-facing surfaces (``recall``, the retriever) leave out the turns below
``AGENT_MIN_RELEVANCE`` unless told otherwise. No relevance value itself is asserted: the relevance model's weights
are fitted (docs/decisions/017-calibrated-relevance.md) and change with each fit."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from compassmem.cli.main import main
from compassmem.core.config import Settings
from compassmem.core.contracts.query import AGENT_MIN_RELEVANCE, QueryResponse
from compassmem.core.errors import BadRequest
from compassmem.integrations.langchain import CompassmemRetriever
from compassmem.library.client import AsyncClient, Client
from compassmem.library.memory import Memory
from compassmem.mcp.server import build_server
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import BackgroundServer

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
CONVERSATION = "priya-tom"
# Asked of the whole conversation (24 turns), so that every turn is ranked and some are surely not evidence.
BUDGET = 30
QUESTIONS = [
    "When did Priya adopt Biscuit?",
    "Why was the Atlas launch moved?",
    "What is the capital of France?",  # never said
]
THRESHOLDS = [0.0, 0.2, 0.5, 0.8]
# A relevance is rounded to 4 places in the answer; the threshold compares the unrounded figure.
ROUNDING = 1e-4
BAD = [-0.1, 1.5, "x", math.nan, math.inf]


@dataclass
class Served:
    memory: Memory
    url: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Served]:  # noqa: ANN401
    """The sample conversation in memory (embedded stores), and the query API over it on a loopback port."""
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("min-relevance"))  # type: ignore[call-arg]
    with Memory(settings, embedder=embedder) as memory:
        memory.add([json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()], warm=False)
        services = ApiServices(memory=memory, settings=settings, metrics=MemoryMetrics(process_collectors=False))
        with BackgroundServer(create_app(services)) as server:
            yield Served(memory=memory, url=server.url)


def _checked(response: QueryResponse, least: float) -> list[tuple[str, float]]:
    """The answer's (turn id, relevance), best first, once its relevance figures hold together."""
    assert 0.0 <= response.answerable_probability <= 1.0
    assert response.answerable == (response.answerable_probability >= 0.5)
    ranked = [(ref.turn_id, ref.relevance) for ref in response.turn_refs]
    assert [turn_id for turn_id, _ in ranked] == response.turn_ids
    for turn_id, relevance in ranked:
        assert relevance is not None and 0.0 <= relevance <= 1.0, (turn_id, relevance)
        assert relevance >= least - ROUNDING, (turn_id, relevance, least)
    # The evidence holds the returned turns and no other, each with the relevance its ref has.
    held = {(turn.conversation_id, turn.turn_id): turn.relevance for item in response.evidence for turn in item.turns}
    assert held == {(ref.conversation_id, ref.turn_id): ref.relevance for ref in response.turn_refs}
    for item in response.evidence:
        assert item.turns, item.event_id
        assert item.relevance == max(turn.relevance for turn in item.turns if turn.relevance is not None)
    return [(turn_id, relevance) for turn_id, relevance in ranked if relevance is not None]


def _kept(everything: list[tuple[str, float]], least: float) -> tuple[set[str], set[str]]:
    """The turns of an answer without a threshold that one with ``least`` must keep, and those it may keep (a
    rounded relevance within ``ROUNDING`` of it may fall either side)."""
    return ({turn_id for turn_id, relevance in everything if relevance >= least + ROUNDING},
            {turn_id for turn_id, relevance in everything if relevance >= least - ROUNDING})


def _agrees(kept: list[tuple[str, float]], everything: list[tuple[str, float]], least: float) -> None:
    must, may = _kept(everything, least)
    ids = [turn_id for turn_id, _ in kept]
    assert must <= set(ids) <= may, (least, ids, everything)
    # The threshold drops turns; it does not reorder those it keeps.
    assert ids == [turn_id for turn_id, _ in everything if turn_id in set(ids)]


def _memory_query(served: Served, question: str, **fields: Any) -> QueryResponse:  # noqa: ANN401
    return served.memory.query(question, conversation_id=CONVERSATION, budget_turns=BUDGET, **fields)


@pytest.mark.parametrize("question", QUESTIONS)
def test_memory_query_keeps_the_turns_at_or_above_min_relevance(served: Served, question: str) -> None:
    everything = _checked(_memory_query(served, question), 0.0)
    assert everything, "every turn of the conversation is ranked without a threshold"
    probability = _memory_query(served, question).answerable_probability
    for least in THRESHOLDS:
        response = _memory_query(served, question, min_relevance=least)
        _agrees(_checked(response, least), everything, least)
        # Answerability is the question's, computed before any turn is dropped.
        assert response.answerable_probability == probability


def test_min_relevance_one_answers_no_turn_but_still_answers(served: Served) -> None:
    for question in QUESTIONS:
        response = _memory_query(served, question, min_relevance=1.0)
        assert response.turn_ids == [] and response.turn_refs == [] and response.evidence == []
        assert 0.0 <= response.answerable_probability <= 1.0
        assert response.answerable == (response.answerable_probability >= 0.5)


def test_the_http_api_and_the_clients_take_min_relevance(served: Served) -> None:
    question = QUESTIONS[0]
    body = {"conversation_id": CONVERSATION, "question": question, "budget_turns": BUDGET}
    everything = _checked(_memory_query(served, question), 0.0)
    with httpx.Client(base_url=served.url, timeout=60) as api:
        for least in THRESHOLDS:
            answer = api.post("/v1/query", json={**body, "min_relevance": least})
            assert answer.status_code == 200, answer.text
            document = answer.json()
            assert {"answerable", "answerable_probability"} <= set(document)
            assert all("relevance" in ref for ref in document["turn_refs"])
            _agrees(_checked(QueryResponse.model_validate(document), least), everything, least)
        none = api.post("/v1/query", json={**body, "min_relevance": 1.0})
        assert none.status_code == 200, none.text
        document = none.json()
        assert document["turn_ids"] == [] and document["evidence"] == []
        assert isinstance(document["answerable"], bool) and 0.0 <= document["answerable_probability"] <= 1.0

    with Client(served.url) as client:
        kept = _checked(client.query(question, conversation_id=CONVERSATION, budget_turns=BUDGET,
                                     min_relevance=0.5), 0.5)
        _agrees(kept, everything, 0.5)
        assert client.query(question, conversation_id=CONVERSATION, min_relevance=1.0).turn_ids == []

    async def ask_async() -> list[tuple[str, float]]:
        async with AsyncClient(served.url) as client:
            return _checked(await client.query(question, conversation_id=CONVERSATION, budget_turns=BUDGET,
                                               min_relevance=0.2), 0.2)

    _agrees(asyncio.run(ask_async()), everything, 0.2)


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_bad_min_relevance_is_refused_on_every_surface_naming_it(served: Served, bad: object) -> None:
    body = {"conversation_id": CONVERSATION, "question": QUESTIONS[0]}
    with httpx.Client(base_url=served.url, timeout=60) as api:
        if isinstance(bad, float) and not math.isfinite(bad):
            # JSON has no NaN or Infinity; Python's json module writes and reads them all the same.
            answer = api.post("/v1/query", content=json.dumps({**body, "min_relevance": bad}),
                              headers={"Content-Type": "application/json"})
        else:
            answer = api.post("/v1/query", json={**body, "min_relevance": bad})
    assert 400 <= answer.status_code < 500, answer.text
    assert [entry["field"] for entry in answer.json()["detail"]] == ["min_relevance"], answer.text
    with pytest.raises(BadRequest, match="min_relevance"):
        served.memory.query(QUESTIONS[0], conversation_id=CONVERSATION, min_relevance=bad)  # type: ignore[arg-type]
    with Client(served.url) as client, pytest.raises(BadRequest, match="min_relevance"):
        client.query(QUESTIONS[0], conversation_id=CONVERSATION, min_relevance=bad)  # type: ignore[arg-type]
    mcp = build_server(served.memory)
    with pytest.raises(ToolError, match="min_relevance"):
        anyio.run(mcp.call_tool, "recall", {**body, "min_relevance": bad})
    with pytest.raises(ValueError, match="min_relevance"):
        CompassmemRetriever(memory=served.memory, conversation_id=CONVERSATION, min_relevance=bad)


def _recall(served: Served, question: str, **arguments: Any) -> dict[str, Any]:  # noqa: ANN401
    mcp = build_server(served.memory)

    async def call() -> dict[str, Any]:
        result = await mcp.call_tool("recall", {"question": question, "conversation_id": CONVERSATION,
                                                "budget_turns": BUDGET, **arguments})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return result.structured_content

    return anyio.run(call)


def _recalled(recall: dict[str, Any], least: float) -> list[tuple[str, float]]:
    assert isinstance(recall["answerable"], bool) and 0.0 <= recall["answerable_probability"] <= 1.0
    assert recall["answerable"] == (recall["answerable_probability"] >= 0.5)
    turns = [(turn["turn_id"], turn["relevance"]) for turn in recall["turns"]]
    for turn_id, relevance in turns:
        assert 0.0 <= relevance <= 1.0 and relevance >= least - ROUNDING, (turn_id, relevance, least)
    by_turn = dict(turns)
    # The events hold the recalled turns and no other; an event's relevance is its best turn's.
    assert sorted(t for event in recall["events"] for t in event["turn_ids"]) == sorted(by_turn)
    for event in recall["events"]:
        assert event["relevance"] == max(by_turn[t] for t in event["turn_ids"])
    return turns


def test_recall_leaves_out_the_turns_below_the_agent_default(served: Served) -> None:
    below_left_out = False
    for question in QUESTIONS:
        everything = _recalled(_recall(served, question, min_relevance=0.0), 0.0)
        by_default = _recall(served, question)
        kept = _recalled(by_default, AGENT_MIN_RELEVANCE)
        _agrees(kept, everything, AGENT_MIN_RELEVANCE)
        assert by_default["answerable_probability"] == _recall(served, question, min_relevance=0.0)[
            "answerable_probability"]
        below_left_out |= any(relevance < AGENT_MIN_RELEVANCE - ROUNDING for _, relevance in everything)
        _agrees(_recalled(_recall(served, question, min_relevance=0.5), 0.5), everything, 0.5)
        nothing = _recall(served, question, min_relevance=1.0)
        assert nothing["turns"] == [] and nothing["events"] == []
        _recalled(nothing, 1.0)
    assert below_left_out, "no question here ranks a turn below AGENT_MIN_RELEVANCE: the default was not exercised"


def test_recalls_schema_states_the_default_and_the_apis_bounds(served: Served) -> None:
    async def listed() -> dict[str, Any]:
        return {tool.name: tool for tool in await build_server(served.memory).list_tools()}

    recall = anyio.run(listed)["recall"]
    argument = recall.input_schema["properties"]["min_relevance"]
    assert argument["default"] == AGENT_MIN_RELEVANCE
    assert (argument["minimum"], argument["maximum"]) == (0.0, 1.0)
    assert "relevance" in argument["description"] and str(AGENT_MIN_RELEVANCE) in argument["description"]
    assert {"answerable", "answerable_probability"} <= set(recall.output_schema["properties"])


def _documents(served: Served, question: str, **fields: Any) -> list[tuple[str, float]]:  # noqa: ANN401
    retriever = CompassmemRetriever(memory=served.memory, conversation_id=CONVERSATION, budget_turns=BUDGET,
                                    **fields)
    documents = retriever.invoke(question)
    for document in documents:
        metadata = document.metadata
        assert 0.0 <= metadata["relevance"] <= 1.0
        assert 0.0 <= metadata["answerable_probability"] <= 1.0
        assert metadata["answerable"] == (metadata["answerable_probability"] >= 0.5)
    assert len({document.metadata["answerable_probability"] for document in documents}) <= 1
    return [(document.metadata["turn_id"], document.metadata["relevance"]) for document in documents]


def test_the_retriever_leaves_out_the_turns_below_the_agent_default(served: Served) -> None:
    assert CompassmemRetriever(memory=served.memory, conversation_id=CONVERSATION).min_relevance == \
        AGENT_MIN_RELEVANCE
    below_left_out = False
    for question in QUESTIONS:
        everything = _documents(served, question, min_relevance=0.0)
        assert everything
        _agrees(_documents(served, question), everything, AGENT_MIN_RELEVANCE)
        _agrees(_documents(served, question, min_relevance=0.5), everything, 0.5)
        assert _documents(served, question, min_relevance=1.0) == []
        below_left_out |= any(relevance < AGENT_MIN_RELEVANCE - ROUNDING for _, relevance in everything)
    assert below_left_out, "no question here ranks a turn below AGENT_MIN_RELEVANCE: the default was not exercised"


def test_the_retriever_over_http_takes_min_relevance(served: Served) -> None:
    question = QUESTIONS[0]
    everything = _documents(served, question, min_relevance=0.0)
    with Client(served.url) as client:
        documents = CompassmemRetriever(memory=client, conversation_id=CONVERSATION, budget_turns=BUDGET,
                                        min_relevance=0.5).invoke(question)
    _agrees([(d.metadata["turn_id"], d.metadata["relevance"]) for d in documents], everything, 0.5)


def test_ask_shows_relevance_and_answerability(served: Served, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [key for key in os.environ if key.startswith("COMPASSMEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    question = QUESTIONS[0]
    assert main(["ask", "--url", served.url, "--budget", "5", CONVERSATION, question]) == 0
    out = capsys.readouterr().out
    response = served.memory.query(question, conversation_id=CONVERSATION, budget_turns=5)
    expected = ", ".join(f"{ref.turn_id} ({ref.relevance:.2f})" for ref in response.turn_refs)
    assert f"ranked turns: {expected}  (" in out
    assert f"answerable: {'yes' if response.answerable else 'no'} (probability " \
           f"{response.answerable_probability:.2f})" in out

    assert main(["ask", "--url", served.url, "--min-relevance", "1", CONVERSATION, question]) == 0
    captured = capsys.readouterr()
    assert "ranked turns: none" in captured.out and "answerable: " in captured.out, captured
    for bad in ("-0.1", "1.5", "x", "nan"):
        with pytest.raises(SystemExit) as stopped:
            main(["ask", "--url", served.url, "--min-relevance", bad, CONVERSATION, question])
        assert stopped.value.code == 2
        assert "--min-relevance" in capsys.readouterr().err
