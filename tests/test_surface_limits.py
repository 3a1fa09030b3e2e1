"""One table of bounds for every surface (``compassmem/core/contracts/limits.py``): the HTTP API, the MCP tools,
``Memory``'s verbs and the Python client refuse the same out-of-range values, each naming the parameter, and the MCP
tools' schemas state the HTTP API's bounds. Every value here is refused before a store is asked, so the stores of
``offline_api`` (which hold nothing and answer little) are enough."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from compassmem.core.contracts import limits
from compassmem.core.errors import BadRequest
from compassmem.library.client import Client
from compassmem.library.memory import Memory
from compassmem.mcp.server import build_server
from compassmem.query_api.openapi import openapi_document
from compassmem.query_api.server import BackgroundServer
from offline_api import offline_app

Verbs = Memory | Client
QUESTION = {"question": "What happened?", "conversation_id": "c1"}


@dataclass(frozen=True)
class Bounded:
    """One bounded parameter on every surface that takes it: its HTTP request, the same call on ``Memory`` and on
    ``Client``, and the MCP tool that takes it (None: no tool does)."""

    http: Callable[[httpx.Client, Any], httpx.Response]
    verbs: Callable[[Verbs, Any], object]
    tool: str | None
    names: tuple[str, str]  # as HTTP names it, as Memory, Client and MCP name it
    refused: tuple[Any, ...]


def _ask(verbs: Verbs, **fields: object) -> object:
    return verbs.query(QUESTION["question"], conversation_id="c1", **fields)


BOUNDS = {
    "page size": Bounded(lambda api, v: api.get("/v1/conversations", params={"limit": v}),
                         lambda verbs, v: verbs.conversations(limit=v), "list_conversations", ("limit", "limit"),
                         (0, limits.MAX_PAGE + 1, 1_000_000_000)),
    "events page size": Bounded(lambda api, v: api.get("/v1/conversations/c1/events", params={"limit": v}),
                                lambda verbs, v: verbs.events("c1", limit=v), None, ("limit", "limit"),
                                (0, limits.MAX_PAGE + 1)),
    "graph nodes": Bounded(lambda api, v: api.get("/v1/conversations/c1/graph", params={"max_nodes": v}),
                           lambda verbs, v: verbs.graph("c1", max_nodes=v), None, ("max_nodes", "max_nodes"),
                           (0, limits.MAX_GRAPH_NODES + 1)),
    "search text": Bounded(lambda api, v: api.get("/v1/conversations", params={"q": v}),
                           lambda verbs, v: verbs.conversations(query=v), "list_conversations", ("q", "query"),
                           ("x" * (limits.MAX_SEARCH_CHARS + 1), "a\x00b")),
    "cursor": Bounded(lambda api, v: api.get("/v1/conversations", params={"cursor": v}),
                      lambda verbs, v: verbs.conversations(cursor=v), "list_conversations", ("cursor", "cursor"),
                      ("c" * (limits.MAX_CURSOR_CHARS + 1),)),
    "query budget": Bounded(lambda api, v: api.post("/v1/query", json={**QUESTION, "budget_turns": v}),
                            lambda verbs, v: _ask(verbs, budget_turns=v), "recall",
                            ("budget_turns", "budget_turns"), (0, limits.MAX_BUDGET_TURNS + 1)),
    "graph walk": Bounded(lambda api, v: api.post("/v1/query", json={**QUESTION, "max_hops": v}),
                          lambda verbs, v: _ask(verbs, max_hops=v), None, ("max_hops", "max_hops"),
                          (-1, limits.MAX_HOPS + 1)),
    "relevance threshold": Bounded(lambda api, v: api.post("/v1/query", json={**QUESTION, "min_relevance": v}),
                                   lambda verbs, v: _ask(verbs, min_relevance=v), "recall",
                                   ("min_relevance", "min_relevance"), (-0.1, 1.5, 1_000_000_000)),
    "metadata filter": Bounded(lambda api, v: api.post("/v1/query", json={**QUESTION, "metadata": v}),
                               lambda verbs, v: _ask(verbs, metadata=v), "recall", ("metadata", "metadata"),
                               ({f"k{n}": n for n in range(limits.MAX_FILTER_KEYS + 1)},)),
}
CASES = [(name, value) for name, bounded in BOUNDS.items() for value in bounded.refused]


@dataclass
class Surfaces:
    api: httpx.Client
    memory: Memory
    client: Client
    mcp: MCPServer


@pytest.fixture(scope="module")
def surfaces() -> Iterator[Surfaces]:
    app = offline_app()
    memory: Memory = app.state.services.memory
    with BackgroundServer(app) as server, httpx.Client(base_url=server.url) as api, Client(server.url) as client:
        yield Surfaces(api=api, memory=memory, client=client, mcp=build_server(memory))


def _tool_call(server: MCPServer, tool: str, arguments: dict[str, Any]) -> object:
    async def call() -> object:
        return await server.call_tool(tool, arguments)

    return anyio.run(call)


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{name}={value!r:.12}" for name, value in CASES])
def test_every_surface_refuses_the_same_out_of_range_value_naming_it(surfaces: Surfaces, name: str,
                                                                     value: object) -> None:
    bounded = BOUNDS[name]
    http_name, name_elsewhere = bounded.names
    answer = bounded.http(surfaces.api, value)
    assert answer.status_code == 422, answer.text
    assert [error["field"] for error in answer.json()["detail"]] == [http_name]
    with pytest.raises(ValueError, match=name_elsewhere):
        bounded.verbs(surfaces.memory, value)
    with pytest.raises(BadRequest, match=http_name):
        bounded.verbs(surfaces.client, value)
    if bounded.tool is not None:
        arguments = {**(QUESTION if bounded.tool == "recall" else {}), name_elsewhere: value}
        with pytest.raises(ToolError, match=name_elsewhere):
            _tool_call(surfaces.mcp, bounded.tool, arguments)


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's bounds in its JSON schema, an optional one's from its non-null branch."""
    branch = next((b for b in schema.get("anyOf", []) if b.get("type") != "null"), schema)
    return {key: branch[key] for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
                                         "maxProperties", "patternProperties", "format") if key in branch}


