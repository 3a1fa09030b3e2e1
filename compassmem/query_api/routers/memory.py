"""A tenant's memory by id: one event, and forgetting a whole conversation.

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from fastapi import APIRouter

from compassmem.contracts.records import DeleteResult, ErrorResponse, EventOut
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    UNAVAILABLE,
    ConversationId,
    EventId,
    Live,
    Services,
    Tenant,
)

router = APIRouter()


@router.get("/v1/events/{event_id}", response_model=EventOut, tags=["memory"], summary="One event",
            description="An event of the tenant, with its source turns (observations) and time anchors.",
            responses={404: {"model": ErrorResponse, "description": "The tenant has no such event."},
                       **AUTH_ERRORS, **INVALID})
def get_event(event_id: EventId, tenant: Tenant, services: Services) -> EventOut:
    return services.memory.event(event_id, tenant=tenant)


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
