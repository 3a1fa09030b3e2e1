"""The production vector store: a Qdrant server through qdrant-client (any number of processes share it).

The same class runs on qdrant-client's local mode (``QdrantClient(":memory:")`` or ``path=...``), which is
how the tests exercise this code path; local mode is brute force, so it is not a default. The point layout and
the store logic live in ``event_payload``; this module only speaks qdrant-client.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import structlog
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from compassmem.core.contracts.search import SparseVector
from compassmem.sinks import event_payload as layout
from compassmem.sinks.event_payload import Nearest, Payload, PointData, PointFilter, PointStore

# Collection metadata: which embedder made the collection's vectors (VectorStore.claim_vector_space).
VECTOR_SPACE_KEY = "compassmem_vector_space"

log = structlog.get_logger(__name__)

_PAYLOAD_INDEXES: dict[str, models.KeywordIndexParams | models.PayloadSchemaType] = {
    # is_tenant lets the server co-locate each tenant's points, which keeps tenant-filtered search fast.
    layout.TENANT_FIELD: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    **{
        field: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD)
        for field in layout.KEYWORD_INDEX_FIELDS
    },
    **{field: models.PayloadSchemaType.DATETIME for field in layout.DATETIME_INDEX_FIELDS},
}


class QdrantServerVectorStore(PointStore):
    """Events and turns as points of one collection; created (dense + sparse IDF, payload indexes) if missing.

    Returned embeddings are unit-normalised: Qdrant stores cosine vectors normalised.
    """

    def __init__(self, client: QdrantClient, collection: str, dim: int = 384, *, owns_client: bool = False) -> None:
        self.client = client
        self.collection = collection
        self.dim = dim
        self._owns_client = owns_client
        self._closed = False
        self._ensure_collection()

    @classmethod
    def from_url(
        cls,
        url: str,
        collection: str,
        dim: int = 384,
        api_key: str | None = None,
        timeout: int | None = 30,
    ) -> QdrantServerVectorStore:
        """Connect to a Qdrant server; the store owns this client and closes it on ``close()``."""
        client = QdrantClient(url=url, api_key=api_key, timeout=timeout)
        return cls(client, collection, dim, owns_client=True)

    def _ensure_collection(self) -> None:
        if not self.client.collection_exists(self.collection):
            try:
                self.client.create_collection(
                    self.collection,
                    vectors_config={
                        layout.DENSE_VECTOR: models.VectorParams(size=self.dim, distance=models.Distance.COSINE)
                    },
                    sparse_vectors_config={
                        name: models.SparseVectorParams(modifier=models.Modifier.IDF) for name in layout.SPARSE_VECTORS
                    },
                )
                log.info("vector_store.collection_created", collection=self.collection, dim=self.dim)
            except (UnexpectedResponse, ValueError):
                # Another worker may have created it between our check and our create.
                if not self.client.collection_exists(self.collection):
                    raise
        self._check_vectors()
        existing = self.client.get_collection(self.collection).payload_schema or {}
        for field, params in _PAYLOAD_INDEXES.items():
            if field in existing:
                continue
            with warnings.catch_warnings():
                # Local mode warns that payload indexes do nothing there; on a server they matter.
                warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
                self.client.create_payload_index(self.collection, field, field_schema=params)

    def recorded_vector_space(self) -> str | None:
        metadata = self.client.get_collection(self.collection).config.metadata or {}
        recorded = metadata.get(VECTOR_SPACE_KEY)
        return None if recorded is None else str(recorded)

    def record_vector_space(self, space: str) -> None:
        self.client.update_collection(self.collection, metadata={VECTOR_SPACE_KEY: space})

    def _check_vectors(self) -> None:
        params = self.client.get_collection(self.collection).config.params
        vectors = params.vectors
        dense = vectors.get(layout.DENSE_VECTOR) if isinstance(vectors, dict) else None
        if dense is None:
            raise RuntimeError(f"collection {self.collection!r} has no dense vector named {layout.DENSE_VECTOR!r}")
        if dense.size != self.dim:
            raise RuntimeError(
                f"collection {self.collection!r} holds {dense.size}-d vectors; this store was opened for {self.dim}-d"
            )
        missing = [name for name in layout.SPARSE_VECTORS if name not in (params.sparse_vectors or {})]
        if missing:
            raise RuntimeError(
                f"collection {self.collection!r} has no sparse vector named {', '.join(map(repr, missing))}"
                " (created by an older compassmem?); recreate it"
            )

    def flush(self) -> None:
        # Every write waits for the server's acknowledgement (wait=True), by which time it is in its WAL.
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self.client.close()

    def _upsert(self, points: Sequence[PointData]) -> None:
        structs = [
            models.PointStruct(
                id=p.id,
                vector=p.vectors(_sparse),
                payload=p.payload,
            )
            for p in points
        ]
        self.client.upsert(self.collection, points=structs, wait=True)

    def _scroll_page(self, where: PointFilter, offset: Any, limit: int, payload_keys: Sequence[str] | None = None,
                     vectors: bool = True) -> tuple[list[tuple[Payload, Any]], Any]:
        records, next_offset = self.client.scroll(
            self.collection,
            scroll_filter=_filter(where),
            limit=limit,
            offset=offset,
            with_payload=list(payload_keys) if payload_keys is not None else True,
            with_vectors=[layout.DENSE_VECTOR] if vectors else False,
        )
        return [(record.payload, record.vector) for record in records], next_offset

    def _query_keys(self, queries: Sequence[Nearest],
                    payload_keys: Sequence[Sequence[str] | None]) -> list[list[tuple[int, Payload | None, float]]]:
        responses = self._query(queries, [list(keys) if keys is not None else False for keys in payload_keys])
        return [[(_key(hit.id), hit.payload if keys is not None else None, float(hit.score)) for hit in response.points]
                for response, keys in zip(responses, payload_keys, strict=True)]

    def _payloads(self, keys: Sequence[int], payload_keys: Sequence[str]) -> dict[int, Payload]:
        records = self.client.retrieve(self.collection, ids=[str(uuid.UUID(int=key)) for key in keys],
                                       with_payload=list(payload_keys), with_vectors=False)
        return {_key(record.id): record.payload for record in records}

    def _query(self, queries: Sequence[Nearest], payloads: Sequence[bool | list[str]]) -> list[models.QueryResponse]:
        return self.client.query_batch_points(self.collection, requests=[
            models.QueryRequest(
                query=_sparse(query.query) if isinstance(query.query, SparseVector) else query.query,
                using=query.using,
                filter=_filter(query.where),
                limit=query.limit,
                with_payload=payload,
                with_vector=False,
            )
            for query, payload in zip(queries, payloads, strict=True)
        ])

    def _delete(self, where: PointFilter) -> None:
        self.client.delete(self.collection, points_selector=models.FilterSelector(filter=_filter(where)), wait=True)

    def _count(self, where: PointFilter) -> int:
        return self.client.count(self.collection, count_filter=_filter(where), exact=True).count


def _key(point_id: str | int) -> int:
    """A point id as the integer its UUID holds (the server answers UUIDs as text)."""
    return point_id if isinstance(point_id, int) else uuid.UUID(point_id).int


def _sparse(vector: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _filter(where: PointFilter) -> models.Filter:
    must: list[Any] = [
        models.FieldCondition(
            key=key,
            match=models.MatchAny(any=list(value)) if isinstance(value, tuple) else models.MatchValue(value=value),
        )
        for key, value in where.match.items()
    ]
    must.extend(models.FieldCondition(key=bound.key, range=models.DatetimeRange(gte=bound.since, lte=bound.until))
                for bound in where.within)
    must.extend(models.NestedCondition(nested=models.Nested(key=key, filter=_filter(inner)))
                for key, inner in where.some)
    if where.point_ids is not None:
        must.append(models.HasIdCondition(has_id=list(where.point_ids)))
    should: list[Any] | None = [_filter(option) for option in where.any_of] or None
    return models.Filter(must=must, should=should)