def test_the_mcp_tools_state_the_http_apis_bounds(surfaces: Surfaces) -> None:
    async def listed() -> dict[str, dict[str, Any]]:
        return {tool.name: tool.input_schema["properties"] for tool in await surfaces.mcp.list_tools()}

    tools = anyio.run(listed)
    document = openapi_document()
    listing = {p["name"]: p["schema"] for p in document["paths"]["/v1/conversations"]["get"]["parameters"]}
    query = document["components"]["schemas"]["QueryRequest"]["properties"]
    pairs = {"list_conversations.limit": (tools["list_conversations"]["limit"], listing["limit"]),
             "list_conversations.query": (tools["list_conversations"]["query"], listing["q"]),
             "list_conversations.cursor": (tools["list_conversations"]["cursor"], listing["cursor"]),
             "recall.budget_turns": (tools["recall"]["budget_turns"], query["budget_turns"]),
             "recall.question": (tools["recall"]["question"], query["question"]),
             "recall.conversation_ids": (tools["recall"]["conversation_ids"], query["conversation_ids"]),
             "recall.metadata": (tools["recall"]["metadata"], query["metadata"]),
             "recall.min_relevance": (tools["recall"]["min_relevance"], query["min_relevance"]),
             "recall.time_from": (tools["recall"]["time_from"], query["time_from"]),
             "recall.time_to": (tools["recall"]["time_to"], query["time_to"])}
    for argument, (mcp, http) in pairs.items():
        assert _bounds(http), argument
        assert _bounds(mcp) == _bounds(http), argument
    numeric = {f"{tool}.{name}" for tool, properties in tools.items() for name, schema in properties.items()
               if {"integer", "number"} & {schema.get("type"), *(b.get("type") for b in schema.get("anyOf", []))}}
    assert numeric <= set(pairs), "an MCP tool takes a number the HTTP API's bounds are not compared for"
