"""The HTTP query API: one FastAPI app over injected services.

The same app serves both topologies: inside ``compassmem dev`` it shares the worker's store objects, and in
``compassmem api`` it runs alone against a Qdrant server and an external FalkorDB (see ``server.py``).
Everything it reads is scoped by tenant and conversation, so no answer can carry another tenant's events.
Endpoints are plain ``def``: FastAPI runs them on its thread pool, which the CPU-bound engine needs anyway.
No ``from __future__ import annotations`` here: FastAPI reads parameter annotations at runtime, and the
dependencies made inside ``create_app`` would not resolve from strings.
"""

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import structlog
from fastapi import Body, Depends, FastAPI, HTTPException, Path, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AfterValidator, BaseModel, Discriminator, Field, Tag

from compassmem import __version__
from compassmem.config import Settings
from compassmem.contracts.commands import ForgetCommand
from compassmem.contracts.query import QueryRequest, QueryResponse
from compassmem.contracts.records import (
    DeleteResult,
    ErrorResponse,
    EventOut,
    FieldError,
    TurnsAccepted,
    ValidationErrorResponse,
)
from compassmem.models import DEFAULT_TENANT, ID_PATTERN, ID_RULE, MAX_ID_CHARS, TENANT_PATTERN, Turn, check_id
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.auth import Authorizer
from compassmem.query_api.body_limit import BodyLimitMiddleware
from compassmem.query_api.request_id import install_request_ids
from compassmem.query_api.turn_publisher import ControlPublisher, PublishError, RecordTooLargeError, TurnPublisher
from compassmem.retrieval.engine import QueryDeadlineExceeded, QueryEngine
from compassmem.retrieval.hot_tier import HotTier
from compassmem.sinks.factory import Stores

log = structlog.get_logger(__name__)

MAX_TURNS_PER_REQUEST = 1000
# Names of the two shapes POST /v1/turns accepts; pydantic puts them in error locations, the handler drops them.
_ONE_TURN, _TURN_LIST = "one turn", "list of turns"


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(description="Per store: 'ok' or the error it gave.")


@dataclass
class ApiServices:
    """What the app needs; ``server.build_services`` makes it for both ``compassmem api`` and ``compassmem dev``."""

    engine: QueryEngine
    stores: Stores
    hot: HotTier
    settings: Settings
    # In `compassmem dev` the worker's own: one /metrics shows both.
    metrics: MemoryMetrics
    turn_publisher: TurnPublisher | None = None
    control_publisher: ControlPublisher | None = None


def _shape(value: Any) -> str:
    return _TURN_LIST if isinstance(value, list) else _ONE_TURN


TurnsBody = Annotated[
    Annotated[Turn, Tag(_ONE_TURN)]
    | Annotated[list[Turn], Tag(_TURN_LIST), Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST)],
    Discriminator(_shape),
]
_ID_SCHEMA = {"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS}
ConversationId = Annotated[str, Path(description=f"The conversation: {ID_RULE}.", json_schema_extra=_ID_SCHEMA),
                           AfterValidator(check_id)]
EventId = Annotated[str, Path(description=f"An event id, as returned in evidence: {ID_RULE}.",
                              json_schema_extra=_ID_SCHEMA), AfterValidator(check_id)]
TenantParam = Annotated[str, Query(pattern=TENANT_PATTERN, description="The tenant that owns the data.")]

_AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "The tenant requires an API key and none was sent."},
    403: {"model": ErrorResponse, "description": "The API key is not the tenant's."},
}
_INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorResponse, "description": "A field or parameter breaks a rule; each entry "
                                                           "names the field and the rule."},
}
_NOT_FOUND = {404: {"model": ErrorResponse, "description": "No memory for that tenant and conversation."}}
_UNAVAILABLE = {503: {"model": ErrorResponse, "description": "The topic is not configured or did not acknowledge."}}
_TOO_LARGE = {413: {"model": ErrorResponse, "description": "The body is over COMPASSMEM_API_MAX_BODY_BYTES (or a "
                                                           "record over what Kafka accepts); the detail names the "
                                                           "limit."}}
_DEADLINE = {503: {"model": ErrorResponse, "description": "The query ran past COMPASSMEM_API_QUERY_DEADLINE_S; "
                                                          "retry later or ask a simpler question."}}


def field_errors(errors: Sequence[Any]) -> list[FieldError]:
    """Pydantic's error list as 'field + rule' entries a person can act on."""
    found = []
    for error in errors:
        loc = list(error.get("loc", ()))
        if loc and loc[0] in {"body", "query", "path", "header"}:
            loc = loc[1:]
        if loc and loc[0] in {_ONE_TURN, _TURN_LIST}:
            loc = loc[1:]
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "body"
        if error.get("type") == "json_invalid":
            field = "body"  # its location is a character offset, not a field
        found.append(FieldError(field=_encodable(field), message=_encodable(_rule(error))))
    return found


