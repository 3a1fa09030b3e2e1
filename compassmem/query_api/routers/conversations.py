"""``/v1/conversations``: a tenant's conversations, and one conversation's events, graph, live changes, and its
deletions (the whole conversation, or one turn).

The listings and the graph are ``Memory``'s read verbs (``compassmem/retrieval/listing.py``); the deletions are its
``forget`` and ``redact_turn``, which record their command on the control topic first when one is configured (one
that is not acknowledged changes nothing and is answered 503) and are purged from this process's live feed at once.
The live stream is the explorer's (``compassmem/query_api/explorer/live.py``).
No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Path, Query, status
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator, AwareDatetime, Field

from compassmem.core.contracts.limits import (
    MAX_GRAPH_FOCUS,
    MAX_GRAPH_NODES,
    MAX_GRAPH_TOPICS,
    MAX_OVERVIEW_LINKS,
    MAX_PAGE,
    MAX_SEARCH_CHARS,
    Confidence,
    CursorText,
    GraphNodes,
    OverviewLinks,
    PageSize,
    SearchText,
)
from compassmem.core.contracts.records import (
    ConversationOverview,
    ConversationPage,
    DeleteResult,
    ErrorResponse,
    EventPage,
    FieldError,
    LimitedConversationGraph,
    RedactResult,
)
from compassmem.core.models import ID_PATTERN, ID_RULE, MAX_ID_CHARS, RelationType, check_id
from compassmem.query_api.auth import TenantRoute
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    NOT_FOUND,
    UNAVAILABLE,
    ConversationId,
    Live,
    Services,
    Tenant,
)
from compassmem.query_api.explorer.live import live_stream
from compassmem.retrieval.listing import ConversationOrder, CursorError

Limit = Annotated[PageSize, Query(description=f"Items per page, 1-{MAX_PAGE}.")]
Cursor = Annotated[CursorText | None, Query(description="The next_cursor of the previous page.")]
Search = Annotated[SearchText | None, Query(description=(
    f"Only conversations with an event whose conversation id, subject id, summary or a participant contains this "
    f"(case-insensitive; at most {MAX_SEARCH_CHARS} characters, no control characters)."
))]
TurnId = Annotated[str, Path(description="The turn id, as the turn was sent."), AfterValidator(check_id)]
_Id = Annotated[str, Field(json_schema_extra={"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS}),
                AfterValidator(check_id)]
Topics = Annotated[list[_Id] | None, Query(max_length=MAX_GRAPH_TOPICS, description=(
    f"Focus: the events of these topics (cluster ids, at most {MAX_GRAPH_TOPICS}; repeat the parameter), the most "
    f"recent max_nodes of them, with every relation touching them and the events at their other ends. {ID_RULE}."))]
Unclustered = Annotated[bool, Query(description="Focus: also the events without a topic yet (and an open segment).")]
Focus = Annotated[list[_Id] | None, Query(max_length=MAX_GRAPH_FOCUS, description=(
    f"Focus: these events (at most {MAX_GRAPH_FOCUS}; repeat the parameter) with every relation touching them, "
    "superseded ones included, and the events at their other ends."))]
_STREAM_DOC = {200: {"content": {"text/event-stream": {}}, "description": (
    "Server-sent events: `ready` (LiveReady) once the stream follows the change feed, then `change` (LiveChange, "
    "with an id) for each event, topic or relation the worker writes for the conversation; `resync` (LiveNotice) "
    "when changes were lost (reload the graph, reconnect without Last-Event-ID) and `unavailable` (LiveNotice) "
    "when this process follows no change feed. The stream ends after `ends_after_s`: reconnect with Last-Event-ID.")}}

router = APIRouter(route_class=TenantRoute)


@router.get("/v1/conversations", response_model=ConversationPage, tags=["explorer"],
            summary="The tenant's conversations",
            description="A page of the tenant's conversations with their event and turn counts (provisional "
                        "events of conversations being streamed included) and the time of their latest "
                        "turn, most recently updated first (order=recent) or by id; q searches them.",
            responses={**AUTH_ERRORS, **INVALID})
def get_conversations(tenant: Tenant, services: Services, q: Search = None, limit: Limit = 50,
                      cursor: Cursor = None, order: ConversationOrder = "recent") -> ConversationPage:
    with _cursor_errors():
        return services.memory.conversations(tenant=tenant, query=(q or "").strip() or None, limit=limit,
                                             cursor=cursor, order=order)


@router.delete("/v1/conversations/{conversation_id}", response_model=DeleteResult, tags=["memory"],
               summary="Forget a conversation",
               description="Records a forget command on the control topic when one is configured (so a replay "
                           "of the turns topic does not bring the conversation back), then deletes the "
                           "conversation from both stores. Deleting a conversation that has no memory is not "
                           "an error.",
               responses={**UNAVAILABLE, **AUTH_ERRORS, **INVALID})
def delete_conversation(conversation_id: ConversationId, tenant: Tenant, services: Services,
                        live: Live) -> DeleteResult:
    result = services.memory.forget(conversation_id, tenant=tenant)
    live.purge(tenant, conversation_id)
    return result


@router.get("/v1/conversations/{conversation_id}/events", response_model=EventPage, tags=["explorer"],
            summary="A conversation's events, in time order",
            description="A page of the conversation's events (start time, then id), its open segment "
                        "(a provisional event) included.",
            responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID})
def get_events(conversation_id: ConversationId, tenant: Tenant, services: Services, limit: Limit = 50,
               cursor: Cursor = None) -> EventPage:
    # A conversation without memory is the app's 404 (Memory raises NotFound).
    with _cursor_errors():
        return services.memory.events(conversation_id, tenant=tenant, limit=limit, cursor=cursor)


@router.get("/v1/conversations/{conversation_id}/graph", response_model=LimitedConversationGraph,
            tags=["explorer", "memory"], summary="A conversation's event graph, for display",
            description="Event and cluster (topic) nodes, provisional events included, and every relation "
                        "edge including superseded ones, which are marked and kept as history. max_nodes keeps "
                        "the most recent events, since those that end at or after it; relations and topics "
                        "are then those of the events kept, and `limits` says how many were left out.",
            responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID})
def get_graph(conversation_id: ConversationId, tenant: Tenant, services: Services,
              max_nodes: Annotated[GraphNodes | None, Query(description=(
                  f"At most this many events (1-{MAX_GRAPH_NODES}), the most recent; topics come with them."
              ))] = None,
              since: Annotated[AwareDatetime | None, Query(description=(
                  "Only events that end at or after this ISO 8601 time (with an offset)."))] = None,
              topic: Topics = None, unclustered: Unclustered = False, event: Focus = None,
              ) -> LimitedConversationGraph:
    return services.memory.graph(conversation_id, tenant=tenant, max_nodes=max_nodes, since=since, topics=topic,
                                 unclustered=unclustered, events=event)


@router.get("/v1/conversations/{conversation_id}/overview", response_model=ConversationOverview,
            tags=["explorer"], summary="A conversation's topics and the strongest links between them",
            description="What the explorer opens a conversation on, whatever its size: each topic (cluster) with "
                        "its event and turn counts and time span (the events without a topic yet as one more, id "
                        "null), the active relations per type with how many the filters keep, and the links the "
                        "kept relations make between topics, summed per pair of topics and type, the strongest "
                        "first. Read from the graph store's aggregates: no event or relation is loaded.",
            responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID})
def get_overview(conversation_id: ConversationId, tenant: Tenant, services: Services,
                 types: Annotated[list[RelationType] | None, Query(max_length=len(RelationType), description=(
                     "Only relations of these types (repeat the parameter); all when none is named."))] = None,
                 min_confidence: Annotated[Confidence, Query(description=(
                     "Only relations of at least this confidence (0-1)."))] = 0.0,
                 links: Annotated[OverviewLinks, Query(description=(
                     f"At most this many links between topics (1-{MAX_OVERVIEW_LINKS}), the strongest."))] = 50,
                 ) -> ConversationOverview:
    return services.memory.overview(conversation_id, tenant=tenant, types=types, min_confidence=min_confidence,
                                    links=links)


@router.get("/v1/conversations/{conversation_id}/live", response_class=StreamingResponse, tags=["explorer"],
            summary="A conversation's changes as they are written (server-sent events)",
            responses={**_STREAM_DOC, **AUTH_ERRORS, **INVALID})
async def get_live(conversation_id: ConversationId, tenant: Tenant, live: Live,
                   last_event_id: Annotated[str | None, Header(max_length=64, description=(
                       "The id of the last change received, to get the ones after it."))] = None,
                   ) -> StreamingResponse:
    return StreamingResponse(live_stream(live.feed(), tenant, conversation_id, last_event_id),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.delete("/v1/conversations/{conversation_id}/turns/{turn_id}", response_model=RedactResult, tags=["memory"],
               summary="Redact one turn",
               description="Deletes the turn and rebuilds the event that held it from its other turns "
                           "(summary, keywords, entities, embedding), or deletes the event with its relations "
                           "when it was the last. Records a redaction command on the control topic when one is "
                           "configured, so the worker drops the turn from its state and a replay of the turns "
                           "topic does not bring it back.",
               responses={404: {"model": ErrorResponse, "description": "The conversation has no such turn."},
                          **UNAVAILABLE, **AUTH_ERRORS, **INVALID})
def redact_turn(conversation_id: ConversationId, turn_id: TurnId, tenant: Tenant, services: Services,
                live: Live) -> RedactResult:
    result = services.memory.redact_turn(conversation_id, turn_id, tenant=tenant)
    live.purge(tenant, conversation_id)
    return result


@contextmanager
def _cursor_errors() -> Iterator[None]:
    try:
        yield
    except CursorError as error:
        detail = [FieldError(field="cursor", message=error.reason).model_dump()]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=detail) from error
