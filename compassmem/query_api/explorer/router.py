"""The explorer on HTTP: the listings, the graph within limits, the live stream, and the page's static files.

Every endpoint takes the app's tenant dependency, so the page is held to the same API keys as any client. The page
itself (``/ui``) holds no data and needs no key: it asks for one and sends it with each request.
No ``from __future__ import annotations``: FastAPI reads the annotations of the endpoints made in
``explorer_router`` at runtime.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, FastAPI, Header, HTTPException, Query, status
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator, AwareDatetime
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from compassmem.contracts.records import ConversationPage, EventPage, FieldError, LimitedConversationGraph
from compassmem.models import check_storable
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    NOT_FOUND,
    ConversationId,
    Services,
    Tenant,
)
from compassmem.query_api.explorer.live import LiveFeed, LiveFeeds, LiveNotice, LiveReady, sse
from compassmem.retrieval.listing import ConversationOrder, CursorError

log = structlog.get_logger(__name__)

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
MAX_PAGE = 200
MAX_GRAPH_NODES = 5000
MAX_SEARCH_CHARS = 200
# A stream ends after this long and the page reconnects with Last-Event-ID (nothing is lost): an open page never
# holds a server's shutdown for longer, since uvicorn waits for open responses before it stops.
LIVE_STREAM_S = 15.0
_FOLLOW_WAIT_S = 10.0

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Items per page, 1-{MAX_PAGE}.")]
Cursor = Annotated[str | None, Query(max_length=512, description="The next_cursor of the previous page.")]
Search = Annotated[str | None, Query(max_length=MAX_SEARCH_CHARS, description=(
    f"Only conversations with an event whose conversation id, subject id, summary or a participant contains this "
    f"(case-insensitive; at most {MAX_SEARCH_CHARS} characters, no control characters)."
)), AfterValidator(lambda q: check_storable(q, multiline=False) if q else q)]
_STREAM_DOC = {200: {"content": {"text/event-stream": {}}, "description": (
    "Server-sent events: `ready` (LiveReady) once the stream follows the change feed, then `change` (LiveChange, "
    "with an id) for each event, topic or relation the worker writes for the conversation; `resync` (LiveNotice) "
    "when changes were lost (reload the graph, reconnect without Last-Event-ID) and `unavailable` (LiveNotice) "
    "when this process follows no change feed. The stream ends after `ends_after_s`: reconnect with Last-Event-ID.")}}


def explorer_router(live: LiveFeeds) -> APIRouter:
    """The explorer's endpoints, with the live feed they start on first use (and stop with the app)."""

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:  # noqa: ANN401 - the app
        yield
        live.stop()

    router = APIRouter(tags=["explorer"], lifespan=lifespan)

    @router.get("/v1/conversations", response_model=ConversationPage, summary="The tenant's conversations",
                description="A page of the tenant's conversations with their event and turn counts (provisional "
                            "events of conversations being streamed included) and the time of their latest "
                            "turn, most recently updated first (order=recent) or by id; q searches them.",
                responses={**AUTH_ERRORS, **INVALID})
    def get_conversations(tenant: Tenant, services: Services, q: Search = None, limit: Limit = 50,
                          cursor: Cursor = None, order: ConversationOrder = "recent") -> ConversationPage:
        with _cursor_errors():
            return services.memory.conversations(tenant=tenant, query=(q or "").strip() or None, limit=limit,
                                                 cursor=cursor, order=order)

    @router.get("/v1/conversations/{conversation_id}/events", response_model=EventPage,
                summary="A conversation's events, in time order",
                description="A page of the conversation's events (start time, then id), its open segment "
                            "(a provisional event) included.",
                responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID})
    def get_events(conversation_id: ConversationId, tenant: Tenant, services: Services, limit: Limit = 50,
                   cursor: Cursor = None) -> EventPage:
        # A conversation without memory is the app's 404 (Memory raises NotFound).
        with _cursor_errors():
            return services.memory.events(conversation_id, tenant=tenant, limit=limit, cursor=cursor)

    @router.get("/v1/conversations/{conversation_id}/graph", response_model=LimitedConversationGraph, tags=["memory"],
                summary="A conversation's event graph, for display",
                description="Event and cluster (topic) nodes, provisional events included, and every relation "
                            "edge including superseded ones, which are marked and kept as history. max_nodes keeps "
                            "the most recent events, since those that end at or after it; relations and topics "
                            "are then those of the events kept, and `limits` says how many were left out.",
                responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID})
    def get_graph(conversation_id: ConversationId, tenant: Tenant, services: Services,
                  max_nodes: Annotated[int | None, Query(ge=1, le=MAX_GRAPH_NODES, description=(
                      f"At most this many events (1-{MAX_GRAPH_NODES}), the most recent; topics come with them."
                  ))] = None,
                  since: Annotated[AwareDatetime | None, Query(description=(
                      "Only events that end at or after this ISO 8601 time (with an offset)."))] = None,
                  ) -> LimitedConversationGraph:
        return services.memory.graph(conversation_id, tenant=tenant, max_nodes=max_nodes, since=since)

    @router.get("/v1/conversations/{conversation_id}/live", response_class=StreamingResponse,
                summary="A conversation's changes as they are written (server-sent events)",
                responses={**_STREAM_DOC, **AUTH_ERRORS, **INVALID})
    async def get_live(conversation_id: ConversationId, tenant: Tenant,
                       last_event_id: Annotated[str | None, Header(max_length=64, description=(
                           "The id of the last change received, to get the ones after it."))] = None,
                       ) -> StreamingResponse:
        return StreamingResponse(_stream(live.feed(), tenant, conversation_id, last_event_id),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return router


@contextmanager
def _cursor_errors() -> Iterator[None]:
    try:
        yield
    except CursorError as error:
        detail = [FieldError(field="cursor", message=error.reason).model_dump()]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=detail) from error


async def _stream(feed: LiveFeed | None, tenant: str, conversation_id: str,
                  last_id: str | None) -> AsyncIterator[bytes]:
    if feed is None:
        yield sse("unavailable", LiveNotice(reason="this API process follows no change feed (set "
                                                  "COMPASSMEM_KAFKA_BOOTSTRAP, or run compassmem dev)"))
        return
    if not await asyncio.to_thread(feed.following.wait, _FOLLOW_WAIT_S):
        yield sse("unavailable", LiveNotice(reason="the change feed topics do not exist yet (no worker has started)"))
        return
    subscription, position = feed.subscribe(tenant, conversation_id, last_id)
    try:
        # A resumed stream keeps the client's last id; a new one starts from the position its graph load follows.
        yield sse("ready", LiveReady(ends_after_s=LIVE_STREAM_S), None if last_id else position)
        loop = asyncio.get_running_loop()
        ends = loop.time() + LIVE_STREAM_S
        while (left := ends - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(subscription.queue.get(), left)
            except TimeoutError:
                return
            if isinstance(item, LiveNotice):
                yield sse("resync", item)
                return
            yield sse("change", item.change, feed.event_id(subscription, item.sequence))
    finally:
        feed.unsubscribe(subscription)


class _UiFiles(StaticFiles):
    """The page's files, with a policy that lets it load only its own files and talk only to this API."""

    _HEADERS = {
        "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                   "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                                   "base-uri 'none'; form-action 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        # Revalidated on every load (ETag), so a new release of the page is picked up at once.
        "Cache-Control": "no-cache",
    }

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(self._HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """The page at /ui/ (index.html), its modules and the vendored graph library under it."""
    app.mount("/ui", _UiFiles(directory=UI_DIR, html=True), name="ui")
