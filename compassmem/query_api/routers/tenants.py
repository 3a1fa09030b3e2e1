"""``DELETE /v1/tenants/{tenant}``: a whole tenant's memory deleted (admin).

It is ``Memory.delete_tenant``, which records its command on the control topic first when one is configured; one
that is not acknowledged changes nothing and is answered 503 (the app's handler of Unavailable): a deletion without
its log entry would come back on a replay of the turns topic.
No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Path

from compassmem.core.contracts.records import TenantDeleteResult
from compassmem.core.models import TENANT_PATTERN
from compassmem.query_api.auth import AdminRoute
from compassmem.query_api.dependencies import ADMIN_ERRORS, INVALID, UNAVAILABLE, Live, Services

TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN, description="The tenant to delete.")]

router = APIRouter(tags=["memory"], route_class=AdminRoute)


@router.delete("/v1/tenants/{tenant}", response_model=TenantDeleteResult, summary="Delete a whole tenant (admin)",
               description="Deletes every conversation of the tenant from both stores. Only with an admin key "
                           "(COMPASSMEM_API_ADMIN_KEYS), never a tenant's own. Records a forget command for "
                           "the whole tenant on the control topic when one is configured.",
               responses={**ADMIN_ERRORS, **UNAVAILABLE, **INVALID})
def delete_tenant(tenant: TenantPath, services: Services, live: Live) -> TenantDeleteResult:
    result = services.memory.delete_tenant(tenant)
    live.purge(tenant, None)
    return result
