"""``POST /v1/turns``: one turn or a list, validated and produced to the turns topic.

No ``from __future__ import annotations``: FastAPI reads the endpoint's annotations at runtime.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request, status
from pydantic import Discriminator, Field, Tag

from compassmem.core.contracts.limits import MAX_TURNS_PER_REQUEST
from compassmem.core.contracts.records import TurnsAccepted
from compassmem.core.models import Turn
from compassmem.query_api.auth import TenantRoute
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    INVALID,
    TOO_LARGE,
    UNAVAILABLE,
    Services,
    authorize,
)
from compassmem.publish.publisher import PublishError, RecordTooLargeError

# Names of the two shapes the body may take; pydantic puts them in error locations, the app's handler drops them.
ONE_TURN, TURN_LIST = "one turn", "list of turns"

router = APIRouter(route_class=TenantRoute)


def _shape(value: Any) -> str:
    return TURN_LIST if isinstance(value, list) else ONE_TURN


TurnsBody = Annotated[
    Annotated[Turn, Tag(ONE_TURN)]
    | Annotated[list[Turn], Tag(TURN_LIST), Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST)],
    Discriminator(_shape),
]


@router.post("/v1/turns", response_model=TurnsAccepted, status_code=status.HTTP_202_ACCEPTED, tags=["ingest"],
             summary="Append turns to the turns topic",
             description="One turn or a list (at most 1000), in the message schema the importer and Kafka "
                         "producers use. Each is validated, then produced keyed by tenant/conversation_id; 202 "
                         "means the broker acknowledged them. They become queryable once the worker has "
                         "processed them. A list is all or nothing at validation; a failed produce may have "
                         "written some, and retrying is safe because every write downstream is idempotent.",
             responses={**UNAVAILABLE, **AUTH_ERRORS, **INVALID, **TOO_LARGE})
def post_turns(turns: Annotated[TurnsBody, Body()], request: Request, services: Services) -> TurnsAccepted:
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
