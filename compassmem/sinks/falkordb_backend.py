"""The event graph in FalkorDB: one graph per tenant, written with batched ``UNWIND $rows AS r MERGE ...``.

Layout (graph ``compassmem__<tenant>``):
  (:Event {event_id, conversation_id, subject_id, summary, participants, actions, entities, keywords, turn_ids,
           session_ids, start, end, start_ts, end_ts, time_anchors, anchor_starts, anchor_ends, cluster_id, version,
           merged_from, provisional, stub})
  (:Cluster {cluster_id, conversation_id, label, size, centroid})
  (:Event)-[:REL {relation_id, type, subtype, confidence, evidence, created_at, superseded_by, conversation_id}]->
      (:Event | :Cluster)        a part_of relation whose target is a cluster id points at the Cluster node
  (:Event)-[:MEMBER_OF]->(:Cluster)

Events, relations and clusters arrive on different topics, so a relation may come before its events. Its missing
endpoints are created as stub events (``stub: true``, only id and conversation) that the event write fills in
later; writes therefore never depend on arrival order.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import networkx as nx
import structlog
from falkordb import FalkorDB, Graph
from redis.exceptions import ResponseError

from compassmem.core.models import TENANT_PATTERN, Cluster, Event, Relation, TimeAnchor
from compassmem.processors.relations import ADJACENCY_EVIDENCE
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB, rewrite_append_only_file, save_snapshot
from compassmem.sinks.graph_store import (
    ConversationStats,
    EventPosition,
    GraphStore,
    HealthCounts,
    RelationOverview,
    RelationTypeCount,
    TopicCount,
    TopicLinkCount,
    WalkEdge,
)

log = structlog.get_logger(__name__)

GRAPH_PREFIX = "compassmem"
_BATCH = 500
_Scoped = TypeVar("_Scoped", Event, Relation, Cluster)
_Row = TypeVar("_Row")
_INDEXES = (
    "CREATE INDEX FOR (e:Event) ON (e.event_id)",
    "CREATE INDEX FOR (e:Event) ON (e.conversation_id)",
    "CREATE INDEX FOR (e:Event) ON (e.subject_id)",
    "CREATE INDEX FOR (c:Cluster) ON (c.cluster_id)",
    "CREATE INDEX FOR (c:Cluster) ON (c.conversation_id)",
    "CREATE INDEX FOR ()-[r:REL]-() ON (r.relation_id)",
)
_EMPTY_GRAPH_ERROR = "empty key"
# FalkorDB's string index ignores spaces at either end: {conversation_id: 'a'} also finds 'a ' and ' a'. The id rule
# keeps such ids out; this comparison, which the index cannot answer, keeps every conversation-scoped read and
# delete exact whatever a store already holds.
def _exact(node: str, value: str = "$c") -> str:
    return f"toString({node}.conversation_id) = {value}"

_UPSERT_EVENTS = """
UNWIND $rows AS r
MERGE (e:Event {event_id: r.event_id})
SET e += r.props, e.cluster_id = coalesce(r.cluster_id, e.cluster_id)
"""
# A stub endpoint gets its conversation so that deleting the conversation removes it too.
_UPSERT_RELATIONS_TO_EVENTS = """
UNWIND $rows AS r
MERGE (s:Event {event_id: r.source}) ON CREATE SET s.conversation_id = r.conversation_id, s.stub = true
MERGE (t:Event {event_id: r.target}) ON CREATE SET t.conversation_id = r.conversation_id, t.stub = true
MERGE (s)-[e:REL {relation_id: r.relation_id}]->(t)
SET e += r.props, e.superseded_by = coalesce(r.superseded_by, e.superseded_by)
"""
_UPSERT_RELATIONS_TO_CLUSTERS = """
UNWIND $rows AS r
MATCH (t:Cluster {cluster_id: r.target})
MERGE (s:Event {event_id: r.source}) ON CREATE SET s.conversation_id = r.conversation_id, s.stub = true
MERGE (s)-[e:REL {relation_id: r.relation_id}]->(t)
SET e += r.props, e.superseded_by = coalesce(r.superseded_by, e.superseded_by)
"""
_EXISTING_CLUSTERS = "UNWIND $ids AS id MATCH (c:Cluster {cluster_id: id}) RETURN c.cluster_id"
_UPSERT_CLUSTERS = """
UNWIND $rows AS r
MERGE (c:Cluster {cluster_id: r.cluster_id})
SET c += r.props
"""
# A part_of relation that arrived before its cluster was attached to a stub event with the cluster's id.
_MOVE_STUB_EDGES_TO_CLUSTERS = """
UNWIND $ids AS id
MATCH (s)-[e:REL]->(x:Event {event_id: id})
WHERE x.stub = true
MATCH (c:Cluster {cluster_id: id})
CREATE (s)-[moved:REL]->(c)
SET moved = properties(e)
DELETE e
"""
_DELETE_CLUSTER_STUBS = """
UNWIND $ids AS id
MATCH (x:Event {event_id: id})
WHERE x.stub = true
DETACH DELETE x
"""
# An event belongs to one topic, so joining a cluster leaves any other.
_LEAVE_OTHER_CLUSTERS = """
UNWIND $rows AS r
MATCH (e:Event {event_id: r.event_id})-[m:MEMBER_OF]->(:Cluster)
DELETE m
"""
_ADD_MEMBERSHIP = """
UNWIND $rows AS r
MATCH (c:Cluster {cluster_id: r.cluster_id})
MERGE (e:Event {event_id: r.event_id}) ON CREATE SET e.conversation_id = r.conversation_id, e.stub = true
MERGE (e)-[:MEMBER_OF]->(c)
SET e.cluster_id = r.cluster_id
"""
_RECOUNT_CLUSTERS = """
UNWIND $conversations AS conv
MATCH (c:Cluster {conversation_id: conv}) WHERE toString(c.conversation_id) = conv
OPTIONAL MATCH (e:Event)-[:MEMBER_OF]->(c)
WITH c, count(e) AS n
SET c.size = n
"""
_CONVERSATION_EVENTS = f"MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} RETURN properties(e)"
_CONVERSATION_CLUSTERS = f"""
MATCH (c:Cluster {{conversation_id: $c}}) WHERE {_exact('c')}
OPTIONAL MATCH (e:Event)-[:MEMBER_OF]->(c)
RETURN properties(c), collect(e.event_id)
"""
_CONVERSATION_RELATIONS = f"""
MATCH (s:Event {{conversation_id: $c}})-[r:REL]->(t) WHERE {_exact('s')}
RETURN s.event_id, coalesce(t.event_id, t.cluster_id), properties(r)
"""
# Relations around some events, as a walk needs them (fields, not properties(r): parsing whole property maps costs
# more than the query). Filters stay out of the Cypher: a WHERE on the far end made FalkorDB's planner start from a
# scan of every Event (docs/decisions/007-store-access-shapes.md); the caller filters instead.
# What a walk reads of each active relation (WalkEdge); superseded ones stay on the server.
_EDGE_FIELDS = "r.relation_id, r.type, r.subtype, r.confidence, r.evidence IN $adjacency"
_OUT_EDGES = f"""
UNWIND $ids AS id
MATCH (s:Event {{event_id: id}})-[r:REL]->(t)
WHERE r.superseded_by IS NULL
RETURN s.event_id, coalesce(t.event_id, t.cluster_id), {_EDGE_FIELDS}
"""
_IN_EDGES = f"""
UNWIND $ids AS id
MATCH (t:Event {{event_id: id}})<-[r:REL]-(s)
WHERE r.superseded_by IS NULL
RETURN s.event_id, t.event_id, {_EDGE_FIELDS}
"""
# Display reads (the explorer): stubs are relation endpoints whose event has not arrived, not events to show.
_NOT_STUB = "coalesce({0}.stub, false) = false"
_EVENT_COUNT = (f"MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} AND {_NOT_STUB.format('e')} "
                "RETURN count(e)")
# The most recent events first, so that a limit keeps the newest; since and limit are optional parameters.
_RECENT_EVENTS = f"""
MATCH (e:Event {{conversation_id: $c}})
WHERE {_exact('e')} AND {_NOT_STUB.format('e')} AND ($since IS NULL OR e.end_ts >= $since)
RETURN properties(e) ORDER BY e.start_ts DESC, e.event_id DESC
"""
_RELATIONS_FROM = """
UNWIND $ids AS id
MATCH (s:Event {event_id: id})-[r:REL]->(t)
RETURN s.event_id, coalesce(t.event_id, t.cluster_id), properties(r)
"""
_CLUSTERS_OF = """
UNWIND $ids AS id
MATCH (e:Event {event_id: id})-[:MEMBER_OF]->(c:Cluster)
RETURN properties(c), collect(e.event_id)
"""
# The explorer's overview and focused graphs, and the health figures: aggregates computed in the store, so that a
# conversation of thousands of events is summed without being loaded.
_TOPIC_COUNTS = f"""
MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} AND {_NOT_STUB.format('e')}
RETURN e.cluster_id, count(e), sum(size(e.turn_ids)), min(e.start_ts), max(e.end_ts), collect(e.summary)[0..$samples]
"""
_CLUSTER_LABELS = f"MATCH (c:Cluster {{conversation_id: $c}}) WHERE {_exact('c')} RETURN c.cluster_id, c.label"
_CLUSTER_LABELS_OF = f"""
UNWIND $ids AS id
MATCH (c:Cluster {{cluster_id: id}}) WHERE {_exact('c')}
RETURN c.cluster_id, c.label
"""
_PASSES = "($types IS NULL OR r.type IN $types) AND r.confidence >= $min"
_RELATION_TYPE_COUNTS = f"""
MATCH (s:Event {{conversation_id: $c}})-[r:REL]->() WHERE {_exact('s')}
RETURN r.type, r.superseded_by IS NULL, count(r), sum(CASE WHEN {_PASSES} THEN 1 ELSE 0 END)
"""
_TOPIC_LINKS = f"""
MATCH (s:Event {{conversation_id: $c}})-[r:REL]->(t)
WHERE {_exact('s')} AND {_NOT_STUB.format('s')} AND {_NOT_STUB.format('t')} AND r.superseded_by IS NULL AND {_PASSES}
RETURN s.cluster_id, t.cluster_id, r.type, count(r), max(r.confidence), avg(r.confidence)
"""
_TOPIC_EVENTS = f"""
MATCH (e:Event {{conversation_id: $c}})
WHERE {_exact('e')} AND {_NOT_STUB.format('e')} AND (e.cluster_id IN $topics OR ($unclustered AND e.cluster_id IS NULL))
  AND ($since IS NULL OR e.end_ts >= $since)
