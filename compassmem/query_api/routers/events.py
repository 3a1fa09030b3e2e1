"""``GET /v1/events/{event_id}``: one event of a tenant's memory by id.

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from fastapi import APIRouter

from compassmem.core.contracts.records import ErrorResponse, EventOut
from compassmem.query_api.auth import TenantRoute
from compassmem.query_api.dependencies import AUTH_ERRORS, INVALID, EventId, Services, Tenant

router = APIRouter(route_class=TenantRoute)


@router.get("/v1/events/{event_id}", response_model=EventOut, tags=["memory"], summary="One event",
            description="An event of the tenant, with its source turns (observations) and time anchors.",
            responses={404: {"model": ErrorResponse, "description": "The tenant has no such event."},
                       **AUTH_ERRORS, **INVALID})
def get_event(event_id: EventId, tenant: Tenant, services: Services) -> EventOut:
    return services.memory.event(event_id, tenant=tenant)