def _encodable(text: str) -> str:
    """Field names come from the client's JSON keys, which may hold lone surrogates: escape them, or the error
    response itself could not be encoded as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _rule(error: Any) -> str:
    kind = error.get("type")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    message = str(error.get("msg", "is invalid"))
    return message.removeprefix("Value error, ")


def create_app(services: ApiServices) -> FastAPI:
    app = FastAPI(
        title="compassmem query API",
        version=__version__,
        description="Event-graph long-term memory for LLM agents: ask a question about a conversation and get "
                    "the chain of events that answers it, pointing to the exact source turns.",
    )

    # Inside the measuring middleware below, so refused bodies are counted too.
    app.add_middleware(BodyLimitMiddleware, max_bytes=services.settings.api_max_body_bytes)
    # /metrics is unauthenticated: the conversation ids of tenants with an API key never become label values.
    services.metrics.protect_tenants(services.settings.api_keys)

    @app.middleware("http")
    async def _measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        status_code = 500
        try:
            response = await call_next(request)
            status_code = response.status_code
            return response
        finally:
            # The route template, not the path: a bounded label even with ids in paths; unmatched paths share one.
            route = request.scope.get("route")
            services.metrics.http_request(request.method, getattr(route, "path", "unmatched"), status_code,
                                          time.perf_counter() - started)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        body = ValidationErrorResponse(detail=field_errors(exc.errors()))
        return JSONResponse(status_code=422, content=body.model_dump())

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises after this handler, so uvicorn still logs the traceback; this adds the path.
        log.error("api.unhandled_error", path=request.url.path, error=repr(exc))
        return JSONResponse(status_code=500, content={"detail": f"internal error ({type(exc).__name__}); "
                                                               "see the server log"})

    authorizer = Authorizer(services.settings.api_keys, required=services.settings.api_auth_required,
                            admin_keys=services.settings.api_admin_keys)

    def authorize(request: Request, tenant: str) -> None:
        authorizer.check(tenant, request.headers.get("authorization"))

    def authorized_tenant(request: Request, tenant: TenantParam = DEFAULT_TENANT) -> str:
        authorize(request, tenant)
        return tenant

    Tenant = Annotated[str, Depends(authorized_tenant)]

    @app.post("/v1/query", response_model=QueryResponse, tags=["query"],
              summary="Answer a question from the memory of one conversation, several, a subject's, or all",
              description="Searches one conversation (conversation_id), several (conversation_ids), every "
                          "conversation about one subject (subject_id) or the whole tenant (all_conversations); "
                          "results rank across them and every evidence item names its conversation. "
                          "Decomposes the question into subgoals (at most 8: the whole question, then its "
                          "clauses, then an LLM's), seeds each from hybrid search, walks the event "
                          "graph and returns ranked evidence events with their source turns, the relation path "
                          "that reached them and their resolved time anchors; plus an answer when an LLM "
                          "endpoint is configured (null otherwise, when it fails, or when the deadline passed "
                          "before it). A query still gathering evidence after COMPASSMEM_API_QUERY_DEADLINE_S is "
                          "answered 503.",
              responses={**_NOT_FOUND, **_AUTH_ERRORS, **_INVALID, **_TOO_LARGE, **_DEADLINE})
    def query(body: QueryRequest, request: Request) -> QueryResponse:
        authorize(request, body.tenant)
        started = time.perf_counter()
        try:
            response = services.engine.query(body, deadline_s=services.settings.api_query_deadline_s)
        except QueryDeadlineExceeded as error:
            services.metrics.query_failed()
            log.warning("api.query_deadline", tenant=body.tenant, scope=body.scope_label,
                        phase=error.phase, deadline_s=error.deadline_s)
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "1"},
                                detail=f"{error} (COMPASSMEM_API_QUERY_DEADLINE_S); retry later or ask a simpler "
                                       "question") from error
        except Exception:
            services.metrics.query_failed()
            raise
        # Only an empty answer asks the store whether the scope holds anything at all (a 404, not an empty 200).
        if not response.turn_ids and services.stores.vectors.count_turns(body.scope) == 0:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                detail=f"no memory for {body.scope_label} of tenant {body.tenant!r}")
        services.metrics.query_answered(response, time.perf_counter() - started)
        log.debug("api.query", tenant=body.tenant, scope=body.scope_label,
                  turns=len(response.turn_ids), ms=response.timings_ms.get("total"))
        return response

    @app.post("/v1/turns", response_model=TurnsAccepted, status_code=status.HTTP_202_ACCEPTED, tags=["ingest"],
              summary="Append turns to the turns topic",
              description="One turn or a list (at most 1000), in the message schema the importer and Kafka "
                          "producers use. Each is validated, then produced keyed by tenant/conversation_id; 202 "
                          "means the broker acknowledged them. They become queryable once the worker has "
                          "processed them. A list is all or nothing at validation; a failed produce may have "
                          "written some, and retrying is safe because every write downstream is idempotent.",
              responses={**_UNAVAILABLE, **_AUTH_ERRORS, **_INVALID, **_TOO_LARGE})
    def post_turns(turns: Annotated[TurnsBody, Body()], request: Request) -> TurnsAccepted:
        batch = [turns] if isinstance(turns, Turn) else turns
        for tenant in sorted({t.tenant for t in batch}):
            authorize(request, tenant)
        if services.turn_publisher is None:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                detail="this API process has no turns topic to produce to "
                                       "(set COMPASSMEM_KAFKA_BOOTSTRAP, or run compassmem dev)")
        try:
            services.turn_publisher.publish_turns(batch)
        except RecordTooLargeError as error:
            raise HTTPException(413, detail=f"a turn record is over the Kafka record size limit (the producer's "
                                            f"max_request_size, 1048576 bytes by default): {error}") from error
        except PublishError as error:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                detail=f"the turns were not acknowledged, retry later: {error}") from error
        return TurnsAccepted(accepted=len(batch))

    @app.get("/v1/events/{event_id}", response_model=EventOut, tags=["memory"], summary="One event",
             description="An event of the tenant, with its source turns (observations) and time anchors.",
             responses={404: {"model": ErrorResponse, "description": "The tenant has no such event."},
                        **_AUTH_ERRORS, **_INVALID})
    def get_event(event_id: EventId, tenant: Tenant) -> EventOut:
        found = services.stores.vectors.get_events(tenant, [event_id])
        if not found:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no event {event_id!r} for tenant {tenant!r}")
        return EventOut.of(found[0])

    @app.delete("/v1/conversations/{conversation_id}", response_model=DeleteResult, tags=["memory"],
                summary="Forget a conversation",
                description="Records a forget command on the control topic when one is configured (so a replay "
                            "of the turns topic does not bring the conversation back), then deletes the "
                            "conversation from both stores. Deleting a conversation that has no memory is not "
                            "an error.",
                responses={**_UNAVAILABLE, **_AUTH_ERRORS, **_INVALID})
    def delete_conversation(conversation_id: ConversationId, tenant: Tenant) -> DeleteResult:
        published = False
        if services.control_publisher is not None:
            try:
                command = ForgetCommand(tenant=tenant, conversation_id=conversation_id)
                services.control_publisher.publish_command(command)
            except PublishError as error:
                # Deleting without the log entry would let a replay resurrect the conversation.
                raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                    detail=f"the forget command was not acknowledged, nothing deleted: {error}") \
                    from error
            published = True
        events = services.stores.vectors.count(tenant, conversation_id)
        services.stores.vectors.delete_conversation(tenant, conversation_id)
        services.stores.graph.delete_conversation(tenant, conversation_id)
        services.hot.invalidate(tenant, conversation_id)
        log.info("api.conversation_deleted", tenant=tenant, conversation_id=conversation_id, events=events,
                 forget_published=published)
        return DeleteResult(tenant=tenant, conversation_id=conversation_id, events_deleted=events,
                            forget_published=published)

    @app.get("/healthz", response_model=Health, tags=["operations"], summary="Do the stores answer?",
             responses={503: {"model": Health, "description": "A store did not answer."}})
    def healthz() -> JSONResponse:
        checks = {"vectors": _check(lambda: services.stores.vectors.count(DEFAULT_TENANT)),
                  "graph": _check(lambda: services.stores.graph.relations(DEFAULT_TENANT, "healthz"))}
        healthy = all(v == "ok" for v in checks.values())
        body = Health(status="ok" if healthy else "unavailable", checks=checks)
        return JSONResponse(status_code=200 if healthy else 503, content=body.model_dump())

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}})
    def metrics() -> Response:
        return Response(content=generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    install_request_ids(app)
    # Imported here: the explorer's router uses this module's parameter types and response documentation.
    from compassmem.query_api.explorer.router import explorer_router, mount_ui
    from compassmem.query_api.management import management_router

    app.include_router(explorer_router(services, authorized_tenant))
    app.include_router(management_router(services, authorized_tenant, authorizer))
    mount_ui(app)
    return app


def _no_memory(tenant: str, conversation_id: str) -> str:
    return f"no memory for conversation {conversation_id!r} of tenant {tenant!r}"


def _check(probe: Callable[[], object]) -> str:
    try:
        probe()
    except Exception as error:  # noqa: BLE001 - any failure is the answer to "does the store answer?"
        log.warning("api.health_check_failed", error=repr(error))
        return f"{type(error).__name__}: {error}"
    return "ok"