RETURN properties(e) ORDER BY e.start_ts DESC, e.event_id DESC
"""
_EVENTS_BY_ID = f"""
UNWIND $ids AS id
MATCH (e:Event {{event_id: id}}) WHERE {_exact('e')} AND {_NOT_STUB.format('e')}
RETURN properties(e)
"""
_RELATIONS_TO = """
UNWIND $ids AS id
MATCH (t:Event {event_id: id})<-[r:REL]-(s)
RETURN s.event_id, t.event_id, properties(r)
"""
_HEALTH_EVENTS = f"""
MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} AND {_NOT_STUB.format('e')}
RETURN count(e), sum(size(e.turn_ids)), sum(size(coalesce(e.merged_from, []))), count(DISTINCT e.cluster_id)
"""
_HEALTH_RELATIONS = f"""
MATCH (s:Event {{conversation_id: $c}})-[r:REL]->() WHERE {_exact('s')}
RETURN sum(CASE WHEN r.superseded_by IS NULL THEN 1 ELSE 0 END),
       sum(CASE WHEN r.superseded_by IS NULL AND r.evidence IN $adjacency THEN 1 ELSE 0 END),
       sum(CASE WHEN r.superseded_by IS NULL THEN 0 ELSE 1 END)
"""
_SEMANTIC = f"""
MATCH (s:Event {{conversation_id: $c}})-[r:REL]->()
WHERE {_exact('s')} AND r.superseded_by IS NULL AND NOT r.evidence IN $adjacency
"""
_HEALTH_CONFIDENCE = _SEMANTIC + "RETURN count(r), sum(r.confidence)"
_HEALTH_RECENT_CONFIDENCE = _SEMANTIC + """WITH r ORDER BY r.created_at DESC, r.relation_id DESC LIMIT $n
RETURN count(r), sum(r.confidence)"""
_EVENT_PAGE = f"""
MATCH (e:Event {{conversation_id: $c}})
WHERE {_exact('e')} AND {_NOT_STUB.format('e')}
  AND ($ts IS NULL OR e.start_ts > $ts OR (e.start_ts = $ts AND e.event_id > $id))
