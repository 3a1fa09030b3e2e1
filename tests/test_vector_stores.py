"""Both vector backends against real engines: qdrant-edge in-process, and qdrant-client's local mode standing in
for a Qdrant server (same client code path)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from compassmem.config import Settings
from compassmem.models import Event
from compassmem.sinks.event_payload import event_from_payload, event_to_payload, point_id
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.sinks.qdrant_server_backend import QdrantServerVectorStore
from compassmem.sinks.vector_store import SparseVector, VectorStore

Opener = Callable[[], VectorStore]
EventBuilder = Callable[..., Event]
Sparse = Callable[[Sequence[str]], SparseVector]
Put = Callable[..., None]


def _open_edge(path: Path, dim: int) -> VectorStore:
    return EdgeVectorStore(path / "edge", dim=dim)


def _open_qdrant_local(path: Path, dim: int) -> VectorStore:
    client = QdrantClient(path=str(path / "qdrant-local"))
    return QdrantServerVectorStore(client, "events", dim=dim, owns_client=True)


@pytest.fixture(params=["edge", "qdrant-client-local"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path, store_dim: int) -> Iterator[Opener]:
    """Opens (and reopens) the backend under test on one path; closes whatever is still open at the end."""
    opener = {"edge": _open_edge, "qdrant-client-local": _open_qdrant_local}[request.param]
    opened: list[VectorStore] = []

    def open_() -> VectorStore:
        store = opener(tmp_path, store_dim)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def put(sparse_keywords: Sparse) -> Callable[..., None]:
    """``put(store, *events)``: upsert events with their keywords as the sparse vector."""

    def put_(store: VectorStore, *events: Event) -> None:
        store.upsert_events(events, [sparse_keywords(e.keywords or ["filler"]) for e in events])

    return put_


def _unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector)
    return array / np.linalg.norm(array)


def test_upsert_under_the_same_id_replaces(put: Put, open_store: Opener, event_builder: EventBuilder) -> None:
    store = open_store()
    first = event_builder("c1", 1, keywords=["garden"])
    put(store, first)
    put(store, first)
    updated = first.model_copy(update={"summary": "merged summary", "version": 2})
    put(store, updated)

    assert store.count("default") == 1
    (stored,) = store.get_events("default", [first.event_id])
    assert stored.summary == "merged summary"
    assert stored.version == 2


def test_payload_round_trip_keeps_every_field(put: Put, open_store: Opener, event_builder: EventBuilder) -> None:
    store = open_store()
    event = event_builder("c1", 3, keywords=["pottery", "class"], cluster_id="cl-1")
    put(store, event)

    (stored,) = store.get_events("default", [event.event_id])
    assert stored.model_dump(exclude={"embedding"}) == event.model_dump(exclude={"embedding"})
    assert stored.time_anchors[0].start.isoformat() == "2023-05-06"
    assert stored.observations[0].timestamp.utcoffset() is not None


def test_dense_search_is_scoped_to_tenant_and_conversation(
    put: Put, open_store: Opener, event_builder: EventBuilder
) -> None:
    store = open_store()
    mine = [event_builder("c1", i, tenant="alice") for i in range(1, 6)]
    # Identical embeddings elsewhere: if scoping leaked, these would tie for first place.
    other_conversation = [event_builder("c2", i, tenant="alice") for i in range(1, 6)]
    other_tenant = [event_builder("c1", i, tenant="bob") for i in range(1, 6)]
    put(store, *mine, *other_conversation, *other_tenant)

    hits = store.search("alice", "c1", mine[2].embedding or [], limit=10)

    assert [h.event.event_id for h in hits][0] == mine[2].event_id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert {h.event.event_id for h in hits} == {e.event_id for e in mine}
    assert all(h.event.tenant == "alice" and h.event.conversation_id == "c1" for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert store.search("carol", "c1", mine[2].embedding or [], limit=10) == []


def test_keyword_search_ranks_a_shared_rare_term_first(
    sparse_keywords: Sparse, put: Put, open_store: Opener, event_builder: EventBuilder
) -> None:
    store = open_store()
    common = [event_builder("c1", i, keywords=["meeting", "project", f"word{i}"]) for i in range(1, 8)]
    rare = event_builder("c1", 20, keywords=["meeting", "zanzibar"])
    put(store, *common, rare)
    # Another conversation that mentions the rare term must not appear.
    put(store, event_builder("c2", 1, keywords=["zanzibar"]))

    hits = store.keyword_search("default", "c1", sparse_keywords(["meeting", "zanzibar"]), limit=5)

    assert hits[0].event.event_id == rare.event_id
    assert hits[0].score > hits[1].score
    assert all(h.event.conversation_id == "c1" for h in hits)
    assert store.keyword_search("default", "c1", SparseVector(indices=[], values=[]), limit=5) == []


def test_reads_return_embeddings_and_respect_tenants(put: Put, open_store: Opener, event_builder: EventBuilder) -> None:
    store = open_store()
    events = [event_builder("c1", i) for i in (5, 1, 3)]
    foreign = event_builder("c1", 9, tenant="bob")
    put(store, *events, foreign)

    asked = [events[2].event_id, "not-an-event", events[0].event_id, foreign.event_id]
    got = store.get_events("default", asked)
    assert [e.event_id for e in got] == [events[2].event_id, events[0].event_id]

    conversation = store.conversation_events("default", "c1")
    assert [e.observations[0].turn_id for e in conversation] == ["D1:1", "D1:3", "D1:5"]
    for event in [*got, *conversation]:
        original = next(e for e in events if e.event_id == event.event_id)
        assert event.embedding is not None
        # Qdrant keeps cosine vectors unit-normalised; our test vectors already are.
        np.testing.assert_allclose(_unit(event.embedding), _unit(original.embedding or []), atol=1e-5)


def test_deletes_are_scoped(put: Put, open_store: Opener, event_builder: EventBuilder) -> None:
    store = open_store()
    c1 = [event_builder("c1", i) for i in range(1, 4)]
    c2 = [event_builder("c2", i) for i in range(1, 3)]
    bob = [event_builder("c1", i, tenant="bob") for i in range(1, 3)]
    put(store, *c1, *c2, *bob)

    store.delete_events("bob", [c1[0].event_id])  # another tenant's id: nothing happens
    assert store.count("default", "c1") == 3
    store.delete_events("default", [c1[0].event_id])
    assert store.count("default", "c1") == 2

    store.delete_conversation("default", "c1")
    assert store.count("default", "c1") == 0
    assert store.count("default", "c2") == 2
    assert store.count("bob") == 2

    store.delete_tenant("default")
    assert store.count("default") == 0
    assert store.count("bob") == 2


def test_data_survives_close_and_reopen(
    sparse_keywords: Sparse, put: Put, open_store: Opener, event_builder: EventBuilder
) -> None:
    store = open_store()
    events = [event_builder("c1", i, keywords=["kayak"]) for i in range(1, 4)]
    put(store, *events)
    store.flush()
    store.close()

    reopened = open_store()
    assert reopened.count("default", "c1") == 3
    hits = reopened.search("default", "c1", events[1].embedding or [], limit=1)
    assert hits[0].event.event_id == events[1].event_id
    assert reopened.keyword_search("default", "c1", sparse_keywords(["kayak"]), limit=5)
    put(reopened, event_builder("c1", 7))
    assert reopened.count("default", "c1") == 4


def test_malformed_batches_are_rejected_before_writing(
    store_dim: int, put: Put, open_store: Opener, event_builder: EventBuilder
) -> None:
    store = open_store()
    event = event_builder("c1", 1)
    with pytest.raises(ValueError, match="sparse vectors"):
        store.upsert_events([event], [])
    with pytest.raises(ValueError, match="no embedding"):
        put(store, event.model_copy(update={"embedding": None}))
    with pytest.raises(ValueError, match="-d"):
        put(store, event_builder("c1", 2, dim=store_dim + 1))
    with pytest.raises(ValueError, match="dimensions"):
        store.search("default", "c1", [1.0, 0.0], limit=3)
    assert store.count("default") == 0


def test_a_dimension_change_is_refused_on_reopen(store_dim: int, open_store: Opener, tmp_path: Path) -> None:
    open_store().close()
    with pytest.raises(RuntimeError):
        if (tmp_path / "edge").exists():
            EdgeVectorStore(tmp_path / "edge", dim=store_dim * 2)
        else:
            client = QdrantClient(path=str(tmp_path / "qdrant-local"))
            try:
                QdrantServerVectorStore(client, "events", dim=store_dim * 2)
            finally:
                client.close()


def test_qdrant_client_in_memory_mode(store_dim: int, put: Put, event_builder: EventBuilder) -> None:
    store = QdrantServerVectorStore(QdrantClient(":memory:"), "events", dim=store_dim, owns_client=True)
    event = event_builder("c1", 1, keywords=["violin"])
    put(store, event)
    assert store.search("default", "c1", event.embedding or [], limit=1)[0].event.event_id == event.event_id
    store.close()


def test_edge_shard_refuses_a_second_opener(store_dim: int, tmp_path: Path) -> None:
    first = EdgeVectorStore(tmp_path / "edge", dim=store_dim)
    try:
        with pytest.raises(RuntimeError, match="another process"):
            EdgeVectorStore(tmp_path / "edge", dim=store_dim)
    finally:
        first.close()


def test_point_ids_and_payload_mapping(event_builder: EventBuilder) -> None:
    event = event_builder("c1", 1)
    assert point_id(event.event_id) == event.event_id
    assert point_id("D1:3") == point_id("D1:3") != point_id("D1:4")
    payload = event_to_payload(event)
    assert "embedding" not in payload
    assert payload["tenant"] == "default" and payload["conversation_id"] == "c1"
    assert payload["turn_ids"] == ["D1:1", "D1:2"]
    assert event_from_payload(payload, event.embedding) == event


def test_open_stores_embedded_defaults(store_dim: int, put: Put, tmp_path: Path, event_builder: EventBuilder) -> None:
    settings = Settings(data_dir=tmp_path / "data", qdrant_url=None, falkordb_url=None)
    with open_stores(settings, dim=store_dim) as stores:
        assert isinstance(stores, Stores) and stores.embedded_vectors
        assert isinstance(stores.vectors, EdgeVectorStore)
        assert isinstance(stores.graph, FalkorDBGraphStore)
        server = stores.embedded_falkordb
        assert server is not None and server.running
        event = event_builder("c1", 1)
        put(stores.vectors, event)
        stores.graph.upsert_events([event])
        assert list(stores.graph.conversation_graph("default", "c1").nodes) == [event.event_id]
    assert not server.running
    assert (tmp_path / "data" / "qdrant").is_dir()
    assert (tmp_path / "data" / "falkordb" / "appendonlydir").is_dir()
