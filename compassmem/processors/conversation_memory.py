"""One conversation's memory-building state: segmenter, a hot window of recent events, relation ledger, clusters.

This is the single implementation of the write path: the in-process pipeline and the streaming worker both
feed turns (with their embeddings) through ``add_turn`` and write the returned updates to their sinks.

The memory holds what the next decisions need, not the whole conversation (the stores hold that): the open
segment, the ``hot_events`` most recent events (merging, relation extraction and reclustering look at no others),
the relations that can still change, the cluster centroids and keyword document frequencies. So the state a
worker writes to its table every batch, and its RAM, stop growing with the conversation; the counts behind the
health figures are running totals. A conversation of at most ``hot_events`` events is processed exactly as if
everything were held.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, model_validator

from compassmem.core.models import Cluster, Event, IndexedTurn, Observation, Relation, Turn, TurnPassage
from compassmem.processors.clustering import ClusterState, Reclusterer
from compassmem.processors.event_index import EventIndex
from compassmem.processors.event_frames import (
    EventSummariser,
    TurnLabeller,
    build_event,
    indexed_turns,
    merge_into,
    segment_texts,
    summarised,
)
from compassmem.processors.merging import EventMerger, MergeDecision, nearest_events
from compassmem.processors.relation_ledger import RelationLedger
from compassmem.processors.relations import ADJACENCY_EVIDENCE, KeywordStats, RelationExtractor, rests_on_turn
from compassmem.processors.segmentation import BoundaryDetector, BoundaryReason, Segment, SegmenterState

DEFAULT_HOT_EVENTS = 256
# A window must hold the previous event (adjacency, continuation merges) and a few candidates for merging and
# follow-ups; below this the memory would hardly relate anything.
MIN_HOT_EVENTS = 8


# The keys of MemoryUpdate.stage_seconds, in the order one turn goes through them.
APPLY_STAGES = ("segment", "merge", "summarise", "label", "relate", "recluster")


class Retraction(BaseModel):
    """Records of a conversation that an earlier close wrote and no memory holds any more (``ReopenedTail``): the
    stores delete them before the records of the same update are written."""

    tenant: str
    conversation_id: str
    # Deleted with the turns that point at them: the update that retracts them writes those turns anew.
    event_ids: list[str]
    relation_ids: list[str]


class ReopenedTail(BaseModel):
    """What an earlier run wrote when it closed the segment that a replayed memory holds open again
    (``compassmem/write/resume.py``); the records are replaced when that segment closes again."""

    # Events that close built: the memory never had them.
    retract_events: list[str] = Field(default_factory=list)
    # Relations that close added (both ends held), which the memory's ledger does not have.
    retract_relations: list[str] = Field(default_factory=list)
    # Held events and relations that close changed (merged into, superseded, raised): written back as held.
    restore_events: list[str] = Field(default_factory=list)
    restore_relations: list[str] = Field(default_factory=list)


class MemoryUpdate(BaseModel):
    """What one step changed: records to upsert (latest versions) and what happened, for metrics."""

    # Written first: what the records below replace.
    retractions: list[Retraction] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    # The turns of closed segments, now that their event is known (each turn is reported exactly once).
    turns: list[IndexedTurn] = Field(default_factory=list)
    relations: list[Relation] = Field(default_factory=list)
    clusters: list[Cluster] = Field(default_factory=list)
    # The later passages of long turns, written once, when their turn is embedded (models.TurnPassage).
    passages: list[TurnPassage] = Field(default_factory=list)
    segments_closed: int = 0
    merges: list[MergeDecision] = Field(default_factory=list)
    rejected_relations: int = 0
    reclustered: bool = False
    # Seconds spent per processing stage (segment, merge, relate, recluster), and each reclustering run's duration.
    stage_seconds: Counter[str] = Field(default_factory=Counter)
    recluster_seconds: list[float] = Field(default_factory=list)

    def extend(self, other: MemoryUpdate) -> None:
        self.retractions.extend(other.retractions)
        self.events.extend(other.events)
        self.turns.extend(other.turns)
        self.relations.extend(other.relations)
        self.clusters.extend(other.clusters)
        self.passages.extend(other.passages)
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


class ConversationMemoryStats(BaseModel):
    segments: int = 0
    merged: int = 0
    merge_reasons: Counter[str] = Field(default_factory=Counter)
    boundary_reasons: Counter[str] = Field(default_factory=Counter)
    rejected_relations: int = 0
    recluster_runs: int = 0
    # Totals over the whole conversation, which the memory no longer holds in full.
    events: int = 0
    turns: int = Field(default=0, description="turns closed into events")
    adjacency_relations: int = Field(default=0, description="active relations that only link consecutive events")


class ConversationMemoryState(BaseModel):
    """Everything a ConversationMemory holds, as one pydantic record: what a stream processor keeps in a table
    so that a restarted worker resumes a conversation exactly where it stopped.

    ``events`` (the hot window) is a list because creation order is chronology (relation extraction relies on it).
    The record shares objects with the live memory it came from: serialise it before the memory takes its next turn.
    """

    segmenter: SegmenterState
    events: list[Event]
    # Events that left the window before their first clustering (only with a window shorter than the
    # reclustering window): the next run assigns and publishes them, then they are dropped.
    evicted_pending: list[Event] = Field(default_factory=list)
    ledger: RelationLedger
    keyword_stats: KeywordStats
    clusters: ClusterState
    stats: ConversationMemoryStats
    reopened: ReopenedTail | None = None

    @model_validator(mode="before")
    @classmethod
    def _totals_of_an_earlier_record(cls, data: Any) -> Any:  # noqa: ANN401 - raw input, dict when decoded
        """A record written before the memory kept running totals held every event and every active relation:
        its totals are counted off those (once; the memory keeps them from then on)."""
        if not isinstance(data, dict) or not isinstance(data.get("stats"), dict) or "events" in data["stats"]:
            return data
        events, ledger = data.get("events") or [], data.get("ledger") or {}
        active = list((ledger.get("active") or {}).values())
        data["stats"] = {
            **data["stats"], "events": len(events), "turns": sum(len(e.get("observations", [])) for e in events),
            "adjacency_relations": sum(1 for r in active if r.get("evidence") in ADJACENCY_EVIDENCE),
        }
        data["ledger"] = {**ledger, "active_by_type": Counter(r.get("type") for r in active)}
        return data


class ConversationMemory:
    def __init__(
        self,
        detector: BoundaryDetector,
        merger: EventMerger,
        extractor: RelationExtractor,
        reclusterer: Reclusterer,
        hot_events: int = DEFAULT_HOT_EVENTS,
        summariser: EventSummariser | None = None,
        labeller: TurnLabeller | None = None,
    ) -> None:
        if hot_events < MIN_HOT_EVENTS:
            raise ValueError(f"hot_events must be at least {MIN_HOT_EVENTS}, got {hot_events}")
        self._detector = detector
        self._merger = merger
        self._extractor = extractor
        self._reclusterer = reclusterer
        self._hot_events = hot_events
        self._summariser = summariser
        self._labeller = labeller
        self.segmenter = SegmenterState()
        # The hot window: the ``hot_events`` most recent events. Insertion order is creation order: the
        # chronology relation extraction relies on.
        self.events: dict[str, Event] = {}
        self.evicted_pending: dict[str, Event] = {}
        self.ledger = RelationLedger()
        self.keyword_stats = KeywordStats()
        self.clusters = ClusterState()
        self.stats = ConversationMemoryStats()
        self.reopened: ReopenedTail | None = None
        self._derive()

    def _derive(self) -> None:
        """Rebuild the derived indexes from the state (never stored: a restored memory rebuilds them).

        ``_index``: the hot window in creation order with its embedding matrix and entity, participant and session
        indexes, kept up to date as events are added, merged or leave the window, so one step does not scan every
        event. ``_adjacency``: the ids of the held active relations that only link consecutive events.
        ``_incident``: event id -> the ids of the held active relations it is an end of, released when it leaves
        the window. A state written with a longer window (another setting) is cut to this memory's.
        """
        self._adjacency = {r.relation_id for r in self.ledger.active.values() if r.evidence in ADJACENCY_EVIDENCE}
        self._incident: dict[str, set[str]] = {}
        for relation in self.ledger.active.values():
            self._incident.setdefault(relation.source, set()).add(relation.relation_id)
            self._incident.setdefault(relation.target, set()).add(relation.relation_id)
        for event_id in list(self.events)[: max(0, len(self.events) - self._hot_events)]:
            self._leave_window(event_id)
        self._index = EventIndex(self.events.values())

    @classmethod
    def from_state(
        cls,
        state: ConversationMemoryState,
        detector: BoundaryDetector,
        merger: EventMerger,
        extractor: RelationExtractor,
        reclusterer: Reclusterer,
        hot_events: int = DEFAULT_HOT_EVENTS,
        summariser: EventSummariser | None = None,
        labeller: TurnLabeller | None = None,
    ) -> ConversationMemory:
        memory = cls(detector, merger, extractor, reclusterer, hot_events, summariser, labeller)
        memory.restore(state)
        return memory

    def use_steps(self, detector: BoundaryDetector, summariser: EventSummariser | None,
                  labeller: TurnLabeller | None) -> None:
        """Build what comes next with these (a runtime setting changed); the state stays as it is."""
        self._detector, self._summariser, self._labeller = detector, summariser, labeller

    def to_state(self) -> ConversationMemoryState:
        return ConversationMemoryState(
            segmenter=self.segmenter,
            events=list(self.events.values()),
            evicted_pending=list(self.evicted_pending.values()),
            ledger=self.ledger,
            keyword_stats=self.keyword_stats,
            clusters=self.clusters,
            stats=self.stats,
            reopened=self.reopened,
        )

    def restore(self, state: ConversationMemoryState) -> None:
        """Replace this memory's state (the configured processors stay)."""
        self.segmenter = state.segmenter
        self.events = {event.event_id: event for event in state.events}
        self.evicted_pending = {event.event_id: event for event in state.evicted_pending}
        self.ledger = state.ledger
        self.keyword_stats = state.keyword_stats
        self.clusters = state.clusters
        self.stats = state.stats
        self.reopened = state.reopened
        self._derive()

    def health(self) -> ConversationHealth:
        return ConversationHealth(
            events=self.stats.events,
            relations=self.ledger.active_total,
            adjacency_relations=self.stats.adjacency_relations,
            segments=self.stats.segments,
            merged_segments=self.stats.merged,
        )

    def add_turn(self, turn: Turn, embedding: np.ndarray) -> MemoryUpdate:
        started = time.perf_counter()
        segments = self._detector.step(self.segmenter, turn, embedding)
        segmented = time.perf_counter() - started
        update = MemoryUpdate()
        for segment in segments:  # oldest first: the look-ahead's boundary, then a hard one before this turn
            update.extend(self._absorb(segment))
        update.stage_seconds["segment"] += segmented
        return update

    def replay(self, turns: Sequence[Turn], embeddings: Sequence[np.ndarray]) -> None:
        """Rebuild the state from turns memory already stored, in the order they were first added, writing nothing:
        the state a run over them held at that point. The summariser and the labeller are not asked: they only
        decorate what is written, and no decision reads what they add."""
        decorators = self._summariser, self._labeller
        self._summariser = self._labeller = None
        try:
            for turn, embedding in zip(turns, embeddings, strict=True):
                self.add_turn(turn, embedding)
        finally:
            self._summariser, self._labeller = decorators

    def close_open_segment(self, reason: BoundaryReason = BoundaryReason.END) -> MemoryUpdate:
        segment = self._detector.close(self.segmenter, reason)
        return self._absorb(segment) if segment is not None else MemoryUpdate()

    def holding(self, turn_id: str) -> Event | None:
        """The held event (hot window, or awaiting its first clustering) that has this turn, if any."""
        for held in (self.events, self.evicted_pending):
            for event in held.values():
                if turn_id in event.turn_ids:
                    return event
        return None

    def held_turn(self, turn_id: str) -> Turn | Observation | None:
        """The turn of this id as the memory holds it: in the open segment, or a source turn of a held event."""
        opened = next((t.turn for t in self.segmenter.open_turns if t.turn.turn_id == turn_id), None)
        event = self.holding(turn_id) if opened is None else None
        return opened if event is None else next(o for o in event.observations if o.turn_id == turn_id)

    def redact_turn(self, turn_id: str, before: Event | None = None, rebuilt: Event | None = None,
                    relations: Sequence[Relation] = ()) -> None:
        """Take a redacted turn out of the state, so that nothing written later carries it again: out of the open
        segment; its event (``before``, the version that had the turn) replaced by ``rebuilt`` (or, None, dropped)
        wherever the memory holds it, and the event's keyword counts undone for the keywords it lost; and out of
        the ledger, the relations that rest on the turn (``rests_on_turn``; every one of a dropped event) and
        ``relations`` (those the stores deleted with it), so that no later repeat writes their quoted evidence
        back. In the segmenter's recent context the turn loses its keyword stems; what else the segmenter keeps of
        it (centre, token count, and in the context its embedding, speaker, position, flags and a fixed topic-shift
        phrase) is no text of it and stays, so later boundary decisions change as little as they can."""
        segmenter = self.segmenter
        segmenter.context = [c.model_copy(update={"stems": []}) if c.turn_id == turn_id else c
                             for c in segmenter.context]
        kept = [t for t in segmenter.open_turns if t.turn.turn_id != turn_id]
        if len(kept) != len(segmenter.open_turns):
            # The look-ahead's pending boundary was before the last open turn: with that turn gone it has no
            # turn to decide on.
            if segmenter.open_turns[-1].turn.turn_id == turn_id:
                segmenter.pending = False
            segmenter.open_turns = kept
        if before is None or before.provisional:
            return  # a provisional event is the open segment's: nothing else holds it, nor counted its keywords
        event_id = before.event_id
        removed = next((o for o in before.observations if o.turn_id == turn_id), None)
        resting = [r for r in self.ledger.active.values() if event_id in (r.source, r.target)
                   and (rebuilt is None or (removed is not None and rests_on_turn(r, removed, rebuilt)))]
        self._remove_relations(list({r.relation_id: r for r in [*relations, *resting]}.values()))
        # The running totals count what the stores hold (never below zero: see ``RelationLedger.remove``).
        self.stats.turns = max(0, self.stats.turns - 1)
        self.stats.events = max(0, self.stats.events - (rebuilt is None))
        if rebuilt is not None:
            self.keyword_stats.remove(sorted(set(before.keywords) - set(rebuilt.keywords)), whole_document=False)
            self.keyword_stats.add(sorted(set(rebuilt.keywords) - set(before.keywords)), new_document=False)
            for held in (self.events, self.evicted_pending):
                if event_id in held:
                    held[event_id] = rebuilt.model_copy(update={"cluster_id": held[event_id].cluster_id})
        else:
            self.keyword_stats.remove(before.keywords, whole_document=True)
            if event_id in self.events:
                self._leave_window(event_id)
            self.evicted_pending.pop(event_id, None)
            self.clusters.assignment.pop(event_id, None)
            if event_id in self.clusters.pending:
                self.clusters.pending.remove(event_id)
        self._index = EventIndex(self.events.values())

    def _remove_relations(self, relations: Sequence[Relation]) -> None:
        """Relations deleted for good: out of the ledger, the held ends and the adjacency total."""
        for relation in relations:
            relation_id = relation.relation_id
            # Counted while active, held or released (the totals cover the whole conversation).
            if (relation.superseded_by is None and relation.evidence in ADJACENCY_EVIDENCE
                    and self.stats.adjacency_relations > 0):
                self.stats.adjacency_relations -= 1
            self._adjacency.discard(relation_id)
            for end in (relation.source, relation.target):
                self._incident.get(end, set()).discard(relation_id)
        self.ledger.remove(relations)

    def _absorb(self, segment: Segment) -> MemoryUpdate:
        update = MemoryUpdate(segments_closed=1)
        if self.reopened is not None:
            tail, self.reopened = self.reopened, None
            update.extend(self._replacing(tail, segment.first))
        mark = time.perf_counter()
        self.stats.segments += 1
        self.stats.boundary_reasons[segment.boundary_reason.value] += 1
        # The index holds the events before this step (the history), in creation order.
        history = self._index
        decision = self._merger.decide(segment, history.last(), nearest_events(history, segment.centroid()),
                                       self.keyword_stats)
        if decision is not None:
            event = merge_into(self.events[decision.target_event_id], segment)
            self.stats.merged += 1
            self.stats.merge_reasons[decision.reason.value] += 1
            update.merges.append(decision)
        else:
            event = build_event(segment)
        mark = _lap(update, "merge", mark)
        if self._summariser is not None:
            event = summarised(event, self._summariser)
            mark = _lap(update, "summarise", mark)
        labels = None
        if self._labeller is not None:
            labels = self._labeller([t.turn for t in segment.turns])
            mark = _lap(update, "label", mark)
        relations = self._extractor.extract(event, history, segment_texts(segment), self.keyword_stats,
                                            adjacent=decision is None)
        # Counted after extraction, so a clause's terms are judged rare against the earlier events only.
        if decision is None:
            self.keyword_stats.add(event.keywords, new_document=True)
        else:
            self.keyword_stats.add(sorted(set(event.keywords) - set(self.events[event.event_id].keywords)), False)
        self.events[event.event_id] = event
        self._index.put(event)
        self.stats.events += 1 if decision is None else 0
        self.stats.turns += len(segment.turns)
        ledger_result = self.ledger.apply(relations)
        self._track(ledger_result.writes)
        # After the ledger: this step's relations may name the event that now leaves the window.
        while len(self._index) > self._hot_events:
            self._leave_window(self._index.evict_oldest().event_id)
        update.relations.extend(ledger_result.writes)
        update.rejected_relations = len(ledger_result.rejected)
        self.stats.rejected_relations += len(ledger_result.rejected)
        update.events.append(event)
        update.turns.extend(indexed_turns(segment, event.event_id, labels))
        mark = _lap(update, "relate", mark)
        if self._reclusterer.observe(self.clusters, event.event_id):
            update.extend(self._recluster())
            _lap(update, "recluster", mark)
        return update

    def _replacing(self, tail: ReopenedTail, first: Turn) -> MemoryUpdate:
        """At the first close after a replay: what the earlier close of the same turns wrote goes, or is written
        back as this memory holds it (nothing has changed the state since the replay)."""
        held = {**self.evicted_pending, **self.events}
        return MemoryUpdate(
            retractions=[Retraction(tenant=first.tenant, conversation_id=first.conversation_id,
                                    event_ids=tail.retract_events, relation_ids=tail.retract_relations)],
            events=[held[event_id] for event_id in tail.restore_events if event_id in held],
            relations=[self.ledger.active[r] for r in tail.restore_relations if r in self.ledger.active])

    def _track(self, writes: list[Relation]) -> None:
        """Keep the adjacency total and the held relations' ends current; every change to the active relations
        is among the ledger's writes."""
        for written in writes:
            relation_id = written.relation_id
            current = self.ledger.active.get(relation_id)
            adjacent = current is not None and current.evidence in ADJACENCY_EVIDENCE
            if adjacent and relation_id not in self._adjacency:
                self._adjacency.add(relation_id)
                self.stats.adjacency_relations += 1
            elif not adjacent and relation_id in self._adjacency:
                self._adjacency.discard(relation_id)
                self.stats.adjacency_relations -= 1
            for end in (written.source, written.target):
                if current is not None:
                    self._incident.setdefault(end, set()).add(relation_id)
                elif end in self._incident:
                    self._incident[end].discard(relation_id)

    def _leave_window(self, event_id: str) -> None:
        """The event is no longer among the most recent: no relation can be proposed for it any more, so its
        relations are released from the ledger (both of a relation's events must be in the window for it to be
        proposed again or contradicted), and the event is forgotten unless its first clustering is still due.
        The caller takes it out of ``_index``."""
        released = self._incident.pop(event_id, set())
        for relation_id in released:
            relation = self.ledger.active[relation_id]
            other = relation.target if relation.source == event_id else relation.source
            self._incident.get(other, set()).discard(relation_id)
        self.ledger.release(released)
        self._adjacency -= released
        event = self.events.pop(event_id)
        if event_id in self.clusters.pending:
            self.evicted_pending[event_id] = event
        else:
            self.clusters.assignment.pop(event_id, None)

    def _recluster(self) -> MemoryUpdate:
        started = time.perf_counter()
        result = self._reclusterer.recluster(self.clusters, {**self.evicted_pending, **self.events})
        self.stats.recluster_runs += 1
        moved = []
        for event_id, cluster_id in result.moved.items():
            if event_id in self.events:
                event = self.events[event_id].model_copy(update={"cluster_id": cluster_id})
                self.events[event_id] = event
                self._index.put(event)
            else:
                event = self.evicted_pending[event_id].model_copy(update={"cluster_id": cluster_id})
            moved.append(event)
        # Now clustered and published, the events that had left the window are not needed any more.
        for event_id in self.evicted_pending:
            self.clusters.assignment.pop(event_id, None)
        self.evicted_pending = {}
        return MemoryUpdate(events=moved, clusters=result.clusters, reclustered=True,
                            recluster_seconds=[time.perf_counter() - started])


def _lap(update: MemoryUpdate, stage: str, since: float) -> float:
    now = time.perf_counter()
    update.stage_seconds[stage] += now - since
    return now