RETURN properties(e) ORDER BY e.start_ts, e.event_id LIMIT $n
"""
_STATS = """
WITH e.conversation_id AS c, count(e) AS events, sum(size(e.turn_ids)) AS turns, min(e.start_ts) AS first_ts,
     max(e.end_ts) AS last_ts, collect(DISTINCT e.subject_id) AS subjects, collect(e.participants) AS people
RETURN c, events, turns, first_ts, last_ts, subjects, people
"""
_ALL_STATS = f"MATCH (e:Event) WHERE {_NOT_STUB.format('e')}" + _STATS
_MATCHING_STATS = f"""
MATCH (m:Event)
WHERE {_NOT_STUB.format('m')}
  AND (toLower(m.conversation_id) CONTAINS $q OR toLower(coalesce(m.subject_id, '')) CONTAINS $q
       OR toLower(coalesce(m.summary, '')) CONTAINS $q
       OR any(p IN coalesce(m.participants, []) WHERE toLower(p) CONTAINS $q))
WITH DISTINCT m.conversation_id AS matched
MATCH (e:Event {{conversation_id: matched}}) WHERE {_exact('e', 'matched')} AND {_NOT_STUB.format('e')}
""" + _STATS
_DELETE_EVENTS = (f"MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} AND e.event_id IN $ids "
                  "DETACH DELETE e")
_DELETE_RELATIONS = "UNWIND $ids AS id MATCH ()-[r:REL {relation_id: id}]->() DELETE r"
_DELETE_CONVERSATION = (
    f"MATCH (e:Event {{conversation_id: $c}}) WHERE {_exact('e')} DETACH DELETE e",
    f"MATCH (c:Cluster {{conversation_id: $c}}) WHERE {_exact('c')} DETACH DELETE c",
)


class FalkorDBGraphStore(GraphStore):
    """GraphStore on FalkorDB; safe to share between threads (redis-py pools its connections)."""

    def __init__(
        self,
        db: FalkorDB,
        *,
        graph_prefix: str = GRAPH_PREFIX,
        owns_client: bool = False,
        server: EmbeddedFalkorDB | None = None,
    ) -> None:
        self.db = db
        self.graph_prefix = graph_prefix
        self.server = server
        self._owns_client = owns_client
        # Graphs this object has created indexes on; a graph that another process drops and re-creates keeps its
        # data correct without them (MERGE falls back to a scan) until this object is reopened.
        self._indexed: set[str] = set()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, graph_prefix: str = GRAPH_PREFIX) -> FalkorDBGraphStore:
        """``redis://host:port``, ``rediss://...``, ``falkor://...`` or ``unix:///path/to.sock``."""
        return cls(FalkorDB.from_url(url), graph_prefix=graph_prefix, owns_client=True)

    @classmethod
    def from_embedded(cls, server: EmbeddedFalkorDB, *, graph_prefix: str = GRAPH_PREFIX) -> FalkorDBGraphStore:
        """A store on an embedded server; the caller keeps owning (and stopping) the server."""
        if not server.running:
            server.start()
        return cls(server.client(), graph_prefix=graph_prefix, owns_client=True, server=server)

    def graph_name(self, tenant: str) -> str:
        if not re.fullmatch(TENANT_PATTERN, tenant):
            raise ValueError(f"invalid tenant {tenant!r}: must match {TENANT_PATTERN}")
        return f"{self.graph_prefix}__{tenant}"

    # -- writes ----------------------------------------------------------------------------------------------

    def upsert_events(self, events: Sequence[Event]) -> None:
        for tenant, batch in _by_tenant(events):
            graph = self._writable(tenant)
            rows = [{"event_id": e.event_id, "cluster_id": e.cluster_id, "props": _event_props(e)} for e in batch]
            for chunk in _chunks(rows):
                graph.query(_UPSERT_EVENTS, {"rows": chunk})

    def upsert_relations(self, relations: Sequence[Relation]) -> None:
        for tenant, batch in _by_tenant(relations):
            graph = self._writable(tenant)
            rows = [_relation_row(r) for r in batch]
            clusters = self._existing_clusters(graph, {r.target for r in batch})
            to_clusters = [row for row in rows if row["target"] in clusters]
            to_events = [row for row in rows if row["target"] not in clusters]
            for chunk in _chunks(to_events):
                graph.query(_UPSERT_RELATIONS_TO_EVENTS, {"rows": chunk})
            for chunk in _chunks(to_clusters):
                graph.query(_UPSERT_RELATIONS_TO_CLUSTERS, {"rows": chunk})

    def upsert_clusters(self, clusters: Sequence[Cluster]) -> None:
        # Listed members join (leaving any other cluster); members not listed keep their MEMBER_OF edge.
        for tenant, batch in _by_tenant(clusters):
            graph = self._writable(tenant)
            ids = [c.cluster_id for c in batch]
            members = [
                {"event_id": m, "cluster_id": c.cluster_id, "conversation_id": c.conversation_id}
                for c in batch
                for m in c.members
            ]
            cluster_rows = [{"cluster_id": c.cluster_id, "props": _cluster_props(c)} for c in batch]
            for chunk in _chunks(cluster_rows):
                graph.query(_UPSERT_CLUSTERS, {"rows": chunk})
            for id_chunk in _chunks(ids):
                graph.query(_MOVE_STUB_EDGES_TO_CLUSTERS, {"ids": id_chunk})
                graph.query(_DELETE_CLUSTER_STUBS, {"ids": id_chunk})
            for member_chunk in _chunks(members):
                graph.query(_LEAVE_OTHER_CLUSTERS, {"rows": member_chunk})
                graph.query(_ADD_MEMBERSHIP, {"rows": member_chunk})
            graph.query(_RECOUNT_CLUSTERS, {"conversations": sorted({c.conversation_id for c in batch})})

    # -- reads -----------------------------------------------------------------------------------------------

    def conversation_graph(self, tenant: str, conversation_id: str, *, since: datetime | None = None,
                           max_events: int | None = None) -> nx.MultiDiGraph:
        if since is not None or max_events is not None:
            return self._limited_graph(tenant, conversation_id, since, max_events)
        graph = nx.MultiDiGraph(tenant=tenant, conversation_id=conversation_id)
        params = {"c": conversation_id}
        for (props,) in self._read(tenant, _CONVERSATION_EVENTS, params):
            graph.add_node(props["event_id"], **_event_view(props))
        for props, members in self._read(tenant, _CONVERSATION_CLUSTERS, params):
            graph.add_node(props["cluster_id"], **_cluster_view(props, members))
        for source, target, props in self._read(tenant, _CONVERSATION_RELATIONS, params):
            relation = _relation_from(tenant, source, target, props)
            graph.add_edge(source, target, key=relation.relation_id, **relation.model_dump())
        # Three reads, not one snapshot: a relation written between them can name a node the first read did not
        # see, which add_edge then creates bare (no kind): not counted, as the next read would count it.
        graph.graph["events_total"] = sum(1 for _, data in graph.nodes(data=True)
                                          if data.get("kind") == "event" and not data.get("stub"))
        return graph

    def _limited_graph(self, tenant: str, conversation_id: str, since: datetime | None,
                       max_events: int | None) -> nx.MultiDiGraph:
        """The kept events' subgraph, read by id so that a large conversation is never loaded whole."""
        [[total]] = self._read(tenant, _EVENT_COUNT, {"c": conversation_id}) or [[0]]
        graph = nx.MultiDiGraph(tenant=tenant, conversation_id=conversation_id, events_total=int(total))
        query = _RECENT_EVENTS + (" LIMIT $n" if max_events is not None else "")
        rows = self._read(tenant, query, {"c": conversation_id, "n": max_events,
                                          "since": since.timestamp() if since is not None else None})
        for (props,) in rows:
            graph.add_node(props["event_id"], **_event_view(props))
        ids = list(graph.nodes)
        for id_chunk in _chunks(ids):
            for props, members in self._read(tenant, _CLUSTERS_OF, {"ids": id_chunk}):
                if props["cluster_id"] in graph:  # a cluster whose members span two chunks
                    members = [*graph.nodes[props["cluster_id"]]["members"], *members]
                graph.add_node(props["cluster_id"], **_cluster_view(props, members))
        for id_chunk in _chunks(ids):
            for source, target, props in self._read(tenant, _RELATIONS_FROM, {"ids": id_chunk}):
                if target in graph:
                    relation = _relation_from(tenant, source, target, props)
                    graph.add_edge(source, target, key=relation.relation_id, **relation.model_dump())
        return graph

    def conversation_stats(self, tenant: str, query: str | None = None) -> list[ConversationStats]:
        rows = (self._read(tenant, _MATCHING_STATS, {"q": query.lower()}) if query
                else self._read(tenant, _ALL_STATS, {}))
        return [
            ConversationStats(
                conversation_id=conversation_id, events=int(events), turns=int(turns or 0),
                first_at=_from_timestamp(first_ts), last_at=_from_timestamp(last_ts),
                subject_ids=tuple(sorted(s for s in subjects if s)),
                participants=tuple(sorted({p for names in people for p in names or []})),
            )
            for conversation_id, events, turns, first_ts, last_ts, subjects, people in rows
        ]

    def topic_counts(self, tenant: str, conversation_id: str, summaries: int = 0) -> list[TopicCount]:
        params = {"c": conversation_id, "samples": summaries}
        labels = {cluster_id: tuple(str(k) for k in label or []) for cluster_id, label
                  in self._read(tenant, _CLUSTER_LABELS, params)}
        return [TopicCount(cluster_id, labels.get(cluster_id, ()) if cluster_id is not None else (), int(events),
                           int(turns or 0), first_ts, last_ts, tuple(str(s) for s in samples or [] if s))
                for cluster_id, events, turns, first_ts, last_ts, samples
                in self._read(tenant, _TOPIC_COUNTS, params)]

    def relation_overview(self, tenant: str, conversation_id: str, *, types: Sequence[str] | None,
                          min_confidence: float) -> RelationOverview:
        params = {"c": conversation_id, "types": list(types) if types is not None else None, "min": min_confidence}
        active: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        superseded = 0
        for kind, is_active, count, passing in self._read(tenant, _RELATION_TYPE_COUNTS, params):
            if is_active:
                active[kind][0] += int(count)
                active[kind][1] += int(passing or 0)
            else:
                superseded += int(count)
        links = [TopicLinkCount(source, target, kind, int(count), float(high), float(mean))
                 for source, target, kind, count, high, mean in self._read(tenant, _TOPIC_LINKS, params)]
        return RelationOverview([RelationTypeCount(kind, *counts) for kind, counts in sorted(active.items())],
                                superseded, links)

    def topic_events(self, tenant: str, conversation_id: str, topics: Sequence[str], unclustered: bool, *,
                     since: datetime | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        query = _TOPIC_EVENTS + (" LIMIT $n" if limit is not None else "")
        rows = self._read(tenant, query, {"c": conversation_id, "topics": list(topics), "unclustered": unclustered,
                                          "since": since.timestamp() if since is not None else None, "n": limit})
        return [_event_view(props) for (props,) in rows]

    def events_by_id(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(sorted(set(event_ids))):
            for (props,) in self._read(tenant, _EVENTS_BY_ID, {"c": conversation_id, "ids": chunk}):
                found[props["event_id"]] = _event_view(props)
        return list(found.values())

    def relations_touching(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> list[Relation]:
        found: dict[str, Relation] = {}
        for chunk in _chunks(sorted(set(event_ids))):
            for query in (_RELATIONS_FROM, _RELATIONS_TO):
                for source, target, props in self._read(tenant, query, {"ids": chunk}):
                    # Ids are the tenant's; the conversation is compared exactly, as every conversation read does.
                    if props.get("conversation_id") == conversation_id and props["relation_id"] not in found:
                        found[props["relation_id"]] = _relation_from(tenant, source, target, props)
        return sorted(found.values(), key=lambda r: (r.created_at, r.relation_id))

    def clusters_by_id(self, tenant: str, conversation_id: str, cluster_ids: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for chunk in _chunks(sorted(set(cluster_ids))):
            for cluster_id, label in self._read(tenant, _CLUSTER_LABELS_OF, {"c": conversation_id, "ids": chunk}):
                found[cluster_id] = [str(k) for k in label or []]
        return found

    def health_counts(self, tenant: str, conversation_id: str, recent: int) -> HealthCounts:
        params = {"c": conversation_id, "adjacency": sorted(ADJACENCY_EVIDENCE), "n": recent}
        [[events, turns, merged, topics]] = self._read(tenant, _HEALTH_EVENTS, params) or [[0, 0, 0, 0]]
        [[active, adjacency, superseded]] = self._read(tenant, _HEALTH_RELATIONS, params) or [[0, 0, 0]]
        [[scored, total]] = self._read(tenant, _HEALTH_CONFIDENCE, params) or [[0, 0.0]]
        [[recent_scored, recent_total]] = self._read(tenant, _HEALTH_RECENT_CONFIDENCE, params) or [[0, 0.0]]
        return HealthCounts(events=int(events or 0), turns=int(turns or 0), merged_segments=int(merged or 0),
                            topics=int(topics or 0), relations=int(active or 0), adjacency_relations=int(adjacency or 0),
                            superseded_relations=int(superseded or 0), scored_relations=int(scored or 0),
                            confidence_sum=float(total or 0.0), recent_scored=int(recent_scored or 0),
                            recent_confidence_sum=float(recent_total or 0.0))

    def event_page(self, tenant: str, conversation_id: str, after: EventPosition | None,
                   limit: int) -> list[dict[str, Any]]:
        params = {"c": conversation_id, "n": limit, "ts": after.start_ts if after else None,
                  "id": after.event_id if after else None}
        return [_event_view(props) for (props,) in self._read(tenant, _EVENT_PAGE, params)]

    def edges_touching(self, tenant: str, event_ids: Sequence[str]) -> list[WalkEdge]:
        ids = sorted(set(event_ids))
        if not ids:
            return []
        asked = set(ids)
        params = {"ids": ids, "adjacency": sorted(ADJACENCY_EVIDENCE)}
        rows = [*self._read(tenant, _OUT_EDGES, params),
                # Incoming edges from one of the asked events already came as that event's outgoing ones.
                *(row for row in self._read(tenant, _IN_EDGES, params) if row[0] not in asked)]
        return [WalkEdge(source, target, relation_id, kind, subtype, float(confidence), bool(adjacent))
                for source, target, relation_id, kind, subtype, confidence, adjacent in rows]

    def relations(self, tenant: str, conversation_id: str) -> list[Relation]:
        rows = self._read(tenant, _CONVERSATION_RELATIONS, {"c": conversation_id})
        found = [_relation_from(tenant, source, target, props) for source, target, props in rows]
        return sorted(found, key=lambda r: (r.created_at, r.relation_id))

    # -- deletes ---------------------------------------------------------------------------------------------

    def delete_events(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> None:
        name = self.graph_name(tenant)
        if event_ids and name in self.db.list_graphs():
            self.db.select_graph(name).query(_DELETE_EVENTS, {"c": conversation_id, "ids": list(event_ids)})

    def delete_relations(self, tenant: str, relation_ids: Sequence[str]) -> None:
        name = self.graph_name(tenant)
        if relation_ids and name in self.db.list_graphs():
            for chunk in _chunks(list(relation_ids)):
                self.db.select_graph(name).query(_DELETE_RELATIONS, {"ids": chunk})

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        name = self.graph_name(tenant)
        # A write query on a missing graph would create an empty one for a tenant that never wrote anything.
        if name in self.db.list_graphs():
            graph = self.db.select_graph(name)
            for query in _DELETE_CONVERSATION:
                graph.query(query, {"c": conversation_id})
        log.info("graph_store.conversation_deleted", tenant=tenant, conversation_id=conversation_id)

    def delete_tenant(self, tenant: str) -> None:
        name = self.graph_name(tenant)
        try:
            self.db.select_graph(name).delete()
        except ResponseError as exc:
            if _EMPTY_GRAPH_ERROR not in str(exc):
                raise
        self._indexed.discard(name)
        log.info("graph_store.tenant_deleted", tenant=tenant)

    def compact(self) -> None:
        """Rewrite the server's append-only file (and its RDB snapshot, where a server keeps one) from the graphs
        it holds now: a deleted node's properties stay in the AOF's old commands until then. On the embedded server
        this returns once the replaced files are deleted; a server elsewhere deletes them itself.

        First the query telemetry of this store's graphs goes: with FalkorDB's CMD_INFO on (its default; the
        embedded server runs with it off) each graph's last 1,000 queries, parameters and so turn texts included,
        are kept in a stream key ``telemetry{<graph>}``."""
        connection = self.db.connection
        telemetry = list(connection.scan_iter(match=f"telemetry{{{self.graph_prefix}__*}}"))
        if telemetry:
            connection.delete(*telemetry)
        if self.server is not None:
            self.server.rewrite_aof()
            return
        rewrote = rewrite_append_only_file(connection)
        saved = save_snapshot(connection)
        log.info("graph_store.compacted", append_only_file=rewrote, snapshot=saved, telemetry_keys=len(telemetry))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self.db.connection.close()

    # -- internals -------------------------------------------------------------------------------------------

    def _writable(self, tenant: str) -> Graph:
        name = self.graph_name(tenant)
        graph = self.db.select_graph(name)
        if name not in self._indexed:
            for statement in _INDEXES:
                try:
                    graph.query(statement)
                except ResponseError as exc:
                    if "already indexed" not in str(exc):
                        raise
            self._indexed.add(name)
        return graph

    def _read(self, tenant: str, query: str, params: dict[str, Any]) -> list[list[Any]]:
        try:
            return self.db.select_graph(self.graph_name(tenant)).ro_query(query, params).result_set
        except ResponseError as exc:
            # A tenant that never wrote anything has no graph yet: that is an empty result, not an error.
            if _EMPTY_GRAPH_ERROR in str(exc):
                return []
            raise

    @staticmethod
    def _existing_clusters(graph: Graph, ids: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(sorted(ids)):
            found.update(row[0] for row in graph.query(_EXISTING_CLUSTERS, {"ids": chunk}).result_set)
        return found


# -- mapping between models and graph properties ------------------------------------------------------------


def _event_props(event: Event) -> dict[str, Any]:
    anchors = [a.model_dump(mode="json") for a in event.time_anchors]
    return {
        "tenant": event.tenant,
        "conversation_id": event.conversation_id,
        # Null when no turn named a subject: FalkorDB then stores no property (and a later subject sets it).
        "subject_id": event.subject_id,
        "summary": event.summary,
        "participants": event.participants,
        "actions": event.actions,
        "entities": event.entities,
        "keywords": event.keywords,
        "turn_ids": event.turn_ids,
        "session_ids": event.session_ids,
        "start": event.temporal_info.start.isoformat(),
        "end": event.temporal_info.end.isoformat(),
        "start_ts": event.temporal_info.start.timestamp(),
        "end_ts": event.temporal_info.end.timestamp(),
        # FalkorDB properties cannot hold maps: the anchors travel as JSON, their bounds as lists for Cypher filters.
        "time_anchors": json.dumps(anchors, ensure_ascii=False),
        "anchor_starts": [a["start"] for a in anchors],
        "anchor_ends": [a["end"] for a in anchors],
        "version": event.version,
        "merged_from": event.merged_from,
        "provisional": event.provisional,
        "stub": False,
    }


def _event_view(props: dict[str, Any]) -> dict[str, Any]:
    view = dict(props)
    view["kind"] = "event"
    view.setdefault("stub", False)
    for key in ("start", "end"):
        if isinstance(view.get(key), str):
            view[key] = datetime.fromisoformat(view[key])
    if isinstance(view.get("time_anchors"), str):
        view["time_anchors"] = [TimeAnchor.model_validate(a) for a in json.loads(view["time_anchors"])]
    return view


def _from_timestamp(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def _cluster_props(cluster: Cluster) -> dict[str, Any]:
    return {
        "tenant": cluster.tenant,
        "conversation_id": cluster.conversation_id,
        "label": cluster.label,
        "centroid": cluster.centroid,
    }


def _cluster_view(props: dict[str, Any], members: list[str | None]) -> dict[str, Any]:
    view = dict(props)
    view["kind"] = "cluster"
    view["members"] = sorted(m for m in members if m is not None)
    return view


def _relation_row(relation: Relation) -> dict[str, Any]:
    return {
        "relation_id": relation.relation_id,
        "source": relation.source,
        "target": relation.target,
        "conversation_id": relation.conversation_id,
        # Sticky: a late redelivery of the original relation must not revive one that was superseded.
        "superseded_by": relation.superseded_by,
        "props": {
            "conversation_id": relation.conversation_id,
            "type": relation.type.value,
            "subtype": relation.subtype,
            "confidence": relation.confidence,
            "evidence": relation.evidence,
            "created_at": relation.created_at.isoformat(),
        },
    }


def _relation_from(tenant: str, source: str, target: str, props: dict[str, Any]) -> Relation:
    return Relation(
        tenant=tenant,
        conversation_id=props["conversation_id"],
        relation_id=props["relation_id"],
        source=source,
        target=target,
        type=props["type"],
        subtype=props.get("subtype"),
        confidence=props["confidence"],
        evidence=props.get("evidence", ""),
        created_at=datetime.fromisoformat(props["created_at"]),
        superseded_by=props.get("superseded_by"),
    )


def _by_tenant(items: Sequence[_Scoped]) -> Iterator[tuple[str, list[_Scoped]]]:
    groups: dict[str, list[_Scoped]] = defaultdict(list)
    for item in items:
        groups[item.tenant].append(item)
    yield from groups.items()


def _chunks(rows: Sequence[_Row], size: int = _BATCH) -> Iterator[list[_Row]]:
    for start in range(0, len(rows), size):
        yield list(rows[start : start + size])
