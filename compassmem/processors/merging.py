"""Event merging: a new segment that repeats an existing event is folded into it instead of duplicating it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, Field

from compassmem.core.models import Event
from compassmem.processors.event_index import EventIndex
from compassmem.processors.relations import KeywordStats
from compassmem.processors.segmentation import BoundaryReason, Segment
from compassmem.text.text_features import entities, jaccard, keyword_stems, weighted_overlap


class MergeReason(StrEnum):
    NEAR_DUPLICATE = "near_duplicate"
    KEYWORD_OVERLAP = "keyword_overlap"
    CONTINUATION = "continuation"


class MergeConfig(BaseModel):
    # Cosine of segment centroid to an event of the same participants; the design's 0.85 merged ordinary
    # small talk of different sessions on the development data, so the default is stricter.
    duplicate_cosine: float = Field(default=0.9, ge=0.0, le=1.0)
    # Embeddings carry speaker and tone, so two chats of the same friends look alike ("thanks, your support means
    # a lot"); a repeat must also say the same things: this share of the smaller keyword set in common, each stem
    # weighted by its IDF over the conversation's events, so that shared small talk counts for little.
    duplicate_min_overlap: float = Field(default=0.5, ge=0.0, le=1.0)
    consecutive_jaccard: float = Field(default=0.7, ge=0.0, le=1.0)
    continuation_gap: timedelta = timedelta(minutes=2)


class MergeDecision(BaseModel):
    target_event_id: str
    reason: MergeReason
    score: float


class EventMerger:
    def __init__(self, config: MergeConfig | None = None) -> None:
        self.config = config or MergeConfig()

    def decide(
        self, segment: Segment, previous: Event | None, candidates: list[tuple[Event, float]],
        keyword_stats: KeywordStats,
    ) -> MergeDecision | None:
        """``previous``: the conversation's latest event; ``candidates``: (event, cosine) nearest to the segment;
        ``keyword_stats``: document frequencies of the conversation's keywords so far."""
        participants = sorted({t.turn.speaker for t in segment.turns})
        stems = [s for t in segment.turns for s in keyword_stems(t.turn.indexed_text())]
        for event, cosine in candidates:
            if (cosine >= self.config.duplicate_cosine and event.participants == participants
                    and weighted_overlap(stems, event.keywords, keyword_stats.idf) >= self.config.duplicate_min_overlap):
                return MergeDecision(target_event_id=event.event_id, reason=MergeReason.NEAR_DUPLICATE, score=cosine)
        if previous is None:
            return None
        overlap = jaccard(stems, previous.keywords)
        if overlap > self.config.consecutive_jaccard:
            return MergeDecision(
                target_event_id=previous.event_id, reason=MergeReason.KEYWORD_OVERLAP, score=overlap
            )
        if self._continues(segment, previous):
            return MergeDecision(target_event_id=previous.event_id, reason=MergeReason.CONTINUATION, score=1.0)
        return None

    def _continues(self, segment: Segment, previous: Event) -> bool:
        """The same speaker goes on about the same named thing right after the previous event ended."""
        if segment.boundary_reason in {BoundaryReason.SESSION, BoundaryReason.TIME_GAP, BoundaryReason.TIME_SHIFT}:
            return False
        last = previous.observations[-1]
        first = segment.first
        if first.speaker != last.speaker or first.timestamp - last.timestamp > self.config.continuation_gap:
            return False
        return bool(set(entities(first.text)) & set(previous.entities))


def nearest_events(events: Sequence[Event] | EventIndex, vector: np.ndarray,
                   limit: int = 5) -> list[tuple[Event, float]]:
    """Exact cosine nearest neighbours among a conversation's events (unit vectors: dot product).

    Given an ``EventIndex``, its appended matrix is searched instead of building one from every event: the same
    rows in the same order, so the same scores and the same order of ties.
    """
    if isinstance(events, EventIndex):
        if not events.regular:
            return nearest_events(events.events, vector, limit)
        index, events = events, events.events
        if not events:
            return []
        scores = index.scores(slice(0, len(events)), vector)
    else:
        if not events:
            return []
        matrix = np.asarray([e.embedding for e in events], dtype=np.float32)
        scores = matrix @ vector
    order = np.argsort(-scores)[:limit]
    return [(events[i], float(scores[i])) for i in order]
