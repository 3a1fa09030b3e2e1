"""``from compassmem import Client, AsyncClient`` against a real server process (``compassmem dev``, see the
``served_memory`` fixture): the verbs, the typed errors, the API key header and the timeouts."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import ServedMemory, wait_until
from dev_process import free_port

from compassmem import (
    AsyncClient,
    BadRequest,
    Client,
    CompassmemError,
    Forbidden,
    NotFound,
    Unauthorized,
    Unavailable,
)
from compassmem.core.contracts.query import QueryRequest

QUESTION = "Why was the Atlas launch moved, and when did it finally launch?"


def test_query_returns_the_api_response_with_evidence(served_memory: ServedMemory) -> None:
    with Client(served_memory.url) as client:
        response = client.query(QUESTION, conversation_id="priya-tom", budget_turns=8)
        assert {"S2:2", "S3:1"} <= set(response.turn_ids)
        assert client.query(QueryRequest(question=QUESTION, conversation_id="priya-tom",
                                         budget_turns=8)).turn_ids == response.turn_ids
        event = client.event(response.evidence[0].event_id)
        assert event.conversation_id == "priya-tom"
        assert {o.turn_id for o in event.observations} >= {t.turn_id for t in response.evidence[0].turns}


def test_listing_and_graph(served_memory: ServedMemory) -> None:
    with Client(served_memory.url) as client:
        page = client.conversations()
        assert [c.conversation_id for c in page.conversations] == ["priya-tom"]
        assert page.conversations[0].turns == 24
        first = client.events("priya-tom", limit=2)
        assert len(first.events) == 2 and first.next_cursor
        second = client.events("priya-tom", limit=2, cursor=first.next_cursor)
        assert not {n.id for n in first.events} & {n.id for n in second.events}
        graph = client.graph("priya-tom", max_nodes=2)
        assert graph.counts.events == 2 and graph.limits.events_total >= 2


def test_errors_are_typed_and_carry_the_servers_message(served_memory: ServedMemory) -> None:
    with Client(served_memory.url) as client:
        with pytest.raises(NotFound, match="no memory for conversation 'nobody'") as missing:
            client.query("Who?", conversation_id="nobody")
        assert missing.value.status == 404
        with pytest.raises(NotFound):
            client.graph("nobody")
        with pytest.raises(BadRequest) as invalid:
            client.query("   ", conversation_id="priya-tom")
        assert invalid.value.status == 422
        assert [(e.field, e.message) for e in invalid.value.errors] == [("question", "must not be blank")]
        assert isinstance(invalid.value, ValueError)
        with pytest.raises(BadRequest, match="give exactly one scope"):
            client.query("Who?", conversation_id="priya-tom", subject_id="cust-1")
        with pytest.raises(BadRequest) as bad_turn:
            client.add({"conversation_id": "c", "turn_id": "1", "speaker": "A", "text": "hi", "timestamp": 5})
        assert [e.field for e in bad_turn.value.errors] == ["timestamp"]
        # Ids travel as one escaped path segment: '?' and '#' do not cut the path (the server sees, and refuses,
        # the whole id), and '+', ':' and '@' arrive as themselves.
        with pytest.raises(BadRequest, match="'\\?' U\\+003F"):
            client.graph("what?#now")
        with pytest.raises(NotFound, match="no\\+such:id@x"):
            client.graph("no+such:id@x")


def test_the_api_key_goes_in_the_authorization_header(served_memory: ServedMemory) -> None:
    tenant = served_memory.key_tenant
    with Client(served_memory.url) as anonymous, pytest.raises(Unauthorized) as refused:
        anonymous.query("What drops?", conversation_id="acme-1", tenant=tenant)
    assert refused.value.status == 401
    with Client(served_memory.url, api_key="wrong") as wrong, pytest.raises(Forbidden):
        wrong.conversations(tenant=tenant)
    with Client(served_memory.url, api_key=served_memory.key) as keyed:
        assert keyed.query("What drops?", conversation_id="acme-1", tenant=tenant).turn_ids == ["1"]
        assert [c.conversation_id for c in keyed.conversations(tenant=tenant).conversations] == ["acme-1"]


def test_an_unreachable_server_and_a_timeout_are_unavailable() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as nowhere, pytest.raises(Unavailable, match="127.0.0.1"):
        nowhere.conversations()

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with Client("http://memory.invalid", transport=httpx.MockTransport(slow)) as client, \
            pytest.raises(Unavailable, match="ReadTimeout"):
        client.query("Who?", conversation_id="c")
    assert issubclass(Unavailable, CompassmemError)


def test_add_then_forget_over_http(served_memory: ServedMemory) -> None:
    turn = {"conversation_id": "short-lived", "turn_id": "1", "speaker": "Ann",
            "text": "My sister Jo moves to Lisbon in June.", "timestamp": "2024-05-01T10:00:00+00:00"}
    with Client(served_memory.url) as client:
        assert client.add(turn).accepted == 1

        def remembered() -> bool:
            try:
                return client.query("Where is Jo moving?", conversation_id="short-lived").turn_ids == ["1"]
            except NotFound:
                return False

        wait_until(remembered, 60, "the worker to make the posted turn queryable", 0.3)
        result = client.forget("short-lived")
        assert result.forget_published and result.events_deleted >= 1
        with pytest.raises(NotFound):
            client.query("Where is Jo moving?", conversation_id="short-lived")


def test_the_async_client_has_the_same_verbs(served_memory: ServedMemory) -> None:
    async def main() -> None:
        async with AsyncClient(served_memory.url) as client:
            response, page = await asyncio.gather(client.query(QUESTION, conversation_id="priya-tom"),
                                                  client.conversations())
            assert "S2:2" in response.turn_ids
            assert "priya-tom" in [c.conversation_id for c in page.conversations]
            assert (await client.events("priya-tom", limit=1)).next_cursor
            assert (await client.graph("priya-tom")).counts.events > 1
            assert (await client.event(response.evidence[0].event_id)).event_id == response.evidence[0].event_id
            assert (await client.forget("never-there")).events_deleted == 0
            with pytest.raises(NotFound):
                await client.graph("nobody")
            with pytest.raises(BadRequest):
                await client.query("   ", conversation_id="priya-tom")
            with pytest.raises(BadRequest):
                await client.add([])

    asyncio.run(main())
