"""Event boundary detection (Event Segmentation Theory): cut the turn stream where prediction breaks.

Incremental: each turn is decided on arrival against the open segment and a bounded window of recent
similarities; the past is never re-segmented. The state is a pydantic model so a stream processor can keep
it in a table and resume after a restart.
"""

from __future__ import annotations

import re
from datetime import timedelta
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, Field

from compassmem.processors.vectors import unit
from compassmem.models import Turn
from compassmem.processors.text_features import count_tokens


class BoundaryReason(StrEnum):
    SESSION = "session_change"
    TIME_GAP = "time_gap"
    TIME_SHIFT = "time_shift"
    PARTICIPANTS = "participant_change"
    LENGTH = "length_limit"
    SEMANTIC = "semantic_shift"
    IDLE = "idle_close"
    END = "end_of_input"


class SegmentationConfig(BaseModel):
    # Cut when the turn's similarity to the open segment falls below (mean of recent similarities - delta).
    similarity_delta: float = Field(default=0.15, ge=0.0, le=1.0)
    similarity_history: int = Field(default=12, ge=1)
    # Below this size a segment is not cut on semantics: single turns are too noisy to judge a shift.
    min_tokens: int = Field(default=60, ge=0)
    # Past the soft limit any below-average similarity cuts; past the hard limit the segment always closes.
    soft_max_tokens: int = Field(default=160, ge=1)
    hard_max_tokens: int = Field(default=300, ge=1)
    max_gap: timedelta = timedelta(minutes=30)


class SegmentTurn(BaseModel):
    turn: Turn
    embedding: list[float]


class Segment(BaseModel):
    """A closed run of turns: the raw material of one event."""

    turns: list[SegmentTurn]
    boundary_reason: BoundaryReason

    @property
    def first(self) -> Turn:
        return self.turns[0].turn

    def centroid(self) -> np.ndarray:
        return unit(np.mean(np.asarray([t.embedding for t in self.turns], dtype=np.float32), axis=0))


class SegmenterState(BaseModel):
    """Per-conversation state: the open segment and the recent similarity window."""

    open_turns: list[SegmentTurn] = Field(default_factory=list)
    open_sum: list[float] | None = None
    open_tokens: int = 0
    recent_similarities: list[float] = Field(default_factory=list)
    # Why the currently open segment was started; it becomes the closing reason's companion in stats.
    opened_by: BoundaryReason = BoundaryReason.SESSION


# `\W*+` is possessive: every alternative after it starts with a word character, so giving back is useless
# (and, on a long run of punctuation and spaces, costly).
_TIME_SHIFT = re.compile(
    r"^\W*+(?:so\s+|and\s+|anyway,?\s+|well,?\s+)?(?:the\s+next\s+(?:day|morning|week|month)|the\s+following\s+"
    r"(?:day|morning|week|month|year)|later\s+that\s+(?:day|night|week|month)|(?:a|one|two|three|four|five|six|"
    r"several|a\s+few|\d+)\s+(?:days?|weeks?|months?|years?)\s+later|fast[\s-]forward|since\s+(?:then|we\s+last)"
    r"|last\s+(?:week|weekend|month|year|night|friday|saturday|sunday|monday|tuesday|wednesday|thursday)|"
    r"yesterday|this\s+past\s+(?:week|weekend)|over\s+the\s+weekend)\b",
    re.IGNORECASE,
)



class BoundaryDetector:
    def __init__(self, config: SegmentationConfig | None = None) -> None:
        self.config = config or SegmentationConfig()

    def step(self, state: SegmenterState, turn: Turn, embedding: np.ndarray) -> Segment | None:
        """Add one turn; return the segment it closed, if it started a new one. Mutates ``state``."""
        closed: Segment | None = None
        if state.open_turns:
            reason, similarity = self._boundary(state, turn, embedding)
            if reason is not None:
                closed = self.close(state, reason)
                state.opened_by = reason
            elif similarity is not None:
                history = state.recent_similarities
                history.append(similarity)
                del history[: max(0, len(history) - self.config.similarity_history)]
        self._append(state, turn, embedding)
        return closed

    def close(self, state: SegmenterState, reason: BoundaryReason) -> Segment | None:
        """Close the open segment (boundary, idle timeout or end of input); None when nothing is open."""
        if not state.open_turns:
            return None
        segment = Segment(turns=state.open_turns, boundary_reason=reason)
        state.open_turns = []
        state.open_sum = None
        state.open_tokens = 0
        return segment

    def _append(self, state: SegmenterState, turn: Turn, embedding: np.ndarray) -> None:
        state.open_turns.append(SegmentTurn(turn=turn, embedding=embedding.tolist()))
        current = np.asarray(state.open_sum, dtype=np.float32) if state.open_sum is not None else 0.0
        state.open_sum = (current + embedding).tolist()
        state.open_tokens += count_tokens(turn.indexed_text())

    def _boundary(
        self, state: SegmenterState, turn: Turn, embedding: np.ndarray
    ) -> tuple[BoundaryReason | None, float | None]:
        config = self.config
        last = state.open_turns[-1].turn
        if turn.session_id != last.session_id:
            return BoundaryReason.SESSION, None
        if turn.timestamp - last.timestamp > config.max_gap:
            return BoundaryReason.TIME_GAP, None
        speakers = {t.turn.speaker for t in state.open_turns}
        if len(speakers) >= 2 and turn.speaker not in speakers:
            return BoundaryReason.PARTICIPANTS, None
        tokens = count_tokens(turn.indexed_text())
        if state.open_tokens + tokens > config.hard_max_tokens:
            return BoundaryReason.LENGTH, None
        if state.open_tokens >= config.min_tokens and _TIME_SHIFT.search(turn.text):
            return BoundaryReason.TIME_SHIFT, None
        centroid = unit(np.asarray(state.open_sum, dtype=np.float32))
        similarity = float(centroid @ embedding)
        history = state.recent_similarities
        mean = float(np.mean(history)) if history else similarity
        if state.open_tokens >= config.min_tokens and similarity < mean - config.similarity_delta:
            return BoundaryReason.SEMANTIC, similarity
        if state.open_tokens >= config.soft_max_tokens and similarity < mean:
            return BoundaryReason.SEMANTIC, similarity
        return None, similarity
