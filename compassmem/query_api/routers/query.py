"""``POST /v1/query``: a question answered from the memory of one conversation, several, a subject's, or all.

No ``from __future__ import annotations``: FastAPI reads the endpoint's annotations at runtime.
"""

import time

import structlog
from fastapi import APIRouter, HTTPException, Request, status
from starlette.concurrency import run_in_threadpool

from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.errors import NotFound, Unavailable
from compassmem.query_api.auth import TenantRoute
from compassmem.query_api.dependencies import (
    AUTH_ERRORS,
    DEADLINE,
    INVALID,
    NOT_FOUND,
    TOO_LARGE,
    Services,
    authorize,
)

log = structlog.get_logger(__name__)

router = APIRouter(route_class=TenantRoute)


@router.post("/v1/query", response_model=QueryResponse, tags=["query"],
             summary="Answer a question from the memory of one conversation, several, a subject's, or all",
             description="Searches one conversation (conversation_id), several (conversation_ids), every "
                         "conversation about one subject (subject_id) or the whole tenant (all_conversations); "
                         "results rank across them and every evidence item names its conversation. "
                         "Decomposes the question into subgoals (at most 8: the whole question, then its "
                         "clauses, then an LLM's), seeds each from hybrid search, walks the event "
                         "graph and returns ranked evidence events with their source turns, the relation path "
                         "that reached them and their resolved time anchors; plus an answer when an LLM "
                         "endpoint is configured (null otherwise, when it fails, or when the deadline passed "
                         "before it). With explain=true the response also holds `explanation`: per ranked turn the "
                         "channels that found it with its rank and score in each, each ranking feature's value and "
                         "contribution to its final score, its event and relation path; for the question its "
                         "subgoals, shape, time spans and what it asks for (without it the key is absent). A query still gathering evidence after COMPASSMEM_API_QUERY_DEADLINE_S is "
                         "answered 503.",
             responses={**NOT_FOUND, **AUTH_ERRORS, **INVALID, **TOO_LARGE, **DEADLINE})
async def query(body: QueryRequest, request: Request, services: Services) -> QueryResponse:
    authorize(request, body.tenant)
    started = time.perf_counter()
    try:
        # On the thread pool as a plain-def endpoint would be (the engine is CPU-bound), but awaited here: FastAPI
        # then checks the returned model on the event loop instead of on a second thread-pool hop.
        response = await run_in_threadpool(services.memory.query, body,
                                           deadline_s=services.settings.api_query_deadline_s)
    except NotFound:
        raise  # the scope holds no memory at all: the app's 404, not a failed query
    except Unavailable as error:
        # The deadline passed; the message names it and the step the query stopped at.
        services.metrics.query_failed()
        log.warning("api.query_deadline", tenant=body.tenant, scope=body.scope_label, error=str(error))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "1"},
                            detail=f"{error} (COMPASSMEM_API_QUERY_DEADLINE_S); retry later or ask a simpler "
                                   "question") from error
    except Exception:
        services.metrics.query_failed()
        raise
    services.metrics.query_answered(response, time.perf_counter() - started)
    log.debug("api.query", tenant=body.tenant, scope=body.scope_label,
              turns=len(response.turn_ids), ms=response.timings_ms.get("total"))
    return response
