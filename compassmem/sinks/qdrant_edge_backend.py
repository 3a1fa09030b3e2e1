"""The embedded vector store: Qdrant's own engine in-process (qdrant-edge), one directory = one collection.

A shard belongs to one process (its write-ahead log is locked), so this backend serves the single-process
topology (`compassmem dev`); the production split uses the Qdrant server backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    KeywordIndexParams,
    MatchValue,
    Modifier,
    PayloadSchemaType,
    Point,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
)
from qdrant_edge import SparseVector as EdgeSparseVector

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


class EdgeVectorStore(VectorStore):
    """Events as points of an embedded qdrant-edge shard at ``path`` (created on first use).

    Searches are exact (filtered by the keyword payload indexes); ``optimize()`` is deliberately never called,
    because it holds the GIL for its whole run and filtered exact search is already sub-millisecond here.
    Returned embeddings are unit-normalised: Qdrant stores cosine vectors normalised.
    """

    def __init__(self, path: Path, dim: int = 384) -> None:
        self.path = Path(path)
        self.dim = dim
        config = EdgeConfig(
            vectors={DENSE_VECTOR: EdgeVectorParams(size=dim, distance=Distance.Cosine)},
            sparse_vectors={SPARSE_VECTOR: EdgeSparseVectorParams(modifier=Modifier.Idf)},
        )
        self.path.mkdir(parents=True, exist_ok=True)
        existing = any(self.path.iterdir())
        try:
            # load() with a config checks it against the stored segments, so a dimension change fails here.
            self._shard: EdgeShard | None = (
                EdgeShard.load(str(self.path), config) if existing else EdgeShard.create(str(self.path), config)
            )
        except Exception as exc:
            hint = " (is another process or store object using this directory?)" if "WAL" in str(exc) else ""
            raise RuntimeError(f"cannot open the qdrant-edge shard at {self.path}{hint}: {exc}") from exc
        self._shard.update(UpdateOperation.create_field_index(TENANT_FIELD, KeywordIndexParams(is_tenant=True)))
        self._shard.update(UpdateOperation.create_field_index(CONVERSATION_FIELD, PayloadSchemaType.Keyword))
        log.info("vector_store.opened", backend="qdrant-edge", path=str(self.path), dim=dim, existing=existing)

    @property
    def shard(self) -> EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"the qdrant-edge store at {self.path} is closed")
        return self._shard

    def upsert_events(self, events: Sequence[Event], sparse: Sequence[SparseVector]) -> None:
        check_upsert_batch(events, sparse, self.dim)
        if not events:
            return
        points = [
            Point(
                id=point_id(event.event_id),
                vector={
                    DENSE_VECTOR: list(event.embedding or []),
                    SPARSE_VECTOR: EdgeSparseVector(indices=list(keywords.indices), values=list(keywords.values)),
                },
                payload=event_to_payload(event),
            )
            for event, keywords in zip(events, sparse, strict=True)
        ]
        self.shard.update(UpdateOperation.upsert_points(points))

    def get_events(self, tenant: str, event_ids: Sequence[str]) -> list[Event]:
        if not event_ids:
            return []
        ids: set[Any] = {point_id(event_id) for event_id in event_ids}
        found = self._scroll(Filter(must=[HasIdCondition(point_ids=ids), _match(TENANT_FIELD, tenant)]))
        return in_requested_order(found, event_ids)

    def conversation_events(self, tenant: str, conversation_id: str) -> list[Event]:
        return in_time_order(self._scroll(_scope(tenant, conversation_id)))

    def search(self, tenant: str, conversation_id: str, vector: Sequence[float], limit: int) -> list[ScoredEvent]:
        if len(vector) != self.dim:
            raise ValueError(f"query vector has {len(vector)} dimensions; the store holds {self.dim}-d vectors")
        return self._query(Query.Nearest(list(vector), using=DENSE_VECTOR), _scope(tenant, conversation_id), limit)

    def keyword_search(self, tenant: str, conversation_id: str, query: SparseVector, limit: int) -> list[ScoredEvent]:
        if not query.indices:
            return []
        sparse = EdgeSparseVector(indices=list(query.indices), values=list(query.values))
        return self._query(Query.Nearest(sparse, using=SPARSE_VECTOR), _scope(tenant, conversation_id), limit)

    def delete_events(self, tenant: str, event_ids: Sequence[str]) -> None:
        if not event_ids:
            return
        ids: set[Any] = {point_id(event_id) for event_id in event_ids}
        # By filter, not by id, so one tenant can never delete another tenant's points.
        self._delete(Filter(must=[HasIdCondition(point_ids=ids), _match(TENANT_FIELD, tenant)]))

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        self._delete(_scope(tenant, conversation_id))
        log.info("vector_store.conversation_deleted", tenant=tenant, conversation_id=conversation_id)

    def delete_tenant(self, tenant: str) -> None:
        self._delete(Filter(must=[_match(TENANT_FIELD, tenant)]))
        log.info("vector_store.tenant_deleted", tenant=tenant)

    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        if conversation_id is None:
            scope = Filter(must=[_match(TENANT_FIELD, tenant)])
        else:
            scope = _scope(tenant, conversation_id)
        return int(self.shard.count(CountRequest(exact=True, filter=scope)))

    def flush(self) -> None:
        self.shard.flush()

    def close(self) -> None:
        if self._shard is None:
            return
        shard, self._shard = self._shard, None
        shard.flush()
        shard.close()
        log.info("vector_store.closed", backend="qdrant-edge", path=str(self.path))

    def _query(self, query: Query, scope: Filter, limit: int) -> list[ScoredEvent]:
        if limit <= 0:
            return []
        hits = self.shard.query(
            QueryRequest(limit=limit, query=query, filter=scope, with_payload=True, with_vector=[DENSE_VECTOR])
        )
        return [ScoredEvent(event=_event(hit.payload, hit.vector), score=float(hit.score)) for hit in hits]

    def _scroll(self, scope: Filter) -> list[Event]:
        events: list[Event] = []
        offset: Any = None
        while True:
            records, offset = self.shard.scroll(
                ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=scope, with_payload=True, with_vector=[DENSE_VECTOR]
                )
            )
            events.extend(_event(record.payload, record.vector) for record in records)
            if offset is None:
                return events

    def _delete(self, scope: Filter) -> None:
        self.shard.update(UpdateOperation.delete_points_by_filter(scope))


def _match(key: str, value: str) -> FieldCondition:
    return FieldCondition(key=key, match=MatchValue(value))


def _scope(tenant: str, conversation_id: str) -> Filter:
    return Filter(must=[_match(TENANT_FIELD, tenant), _match(CONVERSATION_FIELD, conversation_id)])


def _event(payload: dict[str, Any] | None, vector: Any) -> Event:
    if payload is None:
        raise RuntimeError("qdrant-edge returned a point without its payload")
    return event_from_payload(payload, dense_of(vector))
