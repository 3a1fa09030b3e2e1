"""The FalkorDB graph store and the embedded FalkorDB server, against the real redis-server + module."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from compassmem.core.models import Cluster, Event, Relation, RelationType, TimeAnchor
from compassmem.processors.relations import CONSECUTIVE_EVIDENCE
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB, FalkorDBStartupError

EventBuilder = Callable[..., Event]
RelationBuilder = Callable[..., Relation]
ClusterBuilder = Callable[..., Cluster]


@pytest.fixture
def graph_store(embedded_falkordb: EmbeddedFalkorDB) -> Iterator[FalkorDBGraphStore]:
    store = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    yield store
    store.close()


def _raw_counts(store: FalkorDBGraphStore, tenant: str) -> tuple[int, int]:
    """Nodes and edges as FalkorDB holds them (a networkx view would hide duplicate nodes)."""
    graph = store.db.select_graph(store.graph_name(tenant))
    nodes = graph.query("MATCH (n) RETURN count(n)").result_set[0][0]
    edges = graph.query("MATCH ()-[r]->() RETURN count(r)").result_set[0][0]
    return nodes, edges


def _chain(event_builder: EventBuilder, tenant: str, conversation_id: str = "c1", n: int = 4) -> list[Event]:
    return [event_builder(conversation_id, i, tenant=tenant, keywords=[f"k{i}"]) for i in range(1, n + 1)]


def test_writing_the_same_batch_twice_changes_nothing(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    events = _chain(event_builder, store_tenant)
    relations = [relation_builder(a, b.event_id) for a, b in zip(events, events[1:], strict=False)]
    relations.append(relation_builder(events[0], events[1].event_id, RelationType.TEMPORAL, subtype="before"))

    graph_store.upsert_events(events)
    graph_store.upsert_relations(relations)
    first = _raw_counts(graph_store, store_tenant)
    graph_store.upsert_events(events)
    graph_store.upsert_relations(relations)
    graph_store.upsert_relations(relations[:2])

    assert first == (4, 4)
    assert _raw_counts(graph_store, store_tenant) == first
    assert graph_store.relations(store_tenant, "c1") == sorted(relations, key=lambda r: (r.created_at, r.relation_id))


def test_conversation_graph_view(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    events = _chain(event_builder, store_tenant, n=2)
    relation = relation_builder(events[0], events[1].event_id)
    graph_store.upsert_events(events)
    graph_store.upsert_relations([relation])

    view = graph_store.conversation_graph(store_tenant, "c1")

    node = view.nodes[events[0].event_id]
    assert node["kind"] == "event" and node["stub"] is False
    assert node["summary"] == events[0].summary
    assert node["turn_ids"] == ["D1:1", "D1:2"]
    assert node["participants"] == ["Caroline", "Melanie"]
    assert node["start"] == events[0].temporal_info.start and isinstance(node["start"], datetime)
    assert node["time_anchors"] == events[0].time_anchors and isinstance(node["time_anchors"][0], TimeAnchor)
    edge = view.edges[events[0].event_id, events[1].event_id, relation.relation_id]
    assert edge["type"] == "causal" and edge["confidence"] == pytest.approx(0.8)
    assert Relation.model_validate(edge) == relation
    assert graph_store.conversation_graph(store_tenant, "missing").number_of_nodes() == 0


def test_edges_and_clusters_around_some_events_only(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder,
    cluster_builder: ClusterBuilder, store_tenant: str
) -> None:
    e1, e2, e3, e4 = _chain(event_builder, store_tenant)
    into, out_of = relation_builder(e1, e2.event_id), relation_builder(e2, e3.event_id)
    # Adjacency in time, as the relation extractor writes it: the walk's "adjacent" step.
    far = relation_builder(e3, e4.event_id, RelationType.FOLLOW_UP).model_copy(
        update={"evidence": CONSECUTIVE_EVIDENCE})
    rival = relation_builder(e3, e2.event_id, confidence=0.99)  # contradicts out_of: out_of is superseded
    graph_store.upsert_events([e1, e2, e3, e4])
    graph_store.upsert_relations([into, out_of, far])
    graph_store.upsert_relations([out_of.model_copy(update={"superseded_by": rival.relation_id}), rival])
    # Cluster membership edges are no relations: edges_touching must not return them.
    graph_store.upsert_clusters([cluster_builder([e2, e4], "cl-n")])
    other_tenant = f"{store_tenant}-other"  # the same event ids under another tenant must never show
    graph_store.upsert_events([e.model_copy(update={"tenant": other_tenant}) for e in (e2, e3)])
    graph_store.upsert_relations([relation_builder(e2.model_copy(update={"tenant": other_tenant}), e3.event_id,
                                                   RelationType.TEMPORAL, subtype="before")])

    around = graph_store.edges_touching(store_tenant, [e2.event_id])

    assert {edge.relation_id for edge in around} == {into.relation_id, rival.relation_id}  # active ones only
    edge = next(edge for edge in around if edge.relation_id == into.relation_id)
    assert (edge.source, edge.target, edge.type, edge.confidence) == (e1.event_id, e2.event_id, "causal",
                                                                      pytest.approx(0.8))
    assert not edge.adjacent  # its evidence is "because"
    both = graph_store.edges_touching(store_tenant, [e2.event_id, e3.event_id])
    assert sorted(edge.relation_id for edge in both) == sorted({into.relation_id, rival.relation_id,
                                                               far.relation_id})  # each edge once
    assert [edge.adjacent for edge in both if edge.relation_id == far.relation_id] == [True]
    assert graph_store.edges_touching("nobody-here", [e2.event_id]) == []
    assert graph_store.edges_touching(store_tenant, []) == []


def test_subject_id_is_an_indexed_event_property(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, store_tenant: str
) -> None:
    about, nobody = _chain(event_builder, store_tenant, n=2)
    about = about.model_copy(update={"subject_id": "cust-42"})
    graph_store.upsert_events([about, nobody])
    graph = graph_store.db.select_graph(graph_store.graph_name(store_tenant))

    found = graph.ro_query("MATCH (e:Event {subject_id: $s}) RETURN e.event_id", {"s": "cust-42"}).result_set
    assert found == [[about.event_id]]
    view = graph_store.conversation_graph(store_tenant, "c1")
    assert view.nodes[about.event_id]["subject_id"] == "cust-42"
    assert "subject_id" not in view.nodes[nobody.event_id]  # none named: no property, not a stored null
    indexed = graph.ro_query("CALL db.indexes() YIELD label, properties RETURN label, properties").result_set
    assert any(label == "Event" and "subject_id" in properties for label, properties in indexed)

    # An event that had no subject gets one when a later write names it (a merge that brought the subject in).
    graph_store.upsert_events([nobody.model_copy(update={"subject_id": "cust-42", "version": 2})])
    found = graph.ro_query("MATCH (e:Event {subject_id: 'cust-42'}) RETURN e.event_id ORDER BY e.event_id")
    assert sorted(row[0] for row in found.result_set) == sorted([about.event_id, nobody.event_id])


def test_a_graph_made_before_the_subject_index_gets_it_on_the_next_write(
    embedded_falkordb: EmbeddedFalkorDB, graph_store: FalkorDBGraphStore, event_builder: EventBuilder,
    store_tenant: str,
) -> None:
    first, second = _chain(event_builder, store_tenant, n=2)
    graph_store.upsert_events([first])
    graph = graph_store.db.select_graph(graph_store.graph_name(store_tenant))
    indexes = "CALL db.indexes() YIELD label, properties, status RETURN label, properties, status"

    def subject_index_states() -> list[str]:
        return [status for label, properties, status in graph.ro_query(indexes).result_set
                if label == "Event" and "subject_id" in properties]

    def wait_until(states: list[str]) -> None:
        # FalkorDB builds an index asynchronously ("UNDER CONSTRUCTION" until it is "OPERATIONAL"); a drop that came
        # while it was being built left it listed once, on a loaded machine.
        deadline = time.monotonic() + 10
        while subject_index_states() != states:
            assert time.monotonic() < deadline, graph.ro_query(indexes).result_set
            time.sleep(0.05)

    wait_until(["OPERATIONAL"])
    graph.query("DROP INDEX FOR (e:Event) ON (e.subject_id)")  # as an older compassmem left it
    wait_until([])

    reopened = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    try:
        reopened.upsert_events([second.model_copy(update={"subject_id": "cust-42"})])
    finally:
        reopened.close()
    wait_until(["OPERATIONAL"])
    assert graph_store.conversation_graph(store_tenant, "c1").number_of_nodes() == 2


def test_a_superseded_relation_is_kept_with_superseded_by(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    a, b = _chain(event_builder, store_tenant, n=2)
    old = relation_builder(a, b.event_id, RelationType.CAUSAL, confidence=0.5)
    new = relation_builder(b, a.event_id, RelationType.CAUSAL, confidence=0.9, minutes=5)
    graph_store.upsert_events([a, b])
    graph_store.upsert_relations([old])
    graph_store.upsert_relations([new, old.model_copy(update={"superseded_by": new.relation_id})])
    # A late redelivery of the original must not revive it.
    graph_store.upsert_relations([old])

    by_id = {r.relation_id: r for r in graph_store.relations(store_tenant, "c1")}
    assert by_id[old.relation_id].superseded_by == new.relation_id
    assert by_id[new.relation_id].superseded_by is None
    view = graph_store.conversation_graph(store_tenant, "c1")
    assert view.number_of_edges() == 2


def test_relations_are_deleted_by_id_superseded_ones_too(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    a, b, c = _chain(event_builder, store_tenant, n=3)
    kept = relation_builder(a, b.event_id)
    gone = relation_builder(b, c.event_id, minutes=1)
    superseded = relation_builder(c, b.event_id, superseded_by=gone.relation_id, minutes=2)
    graph_store.upsert_events([a, b, c])
    graph_store.upsert_relations([kept, gone, superseded])

    graph_store.delete_relations(store_tenant, [gone.relation_id, superseded.relation_id])
    graph_store.delete_relations(store_tenant, [gone.relation_id])  # already gone: nothing happens

    assert graph_store.relations(store_tenant, "c1") == [kept]
    assert _raw_counts(graph_store, store_tenant) == (3, 1), "the events stay"
    graph_store.delete_relations(f"{store_tenant}-none", [kept.relation_id])
    assert graph_store.graph_name(f"{store_tenant}-none") not in graph_store.db.list_graphs()


def test_cluster_upsert_adds_and_moves_members_and_keeps_unlisted_ones(
    graph_store: FalkorDBGraphStore,
    event_builder: EventBuilder,
    cluster_builder: ClusterBuilder,
    store_tenant: str,
) -> None:
    e1, e2, e3, e4 = _chain(event_builder, store_tenant)
    graph_store.upsert_events([e1, e2, e3, e4])
    graph_store.upsert_clusters([cluster_builder([e1, e2, e3], "cl-a"), cluster_builder([e4], "cl-b")])
    # A writer holding only recent events lists those: e1 and e2 are not mentioned, e4 joins.
    graph_store.upsert_clusters([cluster_builder([e3, e4], "cl-a", label=["hiking"])])

    view = graph_store.conversation_graph(store_tenant, "c1")
    assert view.nodes["cl-a"]["kind"] == "cluster"
    assert view.nodes["cl-a"]["members"] == sorted(e.event_id for e in (e1, e2, e3, e4))
    assert view.nodes["cl-a"]["size"] == 4
    assert view.nodes["cl-a"]["label"] == ["hiking"]
    # e4 moved from cl-b to cl-a: an event belongs to one topic.
    assert view.nodes["cl-b"]["members"] == [] and view.nodes["cl-b"]["size"] == 0
    assert view.nodes[e4.event_id]["cluster_id"] == "cl-a"
    assert view.nodes[e1.event_id]["cluster_id"] == "cl-a"
    # Re-upserting an event that carries no cluster keeps the membership.
    graph_store.upsert_events([e3])
    assert graph_store.conversation_graph(store_tenant, "c1").nodes[e3.event_id]["cluster_id"] == "cl-a"


def test_part_of_a_cluster_points_at_the_cluster_node_in_any_arrival_order(
    graph_store: FalkorDBGraphStore,
    event_builder: EventBuilder,
    relation_builder: RelationBuilder,
    cluster_builder: ClusterBuilder,
    store_tenant: str,
) -> None:
    e1, e2 = _chain(event_builder, store_tenant, n=2)
    graph_store.upsert_events([e1, e2])
    graph_store.upsert_clusters([cluster_builder([e1], "cl-early")])
    graph_store.upsert_relations([relation_builder(e1, "cl-early", RelationType.PART_OF)])
    # The relation arrives before its cluster: it waits on a stub and moves over when the cluster comes.
    late = relation_builder(e2, "cl-late", RelationType.PART_OF)
    graph_store.upsert_relations([late])
    graph_store.upsert_clusters([cluster_builder([e2], "cl-late")])

    view = graph_store.conversation_graph(store_tenant, "c1")
    assert view.nodes["cl-early"]["kind"] == "cluster"
    assert view.has_edge(e1.event_id, "cl-early")
    assert view.nodes["cl-late"]["kind"] == "cluster"
    assert view.has_edge(e2.event_id, "cl-late", key=late.relation_id)
    assert view.edges[e2.event_id, "cl-late", late.relation_id]["type"] == "part_of"
    assert _raw_counts(graph_store, store_tenant)[0] == 4


def test_relations_before_their_events_leave_stubs_that_events_fill(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    a, b = _chain(event_builder, store_tenant, n=2)
    graph_store.upsert_relations([relation_builder(a, b.event_id)])
    assert graph_store.conversation_graph(store_tenant, "c1").nodes[b.event_id]["stub"] is True

    graph_store.upsert_events([a, b])

    view = graph_store.conversation_graph(store_tenant, "c1")
    assert [view.nodes[n]["stub"] for n in (a.event_id, b.event_id)] == [False, False]
    assert view.nodes[b.event_id]["summary"] == b.summary
    assert _raw_counts(graph_store, store_tenant) == (2, 1)


def test_delete_conversation_leaves_other_conversations(
    graph_store: FalkorDBGraphStore,
    event_builder: EventBuilder,
    relation_builder: RelationBuilder,
    cluster_builder: ClusterBuilder,
    store_tenant: str,
) -> None:
    for conversation_id in ("c1", "c2"):
        events = _chain(event_builder, store_tenant, conversation_id, n=3)
        graph_store.upsert_events(events)
        graph_store.upsert_relations([relation_builder(events[0], events[1].event_id)])
        graph_store.upsert_clusters([cluster_builder(events, f"cl-{conversation_id}")])

    graph_store.delete_conversation(store_tenant, "c1")

    assert graph_store.conversation_graph(store_tenant, "c1").number_of_nodes() == 0
    assert graph_store.relations(store_tenant, "c1") == []
    kept = graph_store.conversation_graph(store_tenant, "c2")
    assert kept.number_of_nodes() == 4 and kept.number_of_edges() == 1
    assert _raw_counts(graph_store, store_tenant) == (4, 4)  # 3 events + cluster; 1 relation + 3 memberships


def test_tenants_are_isolated(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    other = f"{store_tenant}-b"
    mine = _chain(event_builder, store_tenant, n=2)
    theirs = _chain(event_builder, other, n=3)
    graph_store.upsert_events([*mine, *theirs])  # one mixed batch: split by tenant
    graph_store.upsert_relations([relation_builder(mine[0], mine[1].event_id)])

    assert set(graph_store.conversation_graph(store_tenant, "c1")) == {e.event_id for e in mine}
    assert set(graph_store.conversation_graph(other, "c1")) == {e.event_id for e in theirs}
    assert graph_store.relations(other, "c1") == []

    graph_store.delete_tenant(other)
    assert graph_store.conversation_graph(other, "c1").number_of_nodes() == 0
    assert graph_store.conversation_graph(store_tenant, "c1").number_of_nodes() == 2
    graph_store.delete_tenant(other)  # deleting twice is fine
    graph_store.delete_conversation(other, "c1")
    assert graph_store.graph_name(other) not in graph_store.db.list_graphs()
    with pytest.raises(ValueError, match="invalid tenant"):
        graph_store.conversation_graph("../x", "c1")


def test_data_survives_stop_restart_and_sigkill(
    own_falkordb_dir: Path, event_builder: EventBuilder, relation_builder: RelationBuilder
) -> None:
    events = _chain(event_builder, "default", n=3)
    relation = relation_builder(events[0], events[1].event_id)

    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        store = FalkorDBGraphStore.from_embedded(server)
        store.upsert_events(events)
        store.upsert_relations([relation])
        store.close()

    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        store = FalkorDBGraphStore.from_embedded(server)
        assert store.conversation_graph("default", "c1").number_of_nodes() == 3
        store.upsert_events([event_builder("c1", 9)])  # acknowledged, then the server dies
        store.close()
        os.kill(server.pid, signal.SIGKILL)
        server.stop()  # reaps the killed child; signals nothing else

    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        store = FalkorDBGraphStore.from_embedded(server)
        view = store.conversation_graph("default", "c1")
        assert view.number_of_nodes() == 4
        assert store.relations("default", "c1") == [relation]
        store.close()


def test_aof_rewrite_keeps_the_data(own_falkordb_dir: Path, event_builder: EventBuilder) -> None:
    with EmbeddedFalkorDB(own_falkordb_dir, use_unix_socket=False) as server:
        assert server.url.startswith("redis://127.0.0.1:")
        store = FalkorDBGraphStore.from_url(server.url)
        for version in range(1, 6):
            store.upsert_events([event_builder("c1", 1, version=version)])
        server.rewrite_aof()
        store.close()
    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        store = FalkorDBGraphStore.from_url(server.url)
        (node,) = store.conversation_graph("default", "c1").nodes.values()
        assert node["version"] == 5
        store.close()


def test_a_second_server_on_the_same_directory_is_refused(embedded_falkordb: EmbeddedFalkorDB) -> None:
    with pytest.raises(FalkorDBStartupError, match="already runs"):
        EmbeddedFalkorDB(embedded_falkordb.data_dir).start()
    assert embedded_falkordb.running


def test_start_waits_while_the_aof_replays_and_gives_up_clearly(own_falkordb_dir: Path) -> None:
    with EmbeddedFalkorDB(own_falkordb_dir) as server:
        pipe = server.redis_client().pipeline(transaction=False)
        for i in range(2100):
            pipe.execute_command("GRAPH.QUERY", "compassmem__default", f"CREATE (:Event {{event_id: 'e{i}'}})")
        pipe.execute()
    # 0.5 ms per replayed command makes the replay last about a second; redis answers clients (BusyLoadingError)
    # only between chunks of 1,024 commands.
    slow_replay = ["--key-load-delay", "500"]

    with pytest.raises(FalkorDBStartupError, match="not ready"):
        EmbeddedFalkorDB(own_falkordb_dir, ready_timeout=0.2, extra_args=slow_replay).start()

    with EmbeddedFalkorDB(own_falkordb_dir, extra_args=slow_replay) as server:
        assert server.load_wait_s > 0.3
        store = FalkorDBGraphStore.from_embedded(server)
        nodes, _ = _raw_counts(store, "default")
        store.close()
    assert nodes == 2100


def test_every_conversation_scoped_lookup_is_exact_whatever_the_store_already_holds(
    graph_store: FalkorDBGraphStore, event_builder: EventBuilder, relation_builder: RelationBuilder, store_tenant: str
) -> None:
    # FalkorDB's string index ignores spaces at either end. The id rule keeps such ids out of new data; these are
    # written as an older version could have, to show that no read or delete of one reaches the others.
    spellings = ["a-trip", "a-trip ", " a-trip", "a-trip\t"]
    for number, conversation in enumerate(spellings):
        events = _chain(event_builder, store_tenant, conversation_id=conversation, n=2)
        events = [event.model_copy(update={"event_id": f"{event.event_id}-{number}"}) for event in events]
        graph_store.upsert_events(events)
        graph_store.upsert_relations([relation_builder(events[0], events[1].event_id)])

    plain = "a-trip"
    assert all(node.endswith("-0") for node in graph_store.conversation_graph(store_tenant, plain).nodes)
    assert len(graph_store.conversation_graph(store_tenant, plain).nodes) == 2
    assert len(graph_store.conversation_graph(store_tenant, plain, max_events=10).nodes) == 2
    assert len(graph_store.relations(store_tenant, plain)) == 1
    # A search by words may miss a spaced id (the index cannot find it), but never counts one under another.
    assert all(stats.events == 2 for stats in graph_store.conversation_stats(store_tenant, "trip"))
    every = {stats.conversation_id: stats.events for stats in graph_store.conversation_stats(store_tenant)}
    assert every == dict.fromkeys(spellings, 2)
    page = graph_store.event_page(store_tenant, plain, None, 10)
    assert len(page) == 2 and all(event["event_id"].endswith("-0") for event in page)

    graph_store.delete_conversation(store_tenant, plain)

    left = {stats.conversation_id: stats.events for stats in graph_store.conversation_stats(store_tenant)}
    assert left == {"a-trip ": 2, " a-trip": 2, "a-trip\t": 2}
