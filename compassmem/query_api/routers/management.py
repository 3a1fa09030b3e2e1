"""Memory management over HTTP that removes parts of a memory: one turn (redaction) and a whole tenant (admin).

Both record their command on the control topic first when one is configured, and answer 503 with nothing changed
when it is not acknowledged: a deletion without its log entry would come back on a replay of the turns topic.
No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

import structlog
from fastapi import APIRouter, HTTPException, Path, Request, status
from pydantic import AfterValidator

from compassmem.contracts.commands import ForgetCommand, RedactCommand
from compassmem.contracts.records import ErrorResponse, RedactResult, TenantDeleteResult
from compassmem.models import TENANT_PATTERN, check_id
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    UNAVAILABLE,
    ApiServices,
    AuthorizerOf,
    ConversationId,
    Services,
    Tenant,
)
from compassmem.query_api.turn_publisher import PublishError
from compassmem.redaction import delete_stored_tenant, redact_stored_turn

log = structlog.get_logger(__name__)

TurnId = Annotated[str, Path(description="The turn id, as the turn was sent."), AfterValidator(check_id)]
TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN, description="The tenant to delete.")]
_ADMIN_ERRORS = {401: {"model": ErrorResponse, "description": "No API key was sent."},
                 403: {"model": ErrorResponse, "description": "The key is not an admin key, or none is configured."}}

router = APIRouter(tags=["memory"])


def _publish(services: ApiServices, command: ForgetCommand | RedactCommand) -> bool:
    if services.control_publisher is None:
        return False
    try:
        services.control_publisher.publish_command(command)
    except PublishError as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            detail=f"the {command.command} command was not acknowledged, nothing deleted: "
                                   f"{error}") from error
    return True


@router.delete("/v1/conversations/{conversation_id}/turns/{turn_id}", response_model=RedactResult,
               summary="Redact one turn",
               description="Deletes the turn and rebuilds the event that held it from its other turns "
                           "(summary, keywords, entities, embedding), or deletes the event with its relations "
                           "when it was the last. Records a redaction command on the control topic when one is "
                           "configured, so the worker drops the turn from its state and a replay of the turns "
                           "topic does not bring it back.",
               responses={404: {"model": ErrorResponse, "description": "The conversation has no such turn."},
                          **UNAVAILABLE, **AUTH_ERRORS, **INVALID})
def redact_turn(conversation_id: ConversationId, turn_id: TurnId, tenant: Tenant,
                services: Services) -> RedactResult:
    # Asked first, so that no command is recorded for a turn that is not there.
    if services.memory.stores.vectors.get_turn(tenant, conversation_id, turn_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no turn {turn_id!r} in conversation "
                                                              f"{conversation_id!r} of tenant {tenant!r}")
    # "checked": the worker may find the turn already gone (deleted below), which is no reason to refuse it.
    published = _publish(services, RedactCommand(tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
                                                 if_absent="checked"))
    stored = redact_stored_turn(services.memory.stores, tenant, conversation_id, turn_id)
    services.memory.hot.invalidate(tenant, conversation_id)
    if stored is None:  # redacted meanwhile by another request, or by the worker's control agent
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"turn {turn_id!r} is already redacted")
    return RedactResult(tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
                        event_id=stored.event_id, event_deleted=stored.event is None,
                        redaction_published=published)


@router.delete("/v1/tenants/{tenant}", response_model=TenantDeleteResult, summary="Delete a whole tenant (admin)",
               description="Deletes every conversation of the tenant from both stores. Only with an admin key "
                           "(COMPASSMEM_API_ADMIN_KEYS), never a tenant's own. Records a forget command for "
                           "the whole tenant on the control topic when one is configured.",
               responses={**_ADMIN_ERRORS, **UNAVAILABLE, **INVALID})
def delete_tenant(tenant: TenantPath, request: Request, authorizer: AuthorizerOf,
                  services: Services) -> TenantDeleteResult:
    # Checked here, after the path was validated: a malformed tenant is a 422 whatever the key.
    authorizer.check_admin(request.headers.get("authorization"))
    published = _publish(services, ForgetCommand(tenant=tenant))
    events = delete_stored_tenant(services.memory.stores, tenant)
    services.memory.hot.invalidate(tenant)
    log.info("api.tenant_deleted", tenant=tenant, events=events, forget_published=published)
    return TenantDeleteResult(tenant=tenant, events_deleted=events, forget_published=published)
