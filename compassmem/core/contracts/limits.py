"""The bounds of what a caller may ask for, one table for every surface.

The HTTP API's parameters and bodies (``compassmem/query_api/routers``, ``QueryRequest``), the MCP tools' arguments
(``compassmem/mcp/server.py``), ``Memory``'s verbs and the LangChain and LangGraph integrations take these same
annotated types, so a bound cannot differ between them; the clients send theirs to the HTTP API (the TypeScript
client's types are generated from its OpenAPI document). ``tests/test_surface_limits.py`` holds every surface to them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field

from compassmem.core.models import INT64_BOUND, check_storable, iso_datetime_input

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
# A query's metadata filter: equality on a few top-level keys of the turns' metadata. Keys name a store's payload
# path as they are (no '.', '[' or quote); values are what both vector stores match exactly.
MAX_FILTER_KEYS = 16
MAX_FILTER_KEY_CHARS = 64
MAX_FILTER_VALUE_CHARS = 256
FILTER_KEY_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_FILTER_KEY_CHARS}}}$"


def _one_line(text: str) -> str:
    return check_storable(text, multiline=False) if text else text


def _filter_key(key: str) -> str:
    if not re.fullmatch(FILTER_KEY_PATTERN, key):
        raise ValueError(f"key {key[:80]!r}: a key is 1-{MAX_FILTER_KEY_CHARS} letters, digits, '_' or '-' (a "
                         "top-level key of the turns' metadata)")
    return key


def _filter_value(value: Any) -> Any:  # noqa: ANN401 - the raw input, before pydantic reads it
    # Checked before the str | int union, so that a refused value gets one message rather than one per member.
    # Booleans: qdrant-edge matches no boolean payload value; fractions: Qdrant matches no float.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("must be a string or an integer (a boolean, a number with a fraction, a list or an object "
                         "cannot be matched)")
    if isinstance(value, str) and len(value) > MAX_FILTER_VALUE_CHARS:
        raise ValueError(f"is {len(value)} characters; the limit is {MAX_FILTER_VALUE_CHARS}")
    if isinstance(value, int) and not -INT64_BOUND <= value < INT64_BOUND:
        raise ValueError("integers must fit in 64 bits (-2**63 to 2**63-1)")
    return value


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
# A query's time range: ISO 8601 with a UTC offset, as a turn's timestamp is.
TimeBound = Annotated[AwareDatetime, BeforeValidator(iso_datetime_input)]
FilterKey = Annotated[str, AfterValidator(_filter_key), Field(json_schema_extra={"pattern": FILTER_KEY_PATTERN})]
FilterValue = Annotated[Annotated[str, Field(max_length=MAX_FILTER_VALUE_CHARS)] | int, BeforeValidator(_filter_value)]
MetadataFilter = Annotated[dict[FilterKey, FilterValue], Field(max_length=MAX_FILTER_KEYS)]
