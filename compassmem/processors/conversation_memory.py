"""One conversation's memory-building state: segmenter, events, relation ledger, clusters.

This is the single implementation of the write path: the in-process pipeline and the streaming worker both
feed turns (with their embeddings) through ``add_turn`` and write the returned updates to their sinks.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
from pydantic import BaseModel, Field

from compassmem.models import Cluster, Event, IndexedTurn, Relation, Turn
from compassmem.processors.clustering import ClusterState, Reclusterer
from compassmem.processors.event_index import EventIndex
from compassmem.processors.event_frames import build_event, indexed_turns, merge_into, segment_texts
from compassmem.processors.merging import EventMerger, MergeDecision, nearest_events
from compassmem.processors.relation_ledger import RelationLedger
from compassmem.processors.relations import ADJACENCY_EVIDENCE, KeywordStats, RelationExtractor
from compassmem.processors.segmentation import BoundaryDetector, BoundaryReason, Segment, SegmenterState


class MemoryUpdate(BaseModel):
    """What one step changed: records to upsert (latest versions) and what happened, for metrics."""

    events: list[Event] = Field(default_factory=list)
    # The turns of closed segments, now that their event is known (each turn is reported exactly once).
    turns: list[IndexedTurn] = Field(default_factory=list)
    relations: list[Relation] = Field(default_factory=list)
    clusters: list[Cluster] = Field(default_factory=list)
    segments_closed: int = 0
    merges: list[MergeDecision] = Field(default_factory=list)
    rejected_relations: int = 0
    reclustered: bool = False
    # Seconds spent per processing stage (segment, merge, relate, recluster), and each reclustering run's duration.
    stage_seconds: Counter[str] = Field(default_factory=Counter)
    recluster_seconds: list[float] = Field(default_factory=list)

    def extend(self, other: MemoryUpdate) -> None:
        self.events.extend(other.events)
        self.turns.extend(other.turns)
        self.relations.extend(other.relations)
        self.clusters.extend(other.clusters)
        self.segments_closed += other.segments_closed
        self.merges.extend(other.merges)
        self.rejected_relations += other.rejected_relations
        self.reclustered = self.reclustered or other.reclustered
        self.stage_seconds.update(other.stage_seconds)
        self.recluster_seconds.extend(other.recluster_seconds)


class ConversationHealth(BaseModel):
    """The counts behind a conversation's health figures: degree and duplicate rate."""

    events: int = 0
    relations: int = Field(default=0, description="active relations")
    adjacency_relations: int = Field(default=0, description="active relations that only link consecutive events")
    segments: int = 0
    merged_segments: int = 0

    @property
    def average_degree(self) -> float:
        return 2 * self.relations / self.events if self.events else 0.0

    @property
    def duplicate_rate(self) -> float:
        return self.merged_segments / self.segments if self.segments else 0.0


class ConversationStats(BaseModel):
    segments: int = 0
    merged: int = 0
    merge_reasons: Counter[str] = Field(default_factory=Counter)
    boundary_reasons: Counter[str] = Field(default_factory=Counter)
    rejected_relations: int = 0
    recluster_runs: int = 0


class ConversationMemoryState(BaseModel):
    """Everything a ConversationMemory holds, as one pydantic record: what a stream processor keeps in a table
    so that a restarted worker resumes a conversation exactly where it stopped.

    ``events`` is a list because creation order is chronology (relation extraction relies on it). The record
    shares objects with the live memory it came from: serialise it before the memory takes its next turn.
    """

    segmenter: SegmenterState
    events: list[Event]
    ledger: RelationLedger
    keyword_stats: KeywordStats
    clusters: ClusterState
    stats: ConversationStats


