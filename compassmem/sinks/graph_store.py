"""The graph store interface: the event graph (events, typed relations, topic clusters).

Per-database operations live in the backends; navigation reads a networkx view of one conversation's
subgraph, so the query code never speaks Cypher.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import networkx as nx

from compassmem.core.models import Cluster, Event, Relation


EdgeFields = tuple[str, str, str, str, str | None, float, str]


class WalkEdge(NamedTuple):
    """An active relation as a walk needs it: its ends (the target may be a cluster id) and what it says."""

    source: str
    target: str
    relation_id: str
    type: str
    subtype: str | None
    confidence: float
    # Whether the relation only says two events are adjacent in time (ADJACENCY_EVIDENCE): the walk's one use of a
    # relation's evidence, read as a flag so that a load does not carry every relation's evidence text.
    adjacent: bool

    def fields(self) -> EdgeFields:
        """The edge as a plain tuple (``WalkEdge._make`` gives it back): the query API's hot tier holds thousands,
        and the garbage collector stops tracking a plain tuple of strings and numbers (never a named tuple, nor a
        dict before a full collection)."""
        return tuple(self)


class ConversationStats(NamedTuple):
    """One conversation of a tenant as a listing shows it, over its stored (closed, not stub) events."""

    conversation_id: str
    events: int
    turns: int
    first_at: datetime | None
    last_at: datetime | None
    subject_ids: tuple[str, ...]
    participants: tuple[str, ...]


class TopicCount(NamedTuple):
    """One topic of a conversation as its overview shows it, over its stored (not stub) events; ``cluster_id`` None
    holds the events without a topic. ``label``: the cluster's keywords (empty for the events without one)."""

    cluster_id: str | None
    label: tuple[str, ...]
    events: int
    turns: int
    first_ts: float | None
    last_ts: float | None
    summaries: tuple[str, ...] = ()  # of some of its events, as many as asked for


class RelationTypeCount(NamedTuple):
    type: str
    active: int
    passing: int  # of those, the ones the overview's filters keep


class TopicLinkCount(NamedTuple):
    """Active relations of one type from events of one topic to events (or the cluster) of another; None: the events
    without a topic."""

    source: str | None
    target: str | None
    type: str
    relations: int
    max_confidence: float
    mean_confidence: float


class RelationOverview(NamedTuple):
    types: list[RelationTypeCount]
    superseded: int
    links: list[TopicLinkCount]  # every pair of topics (and type) the filtered relations join, within topics too


class HealthCounts(NamedTuple):
    """What a conversation's health figures are made of, over its stored (not stub) events and their relations."""

    events: int
    turns: int
    merged_segments: int  # segments folded into an earlier event (the events' merge histories)
    topics: int
    relations: int  # active
    adjacency_relations: int  # active relations that only say two events are adjacent in time
    superseded_relations: int
    # Confidence of the active relations that are not adjacency edges: all of them, and the ``recent`` most
    # recently written (what ``health_counts`` was asked for).
    scored_relations: int
    confidence_sum: float
    recent_scored: int
    recent_confidence_sum: float


class EventPosition(NamedTuple):
    """Where a page of a conversation's events in time order ended: its last event's start and id (ties on the
    start are ordered by id), so the next page starts right after it whatever was written in between."""

    start_ts: float
    event_id: str


