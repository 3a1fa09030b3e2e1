"""What operators and their tools read: ``/healthz`` (do the stores answer?) and ``/metrics`` (Prometheus).

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from compassmem.query_api.dependencies import Services

router = APIRouter()


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(description="Per store: 'ok' or the error it gave.")


@router.get("/healthz", response_model=Health, tags=["operations"], summary="Do the stores answer?",
            responses={503: {"model": Health, "description": "A store did not answer."}})
def healthz(services: Services) -> JSONResponse:
    checks = services.memory.stores.health()
    healthy = all(v == "ok" for v in checks.values())
    body = Health(status="ok" if healthy else "unavailable", checks=checks)
    return JSONResponse(status_code=200 if healthy else 503, content=body.model_dump())


@router.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}})
def metrics(services: Services) -> Response:
    return Response(content=generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)