class ConversationMemory:
    def __init__(
        self,
        detector: BoundaryDetector,
        merger: EventMerger,
        extractor: RelationExtractor,
        reclusterer: Reclusterer,
    ) -> None:
        self._detector = detector
        self._merger = merger
        self._extractor = extractor
        self._reclusterer = reclusterer
        self.segmenter = SegmenterState()
        # Insertion order is creation order: the chronology relation extraction relies on.
        self.events: dict[str, Event] = {}
        self.ledger = RelationLedger()
        self.keyword_stats = KeywordStats()
        self.clusters = ClusterState()
        self.stats = ConversationStats()
        self._derive()

    def _derive(self) -> None:
        """Rebuild the derived indexes from the state (never stored: a restored memory rebuilds them).

        ``_index``: the events in creation order with their embedding matrix and entity, participant and session
        indexes, kept up to date as events are added or merged, so one step does not scan every event.
        ``_adjacency``: the ids of the active relations that only link consecutive events (health counts).
        """
        self._index = EventIndex(self.events.values())
        self._adjacency = {r.relation_id for r in self.ledger.active.values() if r.evidence in ADJACENCY_EVIDENCE}

    @classmethod
    def from_state(
        cls,
        state: ConversationMemoryState,
        detector: BoundaryDetector,
        merger: EventMerger,
        extractor: RelationExtractor,
        reclusterer: Reclusterer,
    ) -> ConversationMemory:
        memory = cls(detector, merger, extractor, reclusterer)
        memory.restore(state)
        return memory

    def to_state(self) -> ConversationMemoryState:
        return ConversationMemoryState(
            segmenter=self.segmenter,
            events=list(self.events.values()),
            ledger=self.ledger,
            keyword_stats=self.keyword_stats,
            clusters=self.clusters,
            stats=self.stats,
        )

    def restore(self, state: ConversationMemoryState) -> None:
        """Replace this memory's state (the configured processors stay)."""
        self.segmenter = state.segmenter
        self.events = {event.event_id: event for event in state.events}
        self.ledger = state.ledger
        self.keyword_stats = state.keyword_stats
        self.clusters = state.clusters
        self.stats = state.stats
        self._derive()

    def health(self) -> ConversationHealth:
        return ConversationHealth(
            events=len(self.events),
            relations=len(self.ledger.active),
            adjacency_relations=len(self._adjacency),
            segments=self.stats.segments,
            merged_segments=self.stats.merged,
        )

    def add_turn(self, turn: Turn, embedding: np.ndarray) -> MemoryUpdate:
        started = time.perf_counter()
        segment = self._detector.step(self.segmenter, turn, embedding)
        segmented = time.perf_counter() - started
        update = self._absorb(segment) if segment is not None else MemoryUpdate()
        update.stage_seconds["segment"] += segmented
        return update

    def close_open_segment(self, reason: BoundaryReason = BoundaryReason.END) -> MemoryUpdate:
        segment = self._detector.close(self.segmenter, reason)
        return self._absorb(segment) if segment is not None else MemoryUpdate()

    def _absorb(self, segment: Segment) -> MemoryUpdate:
        update = MemoryUpdate(segments_closed=1)
        mark = time.perf_counter()
        self.stats.segments += 1
        self.stats.boundary_reasons[segment.boundary_reason.value] += 1
        # The index holds the events before this step (the history), in creation order.
        history = self._index
        decision = self._merger.decide(segment, history.last(), nearest_events(history, segment.centroid()))
        if decision is not None:
            event = merge_into(self.events[decision.target_event_id], segment)
            self.stats.merged += 1
            self.stats.merge_reasons[decision.reason.value] += 1
            update.merges.append(decision)
        else:
            event = build_event(segment)
        mark = _lap(update, "merge", mark)
        relations = self._extractor.extract(event, history, segment_texts(segment), self.keyword_stats,
                                            adjacent=decision is None)
        # Counted after extraction, so a clause's terms are judged rare against the earlier events only.
        if decision is None:
            self.keyword_stats.add(event.keywords, new_document=True)
        else:
            self.keyword_stats.add(sorted(set(event.keywords) - set(self.events[event.event_id].keywords)), False)
        self.events[event.event_id] = event
        self._index.put(event)
        ledger_result = self.ledger.apply(relations)
        for written in ledger_result.writes:  # every change to the active relations is among the writes
            current = self.ledger.active.get(written.relation_id)
            if current is not None and current.evidence in ADJACENCY_EVIDENCE:
                self._adjacency.add(written.relation_id)
            else:
                self._adjacency.discard(written.relation_id)
        update.relations.extend(ledger_result.writes)
        update.rejected_relations = len(ledger_result.rejected)
        self.stats.rejected_relations += len(ledger_result.rejected)
        update.events.append(event)
        update.turns.extend(indexed_turns(segment, event.event_id))
        mark = _lap(update, "relate", mark)
        if self._reclusterer.observe(self.clusters, event.event_id):
            update.extend(self._recluster())
            _lap(update, "recluster", mark)
        return update

    def _recluster(self) -> MemoryUpdate:
        started = time.perf_counter()
        result = self._reclusterer.recluster(self.clusters, self.events)
        self.stats.recluster_runs += 1
        moved = []
        for event_id, cluster_id in result.moved.items():
            event = self.events[event_id].model_copy(update={"cluster_id": cluster_id})
            self.events[event_id] = event
            self._index.put(event)
            moved.append(event)
        return MemoryUpdate(events=moved, clusters=result.clusters, reclustered=True,
                            recluster_seconds=[time.perf_counter() - started])


def _lap(update: MemoryUpdate, stage: str, since: float) -> float:
    now = time.perf_counter()
    update.stage_seconds[stage] += now - since
    return now
