"""The production vector store: a Qdrant server through qdrant-client (any number of processes share it).

The same class runs on qdrant-client's local mode (``QdrantClient(":memory:")`` or ``path=...``), which is
how the tests exercise this code path; local mode is brute force, so it is not a default.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import structlog
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from compassmem.models import Event
from compassmem.sinks.event_payload import (
    CONVERSATION_FIELD,
    DENSE_VECTOR,
    SPARSE_VECTOR,
    TENANT_FIELD,
    check_upsert_batch,
    dense_of,
    event_from_payload,
    event_to_payload,
    in_requested_order,
    in_time_order,
    point_id,
)
from compassmem.sinks.vector_store import ScoredEvent, SparseVector, VectorStore

log = structlog.get_logger(__name__)

_SCROLL_PAGE = 256
_PAYLOAD_INDEXES: dict[str, models.KeywordIndexParams] = {
    # is_tenant lets the server co-locate each tenant's points, which keeps tenant-filtered search fast.
    TENANT_FIELD: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    CONVERSATION_FIELD: models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD),
}


class QdrantServerVectorStore(VectorStore):
    """Events as points of one collection; the collection is created (dense + sparse IDF, payload indexes) if missing.

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
                    vectors_config={DENSE_VECTOR: models.VectorParams(size=self.dim, distance=models.Distance.COSINE)},
                    sparse_vectors_config={SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                )
                log.info("vector_store.collection_created", collection=self.collection, dim=self.dim)
            except (UnexpectedResponse, ValueError):
                # Another worker may have created it between our check and our create.
                if not self.client.collection_exists(self.collection):
                    raise
        self._check_dimension()
        existing = self.client.get_collection(self.collection).payload_schema or {}
        for field, params in _PAYLOAD_INDEXES.items():
            if field in existing:
                continue
            with warnings.catch_warnings():
                # Local mode warns that payload indexes do nothing there; on a server they matter.
                warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
                self.client.create_payload_index(self.collection, field, field_schema=params)

    def _check_dimension(self) -> None:
        vectors = self.client.get_collection(self.collection).config.params.vectors
        dense = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
        if dense is None:
            raise RuntimeError(f"collection {self.collection!r} has no dense vector named {DENSE_VECTOR!r}")
        if dense.size != self.dim:
            raise RuntimeError(
                f"collection {self.collection!r} holds {dense.size}-d vectors; this store was opened for {self.dim}-d"
            )

    def upsert_events(self, events: Sequence[Event], sparse: Sequence[SparseVector]) -> None:
        check_upsert_batch(events, sparse, self.dim)
        if not events:
            return
        points = [
            models.PointStruct(
                id=point_id(event.event_id),
                vector={
                    DENSE_VECTOR: list(event.embedding or []),
                    SPARSE_VECTOR: models.SparseVector(indices=list(keywords.indices), values=list(keywords.values)),
                },
                payload=event_to_payload(event),
            )
            for event, keywords in zip(events, sparse, strict=True)
        ]
        self.client.upsert(self.collection, points=points, wait=True)

    def get_events(self, tenant: str, event_ids: Sequence[str]) -> list[Event]:
        if not event_ids:
            return []
        ids: list[Any] = sorted({point_id(event_id) for event_id in event_ids})
        found = self._scroll(models.Filter(must=[models.HasIdCondition(has_id=ids), _match(TENANT_FIELD, tenant)]))
        return in_requested_order(found, event_ids)

    def conversation_events(self, tenant: str, conversation_id: str) -> list[Event]:
        return in_time_order(self._scroll(_scope(tenant, conversation_id)))

    def search(self, tenant: str, conversation_id: str, vector: Sequence[float], limit: int) -> list[ScoredEvent]:
        if len(vector) != self.dim:
            raise ValueError(f"query vector has {len(vector)} dimensions; the store holds {self.dim}-d vectors")
        return self._query([float(x) for x in vector], DENSE_VECTOR, _scope(tenant, conversation_id), limit)

    def keyword_search(self, tenant: str, conversation_id: str, query: SparseVector, limit: int) -> list[ScoredEvent]:
        if not query.indices:
            return []
        sparse = models.SparseVector(indices=list(query.indices), values=list(query.values))
        return self._query(sparse, SPARSE_VECTOR, _scope(tenant, conversation_id), limit)

    def delete_events(self, tenant: str, event_ids: Sequence[str]) -> None:
        if not event_ids:
            return
        ids: list[Any] = sorted({point_id(event_id) for event_id in event_ids})
        # By filter, not by id, so one tenant can never delete another tenant's points.
        self._delete(models.Filter(must=[models.HasIdCondition(has_id=ids), _match(TENANT_FIELD, tenant)]))

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        self._delete(_scope(tenant, conversation_id))
        log.info("vector_store.conversation_deleted", tenant=tenant, conversation_id=conversation_id)

    def delete_tenant(self, tenant: str) -> None:
        self._delete(models.Filter(must=[_match(TENANT_FIELD, tenant)]))
        log.info("vector_store.tenant_deleted", tenant=tenant)

    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        scope = (
            _scope(tenant, conversation_id)
            if conversation_id is not None
            else models.Filter(must=[_match(TENANT_FIELD, tenant)])
        )
        return self.client.count(self.collection, count_filter=scope, exact=True).count

    def flush(self) -> None:
        # Every write waits for the server's acknowledgement (wait=True), by which time it is in its WAL.
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self.client.close()

    def _query(self, query: Any, using: str, scope: models.Filter, limit: int) -> list[ScoredEvent]:
        if limit <= 0:
            return []
        response = self.client.query_points(
            self.collection,
            query=query,
            using=using,
            query_filter=scope,
            limit=limit,
            with_payload=True,
            with_vectors=[DENSE_VECTOR],
        )
        return [ScoredEvent(event=_event(hit.payload, hit.vector), score=float(hit.score)) for hit in response.points]

    def _scroll(self, scope: models.Filter) -> list[Event]:
        events: list[Event] = []
        offset: Any = None
        while True:
            records, offset = self.client.scroll(
                self.collection,
                scroll_filter=scope,
                limit=_SCROLL_PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=[DENSE_VECTOR],
            )
            events.extend(_event(record.payload, record.vector) for record in records)
            if offset is None:
                return events

    def _delete(self, scope: models.Filter) -> None:
        self.client.delete(self.collection, points_selector=models.FilterSelector(filter=scope), wait=True)


def _match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _scope(tenant: str, conversation_id: str) -> models.Filter:
    return models.Filter(must=[_match(TENANT_FIELD, tenant), _match(CONVERSATION_FIELD, conversation_id)])


def _event(payload: dict[str, Any] | None, vector: Any) -> Event:
    if payload is None:
        raise RuntimeError("Qdrant returned a point without its payload")
    return event_from_payload(payload, dense_of(vector))
