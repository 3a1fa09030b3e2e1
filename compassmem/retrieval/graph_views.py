"""What the explorer opens a conversation on, and what it draws on demand: the overview (topics with their counts and
the strongest links between them) and focused graphs (the events of some topics, or some events with every relation
around them). Both are read from the graph store's aggregates and by-id reads, so that a conversation of thousands
of events is never loaded whole nor drawn at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from compassmem.core.contracts.records import (
    ConversationOverview,
    GraphCounts,
    GraphLimits,
    GraphNode,
    LimitedConversationGraph,
    OverviewCounts,
    OverviewFilters,
    RelationTypeSummary,
    TopicLink,
    TopicSummary,
)
from compassmem.core.models import Event, RelationType
from compassmem.retrieval.listing import edge_of_relation, node_of_event
from compassmem.sinks.factory import Stores
from compassmem.sinks.graph_store import TopicCount, TopicLinkCount
from compassmem.text.topic_terms import spelt_out

# Keywords of a topic drawn as its label: readable at the opening zoom.
LABEL_KEYWORDS = 3
# Summaries of a topic's events its keywords (stems: "radioact", "lopsid") are spelt out from.
LABEL_SAMPLES = 24


def conversation_overview(stores: Stores, tenant: str, conversation_id: str, *, types: Sequence[str] | None = None,
                          min_confidence: float = 0.0, links: int = 50) -> ConversationOverview | None:
    """The conversation's topics (the events without one as one more, id None) with their counts, the relation
    types with how many the filters keep, and the links the filtered active relations make between topics, the
    strongest ``links`` of them. None when the conversation has no memory."""
    topics = stores.graph.topic_counts(tenant, conversation_id, summaries=LABEL_SAMPLES)
    opened = stores.open_events(tenant, conversation_id)
    if not topics and not opened:
        return None
    asked = sorted({RelationType(t).value for t in types}) if types else None
    relations = stores.graph.relation_overview(tenant, conversation_id, types=asked, min_confidence=min_confidence)
    summaries = _topic_summaries(topics, opened)
    between = sorted((link for link in relations.links if link.source != link.target), key=_strongest)
    within = sorted((link for link in relations.links if link.source == link.target), key=_strongest)
    counts = OverviewCounts(
        events=sum(t.events for t in summaries), turns=sum(t.turns for t in summaries),
        topics=sum(1 for t in summaries if t.id is not None),
        unclustered_events=sum(t.events for t in summaries if t.id is None),
        relations=sum(t.active for t in relations.types), superseded_relations=relations.superseded,
        passing_relations=sum(t.passing for t in relations.types), links_total=len(between))
    return ConversationOverview(
        tenant=tenant, conversation_id=conversation_id,
        filters=OverviewFilters(types=asked or [t.value for t in RelationType], min_confidence=min_confidence,
                                links=links),
        counts=counts,
        relation_types=[RelationTypeSummary(type=t.type, relations=t.active, passing=t.passing)
                        for t in relations.types],
        topics=summaries, links=[_link(link) for link in between[:links]], within=[_link(link) for link in within])


def _strongest(link: TopicLinkCount) -> tuple[float, int, str, str, str]:
    return (-link.max_confidence, -link.relations, link.source or "", link.target or "", link.type)


def _link(link: TopicLinkCount) -> TopicLink:
    return TopicLink(source=link.source, target=link.target, type=link.type, relations=link.relations,
                     max_confidence=round(link.max_confidence, 4), mean_confidence=round(link.mean_confidence, 4))


def _topic_summaries(topics: list[TopicCount], opened: list[Event]) -> list[TopicSummary]:
    summaries = []
    unclustered: TopicCount | None = None
    for topic in topics:
        if topic.cluster_id is None:
            unclustered = topic
            continue
        keywords = spelt_out(topic.label, topic.summaries)
        summaries.append(TopicSummary(id=topic.cluster_id, label=", ".join(keywords[:LABEL_KEYWORDS]) or "topic",
                                      keywords=keywords, events=topic.events, turns=topic.turns,
                                      first_at=_time(topic.first_ts), last_at=_time(topic.last_ts)))
    summaries.sort(key=lambda t: (t.first_at or datetime.max.replace(tzinfo=UTC), t.id or ""))
    if unclustered is not None or opened:
        starts = [t for t in (_time(unclustered.first_ts) if unclustered else None,
                              *(e.temporal_info.start for e in opened)) if t is not None]
        ends = [t for t in (_time(unclustered.last_ts) if unclustered else None,
                            *(e.temporal_info.end for e in opened)) if t is not None]
        summaries.append(TopicSummary(
            id=None, label="no topic yet", keywords=[],
            events=(unclustered.events if unclustered else 0) + len(opened),
            turns=(unclustered.turns if unclustered else 0) + sum(len(e.observations) for e in opened),
            first_at=min(starts, default=None), last_at=max(ends, default=None)))
    return summaries


def _time(timestamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(timestamp, UTC) if timestamp is not None else None


def focused_graph(stores: Stores, tenant: str, conversation_id: str, *, topics: Sequence[str] = (),
                  unclustered: bool = False, events: Sequence[str] = (), max_nodes: int | None = None,
                  since: datetime | None = None) -> LimitedConversationGraph | None:
    """The events of ``topics`` (and those without a topic when ``unclustered``; at most ``max_nodes``, the most
    recent, ending at or after ``since``) and the ``events`` named, with every relation that touches one of them
    (superseded ones too) and the events at the relations' other ends, so that a page can draw each where it
    belongs; topics are those of the events returned. None when the conversation has no memory."""
    counted = stores.graph.topic_counts(tenant, conversation_id)
    opened = stores.open_events(tenant, conversation_id)
    total = sum(t.events for t in counted) + len(opened)
    if total == 0:
        return None
    nodes: dict[str, GraphNode] = {}
    if topics or unclustered:
        for props in stores.graph.topic_events(tenant, conversation_id, list(topics), unclustered, since=since,
                                               limit=max_nodes):
            nodes[props["event_id"]] = GraphNode.of(props["event_id"], props)
        if unclustered:
            for event in opened:
                if since is None or event.temporal_info.end >= since:
                    nodes[event.event_id] = node_of_event(event)
    named = [e for e in dict.fromkeys(events) if e not in nodes]
    if named:
        _add_events(nodes, stores.graph.events_by_id(tenant, conversation_id, named))
        for event in opened:
            if event.event_id in named:
                nodes[event.event_id] = node_of_event(event)
    relations = stores.graph.relations_touching(tenant, conversation_id, list(nodes))
    ends = {end for r in relations for end in (r.source, r.target)}
    _add_events(nodes, stores.graph.events_by_id(tenant, conversation_id, [e for e in ends if e not in nodes]))
    clusters = {n.cluster_id for n in nodes.values() if n.cluster_id} | {e for e in ends if e not in nodes}
    labels = stores.graph.clusters_by_id(tenant, conversation_id, sorted(clusters))
    for cluster_id, keywords in labels.items():
        members = sorted(n.id for n in nodes.values() if n.cluster_id == cluster_id)
        nodes[cluster_id] = GraphNode.of(cluster_id, {"kind": "cluster", "label": keywords, "members": members})
    edges = [edge_of_relation(r) for r in relations if r.source in nodes and r.target in nodes]
    returned = sum(1 for n in nodes.values() if n.kind == "event")
    counts = GraphCounts(events=returned, stubs=0, clusters=len(labels), relations=len(edges),
                         superseded_relations=sum(1 for e in edges if e.superseded))
    limits = GraphLimits(max_nodes=max_nodes, since=since, events_total=total,
                         events_omitted=max(0, total - returned))
    return LimitedConversationGraph(tenant=tenant, conversation_id=conversation_id, nodes=list(nodes.values()),
                                    edges=edges, counts=counts, limits=limits)


def _add_events(nodes: dict[str, GraphNode], found: list[dict[str, Any]]) -> None:
    for props in found:
        nodes.setdefault(props["event_id"], GraphNode.of(props["event_id"], props))
