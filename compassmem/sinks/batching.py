"""Batching sinks in the shape of quix-streams' BaseSink: ``add()`` per record, ``flush()`` before offsets commit.

A sink keeps only the latest version of each record id, so a batch that saw an event three times (created,
merged into, reclustered) writes it once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from compassmem.models import Cluster, Event, IndexedTurn, Relation, search_text, turn_point_id
from compassmem.processors.text_features import keyword_stems, sparse_keyword_vector
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.vector_store import SparseVector, VectorStore


Record = Event | IndexedTurn | Relation | Cluster


class Sink(ABC):
    @abstractmethod
    def add(self, record: Record) -> None: ...

    @abstractmethod
    def flush(self) -> None:
        """Write everything added so far; after it returns, the writes are durable."""

    def discard(self) -> None:
        """Drop what was added and not flushed (after a failed flush, before the batch is redone)."""


def event_keyword_vector(event: Event) -> SparseVector:
    return sparse_keyword_vector(stem for o in event.observations for stem in keyword_stems(o.text))


def turn_keyword_vector(turn: IndexedTurn) -> SparseVector:
    return sparse_keyword_vector(keyword_stems(search_text(turn.speaker, turn.text, turn.timestamp)))


class VectorSink(Sink):
    """Events and turns into the vector store (dense embedding + sparse keywords + payload)."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store
        self._events: dict[str, Event] = {}
        self._turns: dict[str, IndexedTurn] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self._events[record.event_id] = record
        elif isinstance(record, IndexedTurn):
            self._turns[turn_point_id(record.tenant, record.conversation_id, record.turn_id)] = record

    def flush(self) -> None:
        if not self._events and not self._turns:
            return
        if self._events:
            events = list(self._events.values())
            self._store.upsert_events(events, [event_keyword_vector(e) for e in events])
        if self._turns:
            turns = list(self._turns.values())
            self._store.upsert_turns(turns, [turn_keyword_vector(t) for t in turns])
        self._store.flush()
        self.discard()

    def discard(self) -> None:
        self._events.clear()
        self._turns.clear()


class GraphSink(Sink):
    """Events, relations and clusters into the graph store; nodes before the edges that need them."""

    def __init__(self, store: GraphStore) -> None:
        self._store = store
        self._events: dict[str, Event] = {}
        self._relations: dict[str, Relation] = {}
        self._clusters: dict[str, Cluster] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self._events[record.event_id] = record
        elif isinstance(record, Relation):
            self._relations[record.relation_id] = record
        elif isinstance(record, Cluster):
            self._clusters[record.cluster_id] = record

    def flush(self) -> None:
        if self._events:
            self._store.upsert_events(list(self._events.values()))
        if self._clusters:
            self._store.upsert_clusters(list(self._clusters.values()))
        if self._relations:
            self._store.upsert_relations(list(self._relations.values()))
        self.discard()

    def discard(self) -> None:
        self._events.clear()
        self._relations.clear()
        self._clusters.clear()
