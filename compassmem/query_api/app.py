"""The HTTP query API: one FastAPI app over injected services.

The same app serves both topologies: inside ``compassmem dev`` it shares the worker's store objects, and in
``compassmem api`` it runs alone against a Qdrant server and an external FalkorDB (see ``server.py``).
Everything it reads is scoped by tenant and conversation, so no answer can carry another tenant's events.
``create_app`` builds the app: the middleware, the error handlers, the routers of ``routers/`` (one per resource) and
the explorer's page, which take the services and the tenant's API-key check as dependencies (``dependencies.py``).
Endpoints are plain ``def``: FastAPI runs them on its thread pool, which the CPU-bound engine needs anyway;
``POST /v1/query`` is a coroutine that awaits the engine on that pool (one hop fewer per query).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi_offline import FastAPIOffline
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compassmem import __version__
from compassmem.core.contracts.records import ErrorResponse, FieldError, ValidationErrorResponse
from compassmem.core.errors import NotFound, Unavailable, field_name, rule_of
from compassmem.monitoring.memory_health import MemoryHealthMonitor
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.auth import Authorizer
from compassmem.query_api.body_limit import BodyLimitMiddleware
from compassmem.query_api.dependencies import ApiServices, health_monitor
from compassmem.query_api.explorer.live import LiveFeeds
from compassmem.query_api.explorer.ui import mount_ui
from compassmem.query_api.host_check import HostCheckMiddleware
from compassmem.query_api.request_id import install_request_ids
from compassmem.query_api.routers import config, conversations, events, health, operations, query, tenants, turns
from compassmem.query_api.server_spans import ServerSpanMiddleware

log = structlog.get_logger(__name__)

# The order the OpenAPI document lists the paths in, kept from before the routers were split by resource so that
# the published document did not change; a path not named here follows these.
DOCUMENT_ORDER = (
    "/v1/query", "/v1/turns", "/v1/events/{event_id}", "/v1/conversations/{conversation_id}", "/healthz", "/metrics",
    "/v1/conversations", "/v1/conversations/{conversation_id}/events", "/v1/conversations/{conversation_id}/graph",
    "/v1/conversations/{conversation_id}/live", "/v1/conversations/{conversation_id}/turns/{turn_id}",
    "/v1/tenants/{tenant}",
)


def field_errors(errors: Sequence[Any]) -> list[FieldError]:
    """Pydantic's error list as 'field + rule' entries a person can act on."""
    found = []
    for error in errors:
        loc = list(error.get("loc", ()))
        if loc and loc[0] in {"body", "query", "path", "header"}:
            loc = loc[1:]
        loc = [part for part in loc if part not in turns.BODY_SHAPES]
        field = field_name(loc) or "body"
        if error.get("type") == "json_invalid":
            field = "body"  # its location is a character offset, not a field
        found.append(FieldError(field=_encodable(field), message=_encodable(_rule(error))))
    return found


def _encodable(text: str) -> str:
    """Field names come from the client's JSON keys, which may hold lone surrogates: escape them, or the error
    response itself could not be encoded as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _rule(error: Any) -> str:
    if error.get("type") == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    return rule_of(error)


class RequestMetricsMiddleware:
    """Counts and times every HTTP request by method, route template and status (``MemoryMetrics.http_request``).

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's ``BaseHTTPMiddleware`` runs the app in a task
    group of its own and streams the response through a queue, which cost about 1 ms per request on two cores."""

    def __init__(self, app: ASGIApp, metrics: MemoryMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status_code = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            # The route template, not the path: a bounded label even with ids in paths; unmatched paths share one.
            # The router records the matched route in the scope it was given, which is this one.
            route = scope.get("route")
            self.metrics.http_request(scope["method"], getattr(route, "path", "unmatched"), status_code,
                                      time.perf_counter() - started)


def _in_document_order(app: FastAPI) -> None:
    """Make ``app.openapi`` list the paths in ``DOCUMENT_ORDER`` (FastAPI lists them in the order of the routers)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # FastAPI's, made once and kept: reordered in place, the same each time
        paths = schema.get("paths", {})
        schema["paths"] = {path: paths[path] for path in sorted(paths, key=_document_place)}
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_place(path: str) -> int:
    return DOCUMENT_ORDER.index(path) if path in DOCUMENT_ORDER else len(DOCUMENT_ORDER)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    monitor = health_monitor(app)
    sampler = asyncio.create_task(_sample_memory_health(monitor))
    # A conversation or tenant forgotten here leaves no trend for memory made again under its id.
    listeners = app.state.services.memory.forget_listeners
    listeners.append(monitor.forget)
    try:
        yield
    finally:
        listeners.remove(monitor.forget)
        sampler.cancel()
        app.state.live.stop()


