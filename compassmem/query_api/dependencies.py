"""What every router of the app shares: the services, the tenant's API-key check as a dependency, the path and
query parameters and the documented error responses.

``create_app`` puts the ``ApiServices``, the ``Authorizer`` and the explorer's ``LiveFeeds`` on ``app.state``; the
dependencies here hand them to the endpoints. No ``from __future__ import annotations``: FastAPI reads these annotations at runtime.
"""

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from pydantic import AfterValidator

from compassmem.core.config import Settings
from compassmem.core.contracts.records import ErrorResponse, ValidationErrorResponse
from compassmem.library.memory import Memory
from compassmem.core.models import (
    DEFAULT_TENANT,
    ID_PATTERN,
    ID_RULE,
    MAX_ID_CHARS,
    TENANT_PATTERN,
    check_id,
)
from compassmem.monitoring.memory_health import MemoryHealthMonitor
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.publish.publisher import TurnPublisher
from compassmem.query_api.auth import Authorizer
from compassmem.query_api.explorer.live import LiveFeeds


@dataclass
class ApiServices:
    """What the app needs; ``server.build_services`` makes it for both ``compassmem api`` and ``compassmem dev``."""

    # Reads and deletions go through its verbs (query, listings, graph, events; forget, redact_turn, delete_tenant,
    # which record their command on the control topic it was given).
    memory: Memory
    # The app's: API keys, limits, the query deadline (build_services passes the memory's own settings).
    settings: Settings
    # In `compassmem dev` the worker's own: one /metrics shows both.
    metrics: MemoryMetrics
    turn_publisher: TurnPublisher | None = None
    # GET /v1/health/memory's figures and trends; None: create_app makes one over the memory's stores and metrics.
    health: MemoryHealthMonitor | None = None


# The dependencies are coroutines although they do no I/O: FastAPI runs a plain function on its thread pool, and each
# such hop cost about 0.3 ms of a request on two cores.
async def api_services(request: Request) -> ApiServices:
    services: ApiServices = request.app.state.services
    return services


def _authorizer(request: Request) -> Authorizer:
    authorizer: Authorizer = request.app.state.authorizer
    return authorizer


async def live_feeds(request: Request) -> LiveFeeds:
    live: LiveFeeds = request.app.state.live
    return live


def health_monitor(app: Any) -> MemoryHealthMonitor:  # noqa: ANN401 - the FastAPI app
    """The app's memory-health monitor: the services' own, else one over the memory's stores and the metrics, made
    on first use (the OpenAPI document's app has no memory)."""
    monitor: MemoryHealthMonitor | None = app.state.health
    if monitor is None:
        services: ApiServices = app.state.services
        monitor = app.state.health = MemoryHealthMonitor(services.memory.stores, services.metrics)
    return monitor


async def memory_health(request: Request) -> MemoryHealthMonitor:
    return health_monitor(request.app)


Services = Annotated[ApiServices, Depends(api_services)]
Live = Annotated[LiveFeeds, Depends(live_feeds)]
Health = Annotated[MemoryHealthMonitor, Depends(memory_health)]


def authorize(request: Request, tenant: str) -> None:
    """Return when the request's API key may act for ``tenant``; raise the 401 or 403 otherwise."""
    _authorizer(request).check(tenant, request.headers.get("authorization"))


_ID_SCHEMA = {"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS}
ConversationId = Annotated[str, Path(description=f"The conversation: {ID_RULE}.", json_schema_extra=_ID_SCHEMA),
                           AfterValidator(check_id)]
EventId = Annotated[str, Path(description=f"An event id, as returned in evidence: {ID_RULE}.",
                              json_schema_extra=_ID_SCHEMA), AfterValidator(check_id)]
TenantParam = Annotated[str, Query(pattern=TENANT_PATTERN, description="The tenant that owns the data.")]


async def authorized_tenant(request: Request, tenant: TenantParam = DEFAULT_TENANT) -> str:
    """The ``tenant`` query parameter, once the request's API key may act for it."""
    authorize(request, tenant)
    return tenant


Tenant = Annotated[str, Depends(authorized_tenant)]

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "The tenant requires an API key and none was sent."},
    403: {"model": ErrorResponse, "description": "The API key is not the tenant's."},
}
ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No API key was sent."},
    403: {"model": ErrorResponse, "description": "The key is not an admin key, or none is configured."},
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorResponse, "description": "A field or parameter breaks a rule; each entry "
                                                           "names the field and the rule."},
}
NOT_FOUND = {404: {"model": ErrorResponse, "description": "No memory for that tenant and conversation."}}
UNAVAILABLE = {503: {"model": ErrorResponse, "description": "The topic is not configured or did not acknowledge."}}
TOO_LARGE = {413: {"model": ErrorResponse, "description": "The body is over COMPASSMEM_API_MAX_BODY_BYTES (or a "
                                                          "record over what Kafka accepts); the detail names the "
                                                          "limit."}}
DEADLINE = {503: {"model": ErrorResponse, "description": "The query ran past COMPASSMEM_API_QUERY_DEADLINE_S; "
                                                         "retry later or ask a simpler question."}}
