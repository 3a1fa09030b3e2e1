"""The query API app over stores that hold nothing, for tests of what the app does around its endpoints (headers,
authentication) without a broker, an embedder or real stores: ``GET /v1/events/{id}`` reaches the store and
answers 404, so a 404 means the request got past authentication."""

from __future__ import annotations

from typing import Any, cast

from fastapi import FastAPI

from compassmem.core.config import Settings
from compassmem.library.memory import Memory
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.sinks.factory import Stores


# TestClient's default Host, "testserver", is no loopback name, and the app answers only those (DNS rebinding).
LOCAL_URL = "http://localhost"


class EmptyVectors:
    def get_events(self, tenant: str, event_ids: list[str]) -> list[Any]:
        return []

    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        return 0


class EmptyGraph:
    def relations(self, tenant: str, conversation_id: str) -> list[Any]:
        return []


class NoEmbedder:
    """Stands in for the model, which no request of these tests reaches (none asks a question)."""

    dim = 384


def offline_app(**settings: Any) -> FastAPI:
    stores = Stores(vectors=cast(Any, EmptyVectors()), graph=cast(Any, EmptyGraph()))
    app_settings = Settings(_env_file=None, **settings)  # type: ignore[call-arg]
    memory = Memory(app_settings, stores=stores, embedder=cast(Any, NoEmbedder()))
    services = ApiServices(memory=memory, settings=app_settings, metrics=MemoryMetrics(process_collectors=False))
    return create_app(services)