class GraphStore(ABC):
    @abstractmethod
    def upsert_events(self, events: Sequence[Event]) -> None:
        """Event nodes keyed by event_id (MERGE semantics: a replay changes nothing)."""

    @abstractmethod
    def upsert_relations(self, relations: Sequence[Relation]) -> None:
        """Edges keyed by relation_id; superseded relations are kept with ``superseded_by`` set."""

    @abstractmethod
    def upsert_clusters(self, clusters: Sequence[Cluster]) -> None:
        """Cluster nodes and their member edges. The listed members join the cluster, leaving any other (an event
        belongs to one topic); members not listed keep their membership: a writer that holds only a conversation's
        recent events lists those (every member of a short conversation), and older members stay where they are.
        The cluster's size is its members in the store."""

    @abstractmethod
    def conversation_graph(self, tenant: str, conversation_id: str, *, since: datetime | None = None,
                           max_events: int | None = None) -> nx.MultiDiGraph:
        """Event nodes (attributes: the stored event properties) and relation edges (key = relation_id,
        attributes: the relation fields), including superseded relations; cluster nodes carry kind="cluster".

        ``since`` keeps the events that end at or after it, ``max_events`` the most recent ones (by start); with
        either, only the relations between kept events (or to their clusters) and the clusters of kept events
        (listing only those members) are returned, and stub endpoints are left out. The graph attribute
        ``events_total`` is the number of (not stub) events the conversation holds in any case."""

    @abstractmethod
    def conversation_stats(self, tenant: str, query: str | None = None) -> list[ConversationStats]:
        """Every conversation of the tenant with an event, in no particular order; with ``query``, only those with
        an event whose conversation id, subject id, summary or a participant contains it (case-insensitive)."""

    @abstractmethod
    def topic_counts(self, tenant: str, conversation_id: str, summaries: int = 0) -> list[TopicCount]:
        """Each topic of the conversation with an event (events, turns, time span, the summaries of up to
        ``summaries`` of its events) and one row (``cluster_id`` None) for its events without a topic, when it has
        some."""

    @abstractmethod
    def relation_overview(self, tenant: str, conversation_id: str, *, types: Sequence[str] | None,
                          min_confidence: float) -> RelationOverview:
        """Counts of the conversation's relations: active ones per type (all, and those of ``types`` at or above
        ``min_confidence``), superseded ones, and the filtered active relations summed per (source topic, target
        topic, type). ``types`` None: every type."""

    @abstractmethod
    def topic_events(self, tenant: str, conversation_id: str, topics: Sequence[str], unclustered: bool, *,
                     since: datetime | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The (not stub) events of these topics, and those without a topic when ``unclustered``, the most recent
        first (at most ``limit``; those ending at or after ``since``), as ``conversation_graph`` gives an event
        node's attributes."""

    @abstractmethod
    def events_by_id(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The conversation's (not stub) events among these ids, as ``conversation_graph`` gives an event node's
        attributes; ids of other conversations or of no event are left out."""

    @abstractmethod
    def relations_touching(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> list[Relation]:
        """Every relation of the conversation (superseded ones too) with an end among these events, each once."""

    @abstractmethod
    def clusters_by_id(self, tenant: str, conversation_id: str, cluster_ids: Sequence[str]) -> dict[str, list[str]]:
        """The keywords (label) of these clusters of the conversation, by id; unknown ids are left out."""

    @abstractmethod
    def health_counts(self, tenant: str, conversation_id: str, recent: int) -> HealthCounts:
        """The counts behind a conversation's health figures (zeros for a conversation the store does not hold);
        ``recent``: how many of the most recently written relations the recent confidence is over."""

    @abstractmethod
    def event_page(self, tenant: str, conversation_id: str, after: EventPosition | None,
                   limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` (not stub) events of a conversation in time order (start, then id), from just after
        ``after`` (None: from the first), each as ``conversation_graph`` gives an event node's attributes."""

    @abstractmethod
    def edges_touching(self, tenant: str, event_ids: Sequence[str]) -> list[WalkEdge]:
        """The active relations with one end (or both) among these events, each once: what a walk from them can
        take, without loading whole conversations."""

    @abstractmethod
    def relations(self, tenant: str, conversation_id: str) -> list[Relation]: ...

    @abstractmethod
    def delete_events(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> None:
        """Event nodes with their edges (and cluster memberships)."""

    @abstractmethod
    def delete_relations(self, tenant: str, relation_ids: Sequence[str]) -> None:
        """Relation edges by id, superseded ones included (a redaction removes those that quote the turn)."""

    @abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> None: ...

    @abstractmethod
    def delete_tenant(self, tenant: str) -> None: ...

    @abstractmethod
    def compact(self) -> None:
        """Rewrite the store's files so that nothing deleted stays in them (erasure), and wait until it is done."""

    @abstractmethod
    def close(self) -> None: ...
