"""The graph store interface: the event graph (events, typed relations, topic clusters).

Per-database operations live in the backends; navigation reads a networkx view of one conversation's
subgraph, so the query code never speaks Cypher.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import NamedTuple

import networkx as nx

from compassmem.models import Cluster, Event, Relation


class GraphEdge(NamedTuple):
    """An active relation as a walk needs it: its ends (the target may be a cluster id) and what it says."""

    source: str
    target: str
    relation_id: str
    type: str
    subtype: str | None
    confidence: float
    evidence: str

    def attributes(self) -> dict[str, str | float | None]:
        """The edge as networkx attributes, the way ``conversation_graph`` labels them."""
        return self._asdict()


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
    def conversation_graph(self, tenant: str, conversation_id: str) -> nx.MultiDiGraph:
        """Event nodes (attributes: the stored event properties) and relation edges (key = relation_id,
        attributes: the relation fields), including superseded relations; cluster nodes carry kind="cluster"."""

    @abstractmethod
    def edges_touching(self, tenant: str, event_ids: Sequence[str]) -> list[GraphEdge]:
        """The active relations with one end (or both) among these events, each once: what a walk from them can
        take, without loading whole conversations."""

    @abstractmethod
    def relations(self, tenant: str, conversation_id: str) -> list[Relation]: ...

    @abstractmethod
    def delete_events(self, tenant: str, conversation_id: str, event_ids: Sequence[str]) -> None:
        """Event nodes with their edges (and cluster memberships)."""

    @abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> None: ...

    @abstractmethod
    def delete_tenant(self, tenant: str) -> None: ...

    @abstractmethod
    def close(self) -> None: ...
