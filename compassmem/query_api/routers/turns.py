"""``POST /v1/turns``: one turn or a list, each in the turn schema or a chat message (``core/chat_messages.py``),
validated and produced to the turns topic.

No ``from __future__ import annotations``: FastAPI reads the endpoint's annotations at runtime.
"""

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Request, status
from pydantic import Discriminator, Field, Tag

from compassmem.core.contracts.limits import MAX_TURNS_PER_REQUEST
from compassmem.core.contracts.records import FieldError, TurnsAccepted
from compassmem.core.chat_messages import ChatMessage, is_chat_message, turns_of
from compassmem.core.errors import BadRequest
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

# Names of the shapes the body and each of its items may take; pydantic puts them in error locations, the app's
# handler drops them.
ONE_TURN, TURN_LIST = "one turn", "list of turns"
TURN, CHAT_MESSAGE = "turn", "chat message"
BODY_SHAPES = frozenset({ONE_TURN, TURN_LIST, TURN, CHAT_MESSAGE})

router = APIRouter(route_class=TenantRoute)


def _shape(value: Any) -> str:
    return TURN_LIST if isinstance(value, list) else ONE_TURN


def _kind(value: Any) -> str:
    return CHAT_MESSAGE if isinstance(value, dict) and is_chat_message(value) else TURN


TurnOrMessage = Annotated[Annotated[Turn, Tag(TURN)] | Annotated[ChatMessage, Tag(CHAT_MESSAGE)], Discriminator(_kind)]
TurnsBody = Annotated[
    Annotated[TurnOrMessage, Tag(ONE_TURN)]
    | Annotated[list[TurnOrMessage], Tag(TURN_LIST), Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST)],
    Discriminator(_shape),
]


@router.post("/v1/turns", response_model=TurnsAccepted, status_code=status.HTTP_202_ACCEPTED, tags=["ingest"],
             summary="Append turns to the turns topic",
             description="One turn or a list (at most 1000), each in the message schema the importer and Kafka "
                         "producers use, or a chat message (conversation_id, role, content; its speaker, id and time "
                         "filled in: docs/getting-started.md#input-formats). Each is validated, then produced keyed "
                         "by tenant/conversation_id; 202 "
                         "means the broker acknowledged them. They become queryable once the worker has "
                         "processed them. A list is all or nothing at validation; a failed produce may have "
                         "written some, and retrying is safe because every write downstream is idempotent. A "
                         "turn id names one turn of its conversation: a turn memory has, sent again unchanged, is "
                         "not produced again (`accepted` counts the others); another turn under such an id, or "
                         "under an id given earlier in the request, is refused with 422.",
             responses={**UNAVAILABLE, **AUTH_ERRORS, **INVALID, **TOO_LARGE})
def post_turns(turns: Annotated[TurnsBody, Body()], request: Request, services: Services) -> TurnsAccepted:
    one_turn = not isinstance(turns, list)
    try:
        batch = turns_of([turns] if one_turn else turns, one=one_turn, now=datetime.now(UTC))  # type: ignore[list-item]
    except BadRequest as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            detail=[e.model_dump() for e in error.errors]) from error
    for tenant in sorted({t.tenant for t in batch}):
        authorize(request, tenant)
    if services.turn_publisher is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            detail="this API process has no turns topic to produce to "
                                   "(set COMPASSMEM_KAFKA_BOOTSTRAP, or run compassmem dev)")
    try:
        fresh = services.memory.new_turns(batch)
    except BadRequest as error:
        # The validation errors' shape. A turn id reused by a turn still on its way is the worker's to refuse.
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                            detail=[_in_body(e, one_turn).model_dump() for e in error.errors]) from error
    try:
        services.turn_publisher.publish_turns(fresh)
    except RecordTooLargeError as error:
        raise HTTPException(413, detail=f"a turn record is over the Kafka record size limit (the producer's "
                                        f"max_request_size, 1048576 bytes by default): {error}") from error
    except PublishError as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            detail=f"the turns were not acknowledged, retry later: {error}") from error
    return TurnsAccepted(accepted=len(fresh))


def _in_body(error: FieldError, one_turn: bool) -> FieldError:
    """A field of a body of one turn is named without the list's index, as its validation errors are."""
    return error.model_copy(update={"field": error.field.removeprefix("[0].")}) if one_turn else error