async def _sample_memory_health(monitor: MemoryHealthMonitor) -> None:
    """The memory-health trends grow between two looks: the worker and the tenants asked about lately, sampled on the
    thread pool (store reads) every sample_every_s."""
    while True:
        await asyncio.sleep(monitor.sample_every_s)
        try:
            await asyncio.to_thread(monitor.sample_background)
        except Exception as error:  # noqa: BLE001 - the next round tries again
            log.warning("memory_health.sampler_failed", error=repr(error))


def create_app(services: ApiServices) -> FastAPI:
    # /docs and /redoc load their scripts and styles from this server (a CDN's would leave them blank offline).
    app = FastAPIOffline(
        lifespan=_lifespan,
        title="compassmem query API",
        version=__version__,
        description="Event-graph long-term memory for LLM agents: ask a question about a conversation and get "
                    "the chain of events that answers it, pointing to the exact source turns.",
    )
    # What the dependencies of dependencies.py hand to the endpoints.
    app.state.services = services
    app.state.authorizer = Authorizer(services.settings.tenant_keys())
    # The explorer's live streams (stopped with the app); the deletions purge what it keeps of what they delete.
    app.state.live = LiveFeeds(services.settings)
    # GET /v1/health/memory: the figures and their trends (made on first use), sampled while the app runs.
    app.state.health = services.health

    # Inside the measuring middleware below, so refused bodies are counted too.
    app.add_middleware(BodyLimitMiddleware, max_bytes=services.settings.api_max_body_bytes)
    # /metrics is unauthenticated: the conversation ids of tenants with an API key never become label values.
    services.metrics.protect_tenants(services.settings.api_keys)
    # Outside the body limit (a refused Host reads no body), inside the measuring middleware (refusals are counted).
    app.add_middleware(HostCheckMiddleware, bind_host=services.settings.api_host,
                       allowed_hosts=services.settings.api_allowed_hosts)

    app.add_middleware(RequestMetricsMiddleware, metrics=services.metrics)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        body = ValidationErrorResponse(detail=field_errors(exc.errors()))
        return JSONResponse(status_code=422, content=body.model_dump())

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        # Memory's read verbs raise it for a scope or conversation without memory: the documented 404.
        return JSONResponse(status_code=404, content=ErrorResponse(detail=exc.message).model_dump())

    @app.exception_handler(Unavailable)
    async def _unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        # Memory's deletions raise it when the control topic did not acknowledge their command: nothing changed.
        return JSONResponse(status_code=503, content=ErrorResponse(detail=exc.message).model_dump())

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises after this handler, so uvicorn still logs the traceback; this adds the path.
        log.error("api.unhandled_error", path=request.url.path, error=repr(exc))
        return JSONResponse(status_code=500, content={"detail": f"internal error ({type(exc).__name__}); "
                                                               "see the server log"})

    for router in (query.router, turns.router, conversations.router, events.router, tenants.router,
                   operations.router, config.router, health.router):
        app.include_router(router)
    _in_document_order(app)
    mount_ui(app)

    @app.get("/", include_in_schema=False)
    async def _home(request: Request) -> RedirectResponse:
        # Whoever opens the server's address in a browser lands on the explorer.
        return RedirectResponse(f"{request.scope.get('root_path', '')}/ui/")
    app.add_middleware(ServerSpanMiddleware)
    install_request_ids(app)
    return app
