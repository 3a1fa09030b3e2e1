"""What operators and their tools read: ``/healthz`` (do the stores answer?) and ``/metrics`` (Prometheus).

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from collections.abc import Callable
from typing import Literal

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from compassmem.models import DEFAULT_TENANT
from compassmem.query_api.dependencies import Services

log = structlog.get_logger(__name__)

router = APIRouter()


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(description="Per store: 'ok' or the error it gave.")


@router.get("/healthz", response_model=Health, tags=["operations"], summary="Do the stores answer?",
            responses={503: {"model": Health, "description": "A store did not answer."}})
def healthz(services: Services) -> JSONResponse:
    stores = services.memory.stores
    checks = {"vectors": _check(lambda: stores.vectors.count(DEFAULT_TENANT)),
              "graph": _check(lambda: stores.graph.relations(DEFAULT_TENANT, "healthz"))}
    healthy = all(v == "ok" for v in checks.values())
    body = Health(status="ok" if healthy else "unavailable", checks=checks)
    return JSONResponse(status_code=200 if healthy else 503, content=body.model_dump())


@router.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}})
def metrics(services: Services) -> Response:
    return Response(content=generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _check(probe: Callable[[], object]) -> str:
    try:
        probe()
    except Exception as error:  # noqa: BLE001 - any failure is the answer to "does the store answer?"
        log.warning("api.health_check_failed", error=repr(error))
        return f"{type(error).__name__}: {error}"
    return "ok"
