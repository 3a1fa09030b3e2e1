"""The boundary detector compassmem used before its events followed topics, as the baseline that the topic
detector's effect on the event graph is measured against in the same run (``memory_report --compare-segmenters``).

It cut at a session change, a 30-minute gap, a third participant, 300 tokens, a time-shift phrase at the start of a
turn once the segment had 60 tokens, and otherwise where a turn's similarity to the open segment's centroid fell
0.15 below the mean of the last 12 such similarities (any below-mean turn past 160 tokens). Its own state (the
centroid sum and the similarity history) is kept here per conversation state, so the pipeline's SegmenterState is
used only for what both detectors share (the open turns and their tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from compassmem.core.models import Turn
from compassmem.processors.segmentation import (
    TIME_SHIFT_PHRASE,
    BoundaryDetector,
    BoundaryReason,
    Segment,
    SegmenterState,
    SegmentTurn,
)
from compassmem.text.text_features import count_tokens
from compassmem.processors.vectors import unit

SIMILARITY_DELTA = 0.15
SIMILARITY_HISTORY = 12
MIN_TOKENS = 60
SOFT_MAX_TOKENS = 160
HARD_MAX_TOKENS = 300
MAX_GAP = timedelta(minutes=30)
# The time-shift phrases (segmentation.TIME_SHIFT_PHRASE) are a rule both detectors have.


@dataclass
class _Drift:
    """What the previous detector kept besides the open turns: their embedding sum and the recent similarities."""

    open_sum: np.ndarray | None = None
    similarities: list[float] = field(default_factory=list)


class PreviousBoundaryDetector(BoundaryDetector):
    def __init__(self) -> None:
        super().__init__()
        self._drift: dict[int, _Drift] = {}

    def step(self, state: SegmenterState, turn: Turn, embedding: np.ndarray) -> list[Segment]:
        drift = self._drift.setdefault(id(state), _Drift())
        closed: list[Segment] = []
        if state.open_turns:
            reason, similarity = self._previous_boundary(state, drift, turn, embedding)
            if reason is not None:
                segment = self.close(state, reason)
                closed.extend([segment] if segment is not None else [])
                state.opened_by = reason
            elif similarity is not None:
                drift.similarities = [*drift.similarities, similarity][-SIMILARITY_HISTORY:]
        state.open_turns.append(SegmentTurn(turn=turn, embedding=embedding.tolist()))
        drift.open_sum = embedding.astype(np.float32) + (drift.open_sum if drift.open_sum is not None else 0.0)
        state.open_tokens += count_tokens(turn.indexed_text())
        return closed

    def close(self, state: SegmenterState, reason: BoundaryReason) -> Segment | None:
        if not state.open_turns:
            return None
        segment = Segment(turns=state.open_turns, boundary_reason=reason)
        state.open_turns = []
        state.open_tokens = 0
        self._drift.setdefault(id(state), _Drift()).open_sum = None
        return segment

    @staticmethod
    def _previous_boundary(state: SegmenterState, drift: _Drift, turn: Turn,
                           embedding: np.ndarray) -> tuple[BoundaryReason | None, float | None]:
        last = state.open_turns[-1].turn
        if turn.session_id != last.session_id:
            return BoundaryReason.SESSION, None
        if turn.timestamp - last.timestamp > MAX_GAP:
            return BoundaryReason.TIME_GAP, None
        speakers = {t.turn.speaker for t in state.open_turns}
        if len(speakers) >= 2 and turn.speaker not in speakers:
            return BoundaryReason.PARTICIPANTS, None
        if state.open_tokens + count_tokens(turn.indexed_text()) > HARD_MAX_TOKENS:
            return BoundaryReason.LENGTH, None
        if state.open_tokens >= MIN_TOKENS and TIME_SHIFT_PHRASE.search(turn.text):
            return BoundaryReason.TIME_SHIFT, None
        assert drift.open_sum is not None
        similarity = float(unit(drift.open_sum) @ embedding)
        mean = float(np.mean(drift.similarities)) if drift.similarities else similarity
        if state.open_tokens >= MIN_TOKENS and similarity < mean - SIMILARITY_DELTA:
            return BoundaryReason.SEMANTIC, similarity
        if state.open_tokens >= SOFT_MAX_TOKENS and similarity < mean:
            return BoundaryReason.SEMANTIC, similarity
        return None, similarity
