"""``DELETE /v1/tenants/{tenant}``: a whole tenant's memory deleted (admin).

It is ``Memory.delete_tenant``, which records its command on the control topic first when one is configured; one
that is not acknowledged changes nothing and is answered 503 (the app's handler of Unavailable): a deletion without
its log entry would come back on a replay of the turns topic.
No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Request

from compassmem.core.contracts.records import ErrorResponse, TenantDeleteResult
from compassmem.core.models import TENANT_PATTERN
from compassmem.query_api.dependencies import INVALID, UNAVAILABLE, AuthorizerOf, Live, Services

TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN, description="The tenant to delete.")]
_ADMIN_ERRORS = {401: {"model": ErrorResponse, "description": "No API key was sent."},
                 403: {"model": ErrorResponse, "description": "The key is not an admin key, or none is configured."}}

router = APIRouter(tags=["memory"])


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
