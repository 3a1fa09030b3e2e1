"""Filtered queries: ``time_from``/``time_to`` (a turn said in the range, or held by an event whose resolved time
anchor overlaps it) and ``metadata`` (equality on the turn's metadata keys), applied by the store's searches and to
the candidates the hot tier holds, on both vector backends and through every surface: ``Memory.query``, the HTTP API
over real HTTP, ``Client``/``AsyncClient``, the MCP ``recall`` tool and the LangChain retriever.

One conversation over four months says the same fact in March and in June; a July turn says "last week" (the last
week of June) about it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from qdrant_client import QdrantClient

from compassmem.core.config import Settings
from compassmem.core.contracts.search import SearchScope, TurnFilter
from compassmem.core.models import Turn
from compassmem.integrations.langchain import CompassmemRetriever
from compassmem.library.client import AsyncClient, Client
from compassmem.library.memory import Memory
from compassmem.mcp.server import build_server
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import BackgroundServer
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.sinks.qdrant_server_backend import QdrantServerVectorStore
from compassmem.sinks.vector_store import HitSearch, TurnHit

CONVERSATION = "maya-leo"
QUESTION = "Where did Maya book the pottery course?"
JUNE = {"time_from": datetime(2024, 6, 1, tzinfo=UTC), "time_to": datetime(2024, 6, 30, 23, 59, 59, tzinfo=UTC)}
# A long written answer in March: its later passages are points of their own (text/passages.py).
LONG_MARCH = " ".join(["The pottery course runs for ten weeks at the community studio near the river."] * 40)


def _session(tenant: str, number: int, day: datetime, channel: str, lines: list[tuple[str, str]]) -> list[Turn]:
    return [Turn(tenant=tenant, conversation_id=CONVERSATION, turn_id=f"S{number}:{index}", speaker=speaker,
                 text=text, timestamp=day + timedelta(minutes=index), session_id=str(number),
                 metadata={"channel": channel, "session": number, "tags": [channel, "pottery"],
                           "by": speaker.lower()})
            for index, (speaker, text) in enumerate(lines, start=1)]


def conversation(tenant: str) -> list[Turn]:
    return [
        *_session(tenant, 1, datetime(2024, 3, 12, 18, tzinfo=UTC), "email", [
            ("Maya", "I booked the pottery course at the community studio by the river."),
            ("Leo", "Which evenings is it on?"),
            ("Maya", LONG_MARCH)]),
        *_session(tenant, 2, datetime(2024, 4, 20, 9, tzinfo=UTC), "chat", [
            ("Leo", "We repainted the kitchen a pale green this weekend."),
            ("Maya", "Send me a photo of the kitchen walls!")]),
        *_session(tenant, 3, datetime(2024, 6, 11, 19, tzinfo=UTC), "chat", [
            ("Maya", "Guess what: I booked the pottery course at the community studio by the river."),
            ("Leo", "Great, that will keep your hands busy.")]),
        *_session(tenant, 4, datetime(2024, 7, 3, 20, tzinfo=UTC), "chat", [
            ("Leo", "How are the evenings at the studio going?"),
            ("Maya", "Last week I fired my first bowl in the studio kiln.")]),
    ]


@dataclass
class Served:
    memory: Memory
    tenant: str
    url: str


def _vector_store(kind: str, root: Path, dim: int) -> Any:  # noqa: ANN401 - either backend
    if kind == "edge":
        return EdgeVectorStore(root / "qdrant", dim)
    return QdrantServerVectorStore(QdrantClient(path=str(root / "qdrant-local")), "events", dim, owns_client=True)


@pytest.fixture(scope="module", params=["edge", "qdrant-client-local"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embedder: Any,
           embedded_falkordb: Any) -> Iterator[Served]:
    """The conversation in memory on one vector backend, and the query API over it on a loopback port."""
    kind = request.param
    # One tenant per backend: the embedded FalkorDB is shared by the whole session.
    tenant = f"filters-{kind}"
    stores = Stores(vectors=_vector_store(kind, tmp_path_factory.mktemp(f"filters-{kind}"), embedder.dim),
                    graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    memory = Memory(settings, stores=stores, embedder=embedder)
    try:
        memory.add(conversation(tenant))
        services = ApiServices(memory=memory, settings=settings, metrics=MemoryMetrics(process_collectors=False))
        with BackgroundServer(create_app(services)) as server:
            yield Served(memory=memory, tenant=tenant, url=server.url)
    finally:
        memory.close()
        stores.close()


def _ids(response: Any) -> set[str]:  # noqa: ANN401 - a QueryResponse or its JSON
    refs = response["turn_refs"] if isinstance(response, dict) else [r.model_dump() for r in response.turn_refs]
    return {ref["turn_id"] for ref in refs}


def _june_turns(served: Served) -> set[str]:
    """What the June range admits by its documented meaning: turns said in June, and every turn of an event with a
    resolved time anchor overlapping June."""
    vectors = served.memory.stores.vectors
    june = (JUNE["time_from"].date(), JUNE["time_to"].date())
    anchored = {turn_id for event in vectors.conversation_events(served.tenant, CONVERSATION)
                if any(a.start <= june[1] and a.end >= june[0] for a in event.time_anchors)
                for turn_id in event.turn_ids}
    said = {turn.turn_id for turn in vectors.conversation_turns(served.tenant, CONVERSATION)
            if JUNE["time_from"] <= turn.timestamp <= JUNE["time_to"]}
    return said | anchored


def test_a_time_range_keeps_the_turns_said_then_and_those_of_an_event_naming_it(served: Served) -> None:
    memory, tenant = served.memory, served.tenant
    # Unfiltered first: the hot tier then holds the whole March event, which the filtered query must not leak.
    everything = _ids(memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50))
    assert {"S1:1", "S3:1"} <= everything

    expected = _june_turns(served)
    assert "S4:2" in expected and "S1:1" not in expected, "the July turn's 'last week' should anchor its event in June"
    june = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50, **JUNE)
    found = _ids(june)
    assert found == expected, (found, expected)
    assert {"S3:1", "S4:2"} <= found
    assert all(item.conversation_id == CONVERSATION for item in june.evidence)

    only_from = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                             time_from=datetime(2024, 7, 1, tzinfo=UTC))
    assert _ids(only_from) == {"S4:1", "S4:2"}
    until_march = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                               time_to=datetime(2024, 3, 31, tzinfo=UTC))
    assert _ids(until_march) == {"S1:1", "S1:2", "S1:3"}
    # A range ending inside an event: the hot tier holds the whole event, the answer only its turn said in range.
    minute = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                          time_from=datetime(2024, 6, 11, 19, tzinfo=UTC),
                          time_to=datetime(2024, 6, 11, 19, 1, 30, tzinfo=UTC))
    assert _ids(minute) == {"S3:1"}


def test_a_metadata_filter_keeps_only_the_turns_carrying_those_values(served: Served) -> None:
    memory, tenant = served.memory, served.tenant
    email = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                         metadata={"channel": "email"})
    assert _ids(email) == {"S1:1", "S1:2", "S1:3"}
    # One speaker's turns out of events that hold both speakers' (and that the hot tier holds whole).
    assert _ids(memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                             metadata={"by": "leo"})) == {"S1:2", "S2:1", "S3:2", "S4:1"}
    # An integer value, and a list value holding the one asked for.
    assert _ids(memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                             metadata={"session": 2})) == {"S2:1", "S2:2"}
    assert _ids(memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                             metadata={"tags": "email", "session": 1})) == {"S1:1", "S1:2", "S1:3"}
    # Nothing matches: an empty answer, not "no memory".
    none = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, metadata={"channel": "email"}, **JUNE)
    assert none.turn_ids == [] and none.evidence == []
    assert memory.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant,
                        metadata={"channel": "fax"}).turn_ids == []


def test_the_store_filters_turn_and_passage_searches_and_counts(served: Served) -> None:
    vectors, tenant = served.memory.stores.vectors, served.tenant
    query = served.memory.embedder.embed(["the pottery course runs for ten weeks at the community studio"])[0]
    scope = SearchScope.conversation(tenant, CONVERSATION)

    def found(turns: TurnFilter | None, kind: str) -> set[str]:
        narrowed = scope.model_copy(update={"turns": turns})
        hits = vectors.hits(narrowed, [HitSearch(kind, query, 50)])[0]  # type: ignore[arg-type]
        return {hit.turn_id for hit in hits if isinstance(hit, TurnHit)}

    assert found(None, "passage") == {"S1:3"}
    assert found(TurnFilter(time_from=JUNE["time_from"], time_to=JUNE["time_to"]), "passage") == set()
    assert found(TurnFilter(metadata=(("channel", "email"),)), "passage") == {"S1:3"}
    assert found(TurnFilter(time_from=JUNE["time_from"], time_to=JUNE["time_to"]), "turn") == _june_turns(served)
    assert found(TurnFilter(metadata=(("channel", "chat"),)), "turn") == {"S2:1", "S2:2", "S3:1", "S3:2", "S4:1",
                                                                         "S4:2"}
    assert vectors.count_turns(scope) == 9
    assert vectors.count_turns(scope.model_copy(update={"turns": TurnFilter(metadata=(("session", 3),))})) == 2


def test_every_surface_takes_the_filters(served: Served) -> None:
    tenant = served.tenant
    body = {"tenant": tenant, "conversation_id": CONVERSATION, "question": QUESTION, "budget_turns": 50}
    expected = _june_turns(served)
    with httpx.Client(base_url=served.url, timeout=60) as api:
        june = api.post("/v1/query", json={**body, "time_from": "2024-06-01T00:00:00Z",
                                           "time_to": "2024-06-30T23:59:59+00:00"})
        assert june.status_code == 200, june.text
        assert _ids(june.json()) == expected
        email = api.post("/v1/query", json={**body, "metadata": {"channel": "email"}})
        assert _ids(email.json()) == {"S1:1", "S1:2", "S1:3"}

    with Client(served.url) as client:
        assert _ids(client.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                                 **JUNE)) == expected
        assert _ids(client.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                                 metadata={"channel": "email"})) == {"S1:1", "S1:2", "S1:3"}

    async def ask_async() -> set[str]:
        async with AsyncClient(served.url) as client:
            return _ids(await client.query(QUESTION, conversation_id=CONVERSATION, tenant=tenant, budget_turns=50,
                                           metadata={"session": 2}))

    assert asyncio.run(ask_async()) == {"S2:1", "S2:2"}

    mcp = build_server(served.memory)

    async def recall(arguments: dict[str, Any]) -> set[str]:
        result = await mcp.call_tool("recall", {"question": QUESTION, "conversation_id": CONVERSATION,
                                                "tenant": tenant, "budget_turns": 50, "min_relevance": 0,
                                                **arguments})
        assert not result.is_error, result.content
        return {turn["turn_id"] for turn in result.structured_content["turns"]}

    assert anyio.run(recall, {"time_from": "2024-06-01T00:00:00Z", "time_to": "2024-06-30T23:59:59Z"}) == expected
    assert anyio.run(recall, {"metadata": {"channel": "email"}}) == {"S1:1", "S1:2", "S1:3"}

    retriever = CompassmemRetriever(memory=served.memory, tenant=tenant, conversation_id=CONVERSATION,
                                    budget_turns=50, metadata_filter={"channel": "email"}, min_relevance=0, **JUNE)
    assert retriever.invoke(QUESTION) == []
    retriever = CompassmemRetriever(memory=served.memory, tenant=tenant, conversation_id=CONVERSATION,
                                    budget_turns=50, time_from=JUNE["time_from"], min_relevance=0)
    assert {document.metadata["turn_id"] for document in retriever.invoke(QUESTION)} >= {"S3:1", "S4:2"}
    assert "S1:1" not in {document.metadata["turn_id"] for document in retriever.invoke(QUESTION)}


BAD_FILTERS = [
    ({"time_from": "2024-06-01T00:00:00"}, "time_from", "timezone"),
    ({"time_to": "2024-06-01"}, "time_to", "timezone"),
    ({"time_from": 1717200000}, "time_from", "ISO 8601"),
    ({"time_from": "2024-07-01T00:00:00Z", "time_to": "2024-06-01T00:00:00Z"}, "time_to", "time_from"),
    ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata", "16"),
    ({"metadata": {"channel": "x" * 257}}, "metadata", "256"),
    ({"metadata": {"a.b": "x"}}, "metadata", "64"),
    ({"metadata": {"urgent": True}}, "metadata", "string or an integer"),
    ({"metadata": {"score": 0.5}}, "metadata", "string or an integer"),
]


@pytest.mark.parametrize(("bad", "field", "rule"), BAD_FILTERS, ids=[str(case[0])[:40] for case in BAD_FILTERS])
def test_a_bad_filter_is_refused_naming_the_field_and_the_limit(served: Served, bad: dict[str, Any], field: str,
                                                                rule: str) -> None:
    body = {"tenant": served.tenant, "conversation_id": CONVERSATION, "question": QUESTION, **bad}
    with httpx.Client(base_url=served.url, timeout=60) as api:
        answer = api.post("/v1/query", json=body)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert [entry["field"].split(".")[0] for entry in detail] == [field], detail
    assert rule in detail[0]["message"], detail
    with pytest.raises(ValueError, match=field):
        served.memory.query(QUESTION, conversation_id=CONVERSATION, tenant=served.tenant, **bad)
    mcp = build_server(served.memory)
    with pytest.raises(ToolError, match=field):
        anyio.run(mcp.call_tool, "recall", {"question": QUESTION, "conversation_id": CONVERSATION, **bad})
