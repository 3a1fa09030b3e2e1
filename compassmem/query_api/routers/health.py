"""``GET /v1/health/memory``: a tenant's memory health at a glance (the explorer's Health panel, ``compassmem
status``), the figures the Prometheus metrics carry with their last samples (``compassmem/monitoring/memory_health.py``).

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AfterValidator, Field

from compassmem.core.contracts.health import MemoryHealth
from compassmem.core.contracts.limits import MAX_HEALTH_CONVERSATIONS, HealthConversations
from compassmem.core.models import ID_PATTERN, ID_RULE, MAX_ID_CHARS, check_id
from compassmem.query_api.auth import TenantRoute
from compassmem.query_api.dependencies import AUTH_ERRORS, INVALID, NOT_FOUND, Health, Tenant

router = APIRouter(route_class=TenantRoute)

ConversationParam = Annotated[str | None, Query(description=f"Only this conversation: {ID_RULE}."),
                              Field(json_schema_extra={"pattern": ID_PATTERN, "minLength": 1,
                                                       "maxLength": MAX_ID_CHARS}),
                              AfterValidator(lambda value: check_id(value) if value is not None else None)]


@router.get("/v1/health/memory", response_model=MemoryHealth, tags=["operations"],
            summary="A tenant's memory health, with trends",
            description="Per conversation (the one named, or the most recently updated ones): events, relations, "
                        "average degree, duplicate rate and relation-confidence drift, read from the stores; the "
                        "tenant's totals; and the worker's lag, dead letters and confidence drift when this API "
                        "process runs one (compassmem dev; they cover every tenant it serves). Each figure comes "
                        "with its last samples, kept in this process (at most one per sample_every_s, "
                        "samples_kept of them): the tenants asked about are sampled in the background for 15 "
                        "minutes after each request.",
            responses={**AUTH_ERRORS, **INVALID, **NOT_FOUND})
def get_memory_health(tenant: Tenant, health: Health, conversation: ConversationParam = None,
                      limit: Annotated[HealthConversations, Query(description=(
                          f"The most recently updated conversations to report (1-{MAX_HEALTH_CONVERSATIONS})."))] = 20,
                      ) -> MemoryHealth:
    return health.report(tenant, conversation=conversation, limit=limit)
