"""Wiring: open the vector and graph stores the settings ask for (embedded defaults when no URL is set)."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

import structlog

from compassmem.config import Settings
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.sinks.qdrant_server_backend import QdrantServerVectorStore
from compassmem.sinks.vector_store import VectorStore

log = structlog.get_logger(__name__)


@dataclass
class Stores:
    vectors: VectorStore
    graph: GraphStore
    embedded_falkordb: EmbeddedFalkorDB | None = None

    @property
    def embedded_vectors(self) -> bool:
        """True when the vectors live in an in-process shard that no other process may open."""
        return isinstance(self.vectors, EdgeVectorStore)

    def close(self) -> None:
        """Close both stores, then stop the embedded FalkorDB if this object started it."""
        try:
            self.vectors.close()
        finally:
            try:
                self.graph.close()
            finally:
                if self.embedded_falkordb is not None:
                    self.embedded_falkordb.stop()

    def __enter__(self) -> Stores:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_stores(settings: Settings, dim: int = 384) -> Stores:
    vectors = open_vector_store(settings, dim)
    server: EmbeddedFalkorDB | None = None
    try:
        if settings.falkordb_url:
            graph: GraphStore = FalkorDBGraphStore.from_url(settings.falkordb_url)
        else:
            server = EmbeddedFalkorDB(settings.data_dir / "falkordb").start()
            graph = FalkorDBGraphStore.from_embedded(server)
    except BaseException:
        vectors.close()
        if server is not None:
            server.stop()
        raise
    log.info(
        "stores.opened",
        vectors=type(vectors).__name__,
        graph="external" if settings.falkordb_url else "embedded",
    )
    return Stores(vectors=vectors, graph=graph, embedded_falkordb=server)


def open_vector_store(settings: Settings, dim: int = 384) -> VectorStore:
    if settings.qdrant_url:
        return QdrantServerVectorStore.from_url(
            settings.qdrant_url, settings.qdrant_collection, dim, api_key=settings.qdrant_api_key
        )
    return EdgeVectorStore(settings.data_dir / "qdrant", dim)
