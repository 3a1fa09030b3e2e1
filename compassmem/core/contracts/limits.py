"""The bounds of what a caller may ask for, one table for every surface.

The HTTP API's parameters and bodies (``compassmem/query_api/routers``, ``QueryRequest``), the MCP tools' arguments
(``compassmem/mcp/server.py``), ``Memory``'s verbs and the LangChain and LangGraph integrations take these same
annotated types, so a bound cannot differ between them; the clients send theirs to the HTTP API (the TypeScript
client's types are generated from its OpenAPI document). ``tests/test_surface_limits.py`` holds every surface to them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from compassmem.core.models import check_storable

MAX_PAGE = 200  # items of one listing page: a tenant's conversations, a conversation's events
MAX_GRAPH_NODES = 5000  # events of one conversation graph
MAX_SEARCH_CHARS = 200  # a listing's search text
MAX_CURSOR_CHARS = 512  # a listing's cursor: a signed keyset position, far shorter
MAX_BUDGET_TURNS = 200  # ranked source turns one query returns
MAX_HOPS = 10  # depth of a query's graph walk
# A question is one short sentence or a few; longer ones only cost more (every clause can become a subgoal).
MAX_QUESTION_CHARS = 1000
# A list scope is for "these tickets"; a customer's whole history is a subject scope, not a list of ids.
MAX_SCOPE_CONVERSATIONS = 100
# Most turns one write may carry, over HTTP (POST /v1/turns) and MCP (remember) alike.
MAX_TURNS_PER_REQUEST = 1000
# The explorer's focused graphs: topics expanded at once, and events whose every relation is drawn (a selection, an
# answer's evidence and seeds).
MAX_GRAPH_TOPICS = 50
MAX_GRAPH_FOCUS = 100
# Links between topics one overview returns, the strongest first.
MAX_OVERVIEW_LINKS = 500
# Conversations one memory-health report covers, the most recently updated first.
MAX_HEALTH_CONVERSATIONS = 100


def _one_line(text: str) -> str:
    return check_storable(text, multiline=False) if text else text


PageSize = Annotated[int, Field(ge=1, le=MAX_PAGE)]
GraphNodes = Annotated[int, Field(ge=1, le=MAX_GRAPH_NODES)]
# One line, like the names and summaries it is matched against.
SearchText = Annotated[str, Field(max_length=MAX_SEARCH_CHARS), AfterValidator(_one_line)]
CursorText = Annotated[str, Field(max_length=MAX_CURSOR_CHARS)]
BudgetTurns = Annotated[int, Field(ge=1, le=MAX_BUDGET_TURNS)]
Hops = Annotated[int, Field(ge=0, le=MAX_HOPS)]
Question = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)]
ScopeIds = Annotated[list[str], Field(min_length=1, max_length=MAX_SCOPE_CONVERSATIONS)]
GraphTopics = Annotated[list[str], Field(max_length=MAX_GRAPH_TOPICS)]
GraphFocus = Annotated[list[str], Field(max_length=MAX_GRAPH_FOCUS)]
OverviewLinks = Annotated[int, Field(ge=1, le=MAX_OVERVIEW_LINKS)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
HealthConversations = Annotated[int, Field(ge=1, le=MAX_HEALTH_CONVERSATIONS)]
