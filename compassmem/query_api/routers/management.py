"""Memory management over HTTP that removes parts of a memory: one turn (redaction) and a whole tenant (admin).

Both are ``Memory``'s verbs, which record their command on the control topic first when one is configured; one that
is not acknowledged changes nothing and is answered 503 (the app's handler of Unavailable): a deletion without its
log entry would come back on a replay of the turns topic.
No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import AfterValidator

from compassmem.contracts.records import ErrorResponse, RedactResult, TenantDeleteResult
from compassmem.models import TENANT_PATTERN, check_id
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    UNAVAILABLE,
    AuthorizerOf,
    ConversationId,
    Live,
    Services,
    Tenant,
)

TurnId = Annotated[str, Path(description="The turn id, as the turn was sent."), AfterValidator(check_id)]
TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN, description="The tenant to delete.")]
_ADMIN_ERRORS = {401: {"model": ErrorResponse, "description": "No API key was sent."},
                 403: {"model": ErrorResponse, "description": "The key is not an admin key, or none is configured."}}

router = APIRouter(tags=["memory"])


@router.delete("/v1/conversations/{conversation_id}/turns/{turn_id}", response_model=RedactResult,
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


@router.delete("/v1/tenants/{tenant}", response_model=TenantDeleteResult, summary="Delete a whole tenant (admin)",
               description="Deletes every conversation of the tenant from both stores. Only with an admin key "
                           "(COMPASSMEM_API_ADMIN_KEYS), never a tenant's own. Records a forget command for "
                           "the whole tenant on the control topic when one is configured.",
               responses={**_ADMIN_ERRORS, **UNAVAILABLE, **INVALID})
def delete_tenant(tenant: TenantPath, request: Request, authorizer: AuthorizerOf, services: Services,
                  live: Live) -> TenantDeleteResult:
    # Checked here, after the path was validated: a malformed tenant is a 422 whatever the key.
    authorizer.check_admin(request.headers.get("authorization"))
    result = services.memory.delete_tenant(tenant)
    live.purge(tenant, None)
    return result
