"""Event boundary detection (Event Segmentation Theory): cut the turn stream where the conversation moves on.

Streaming with one turn of look-ahead: the boundary before a turn is decided when the next turn arrives (or on
arrival, for the rules below that need no look-ahead), and a decision is final; the past is never re-segmented.
Until then the turn sits in the open segment like any other, so the open segment (what a stream processor shows
as a provisional event) always holds every turn received.

Rules, in order:

1. Hard boundaries, decided on arrival: a new session, a long silence (``max_gap``), a new participant once two
   have spoken, the length limit, and a time shift ("the next day", "last week", ...) past ``min_tokens``. At the
   length limit the pending boundary before the previous turn is taken instead when the rules below allow a cut
   there, so the limit does not part a question from its answer.
2. A helper's offer of more help ("Is there anything else I can help you with?") followed by a turn that is not a
   closing ("No, thanks"): the turn starts a new request. The offer itself closes the request before it.
3. A sentence opening with a topic-shift or new-request phrase ("By the way", "Speaking of", "Any plans for",
   "One more thing", "I also need", ...): the turn starts a new topic (not within the session's first two turns,
   which the topic-shift score below never parts either).
4. An answer continues its question: a turn after another speaker's question is never cut on meaning.
5. A comment continues what it comments on: a turn that opens with an anaphor or a reaction ("That's two more
   weeks of work", "Wow, congrats!") and asks nothing is not cut, until the segment passes ``soft_max_tokens``.
6. A topic-shift score: a logistic model over what the turns *say* on a short window around the candidate gap
   (the turn and the next against the two before the gap, the turn against the three before it), the depth of
   the similarity dip (how coherent the turns just before and just after the gap are, against the gap itself),
   shared content words, and the question structure (a new question opens a topic, one that points back with a
   pronoun or echoes what was said does not). Past ``soft_max_tokens`` the threshold falls to a quarter.
   With a ``BoundaryJudge`` (an LLM asked "does this turn start a new topic?", off by default), a probability
   within ``llm_band`` of the threshold, where the model is little better than chance, is decided by the judge's
   answer instead; no answer (a failure, an unclear reply, the conversation's budget spent) leaves the score's.

The embeddings compared are the ones the pipeline computes for retrieval, which carry the speaker and the date
(``Turn.search_text``): every turn of a session shares that part. The detector compares them after taking off a
share of the conversation's running mean (``centre_strength`` of an exponential moving average), which removes
most of what all turns share, so no second embedding per turn is needed.

The state is a pydantic model so a stream processor can keep it in a table and resume after a restart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Protocol

import numpy as np
from pydantic import BaseModel, Field

from compassmem.models import Turn
from compassmem.processors.text_features import (
    asks,
    count_tokens,
    ends_with_question,
    keyword_stems,
    offers_more_help,
    opener,
    question_cues,
    shift_marker,
)
from compassmem.processors.vectors import unit


class BoundaryReason(StrEnum):
    SESSION = "session_change"
    TIME_GAP = "time_gap"
    TIME_SHIFT = "time_shift"
    PARTICIPANTS = "participant_change"
    LENGTH = "length_limit"
    SEMANTIC = "semantic_shift"
    # The topic-shift score was uncertain and the boundary judge (an LLM) said the turn starts a new topic.
    JUDGED = "llm_topic_shift"
    MARKER = "topic_marker"
    NEW_REQUEST = "new_request"
    IDLE = "idle_close"
    END = "end_of_input"


# The topic-shift model: logistic regression over ``shift_features``, fitted on the `train` split of TIAGE
# (PersonaChat dialogues with human topic-shift labels) by `python -m benchmarks.segmentation --fit`, which prints
# these numbers; the turns were fed as the pipeline feeds them (search-text embeddings, two alternating speakers).
SHIFT_FEATURES: tuple[str, ...] = (
    "similarity_previous",       # the turn against the turn before it
    "similarity_left",           # the turn against the three turns before it
    "similarity_blocks",         # the turn and the next against the two turns before the gap
    "similarity_next_previous",  # the next turn against the turn before the gap
    "coherence_before",          # the two turns before the gap, against each other
    "coherence_after",           # the turn and the next, against each other
    "asks",                      # the turn asks something
    "new_question",              # ... and the turn before asked nothing
    "word_overlap",              # share of the turn's content words said in the two turns before
    "opening",                   # the turn is the third of its session (the first two are never cut on the score)
    "follow_up",                 # the turn's question points back ("Was it hard?", "Did you sand them?")
    "echo",                      # ... or echoes ("A golden retriever?")
    "asks_you",                  # ... or is asked of the other person ("Do you like ...?")
)
SHIFT_BIAS = -1.705
SHIFT_WEIGHTS: tuple[float, ...] = (-2.523, -1.059, -1.939, -0.693, 0.469, 0.601, 1.273, -0.142, -1.186, -1.229,
                                   -1.170, -0.556, 0.610)

# Turns of context the features read: three before the candidate turn, the turn, and the look-ahead turn.
CONTEXT_TURNS = 5
# A short reply to an offer of more help that ends the request instead of starting one.
_CLOSING = re.compile(r"\W*+(?:no|nope|nah|nothing|that'?s\s+(?:all|it|everything)|thanks|thank\s+you|thx|"
                      r"all\s+good|i'?m\s+(?:good|fine|all\s+set)|bye|goodbye)\b", re.IGNORECASE)


class SegmentationConfig(BaseModel):
    # Cut before a turn when the topic-shift model's probability reaches this (chosen on TIAGE train: the lowest
    # Pk with the number of cuts within 15% of the human count).
    shift_threshold: float = Field(default=0.30, ge=0.0, le=1.0)
    # Below this size a segment is not cut on a time-shift phrase ("the next day"): a story's own steps.
    min_tokens: int = Field(default=60, ge=0)
    # Past the soft limit the shift threshold falls (``soft_factor``); past the hard limit the segment always closes.
    soft_max_tokens: int = Field(default=160, ge=1)
    hard_max_tokens: int = Field(default=300, ge=1)
    max_gap: timedelta = timedelta(minutes=30)
    # The running mean taken off the embeddings before they are compared: its rate (an exponential moving average
    # over the conversation's turns) and the share of it subtracted.
    centre_rate: float = Field(default=0.1, gt=0.0, le=1.0)
    centre_strength: float = Field(default=0.7, ge=0.0, le=1.0)
    # A segment of fewer turns is not cut on the topic-shift score (markers and requests still cut it).
    min_turns: int = Field(default=1, ge=1)
    # Turns of a session before this index are not cut on the topic-shift score: the opening exchange.
    min_position: int = Field(default=2, ge=0)
    # Past ``soft_max_tokens`` the shift threshold is multiplied by this: a long segment ends at the first gap the
    # rules allow that shows some shift, rather than running on to the hard limit (which cuts anywhere).
    soft_factor: float = Field(default=0.25, ge=0.0, le=1.0)
    # With a boundary judge: probabilities closer than this to the threshold are the judge's to decide (the band
    # shrinks with the threshold past ``soft_max_tokens``). On TIAGE dev, 0.10 (0.20 to 0.40) holds 27% of the
    # gaps the score decides (12% of turns), where the score is right 53% of the time against 83% outside it.
    llm_band: float = Field(default=0.10, ge=0.0, le=1.0)
    # A conversation's judge calls stay within this share of its turns (one call per turn at most in any case).
    llm_max_share: float = Field(default=0.25, gt=0.0, le=1.0)


# Turns of the open segment the judge sees before the candidate turn.
JUDGE_CONTEXT_TURNS = 4


class BoundaryJudge(Protocol):
    """Says whether ``candidate`` starts a new topic after ``recent`` (the open segment's last turns, oldest
    first): True or False, or None when it has no answer (the topic-shift score then decides)."""

    def __call__(self, recent: Sequence[Turn], candidate: Turn) -> bool | None: ...


class JudgeCounts(BaseModel):
    """What the boundary judge did for one conversation (the memory report shows the totals)."""

    asked: int = 0
    cut: int = Field(default=0, description="answers that cut where the score alone would not have")
    kept: int = Field(default=0, description="answers that kept together what the score alone would have cut")
    agreed: int = 0
    no_answer: int = Field(default=0, description="failures and unclear replies: the score decided")
    over_budget: int = Field(default=0, description="uncertain gaps not asked: the conversation's share was spent")


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


class ContextTurn(BaseModel):
    """What the boundary decisions read of a recent turn (the last few of the session, whatever their segment)."""

    embedding: list[float]
    speaker: str
    session_id: str | None = None
    position: int = Field(description="the turn's index in its session (0 = first)")
    asks: bool
    ends_with_question: bool
    marker: str | None = None
    offers_help: bool = False
    closing: bool = False
    opener: str | None = None
    follow_up: bool = False
    echoes: bool = False
    asks_you: bool = False
    stems: list[str] = Field(default_factory=list)
    # Which turn this was, so that a redaction can take its stems (its words) out; None in a state written before.
    turn_id: str | None = None

    @classmethod
    def of(cls, turn: Turn, embedding: np.ndarray, position: int) -> ContextTurn:
        text = turn.text
        cues = question_cues(text)
        return cls(embedding=embedding.tolist(), speaker=turn.speaker, session_id=turn.session_id, position=position,
                   turn_id=turn.turn_id,
                   asks=asks(text),
                   ends_with_question=ends_with_question(text), marker=shift_marker(text),
                   offers_help=offers_more_help(text), closing=_CLOSING.match(text) is not None, opener=opener(text),
                   follow_up=cues.refers_back, echoes=cues.echoes, asks_you=cues.to_you,
                   stems=sorted(set(keyword_stems(text[:4096]))))


class SegmenterState(BaseModel):
    """Per-conversation state: the open segment, the recent turns and the running mean of the embeddings."""

    open_turns: list[SegmentTurn] = Field(default_factory=list)
    open_tokens: int = 0
    # Why the currently open segment was started; it becomes the closing reason's companion in stats.
    opened_by: BoundaryReason = BoundaryReason.SESSION
    # The boundary before the last open turn waits for the next turn (the look-ahead).
    pending: bool = False
    # Tokens of the open segment before its last turn (what the soft limit is judged on when the decision comes).
    pending_tokens: int = 0
    context: list[ContextTurn] = Field(default_factory=list)
    centre: list[float] | None = None
    centre_weight: float = 0.0
    # Turns received, and what the boundary judge did: its calls are bounded by a share of the turns.
    turns: int = 0
    judge: JudgeCounts = Field(default_factory=JudgeCounts)


# `\W*+` is possessive: every alternative after it starts with a word character, so giving back is useless
# (and, on a long run of punctuation and spaces, costly).
TIME_SHIFT_PHRASE = re.compile(
    r"^\W*+(?:so\s+|and\s+|anyway,?\s+|well,?\s+)?(?:the\s+next\s+(?:day|morning|week|month)|the\s+following\s+"
    r"(?:day|morning|week|month|year)|later\s+that\s+(?:day|night|week|month)|(?:a|one|two|three|four|five|six|"
    r"several|a\s+few|\d+)\s+(?:days?|weeks?|months?|years?)\s+later|fast[\s-]forward|since\s+(?:then|we\s+last)"
    r"|last\s+(?:week|weekend|month|year|night|friday|saturday|sunday|monday|tuesday|wednesday|thursday)|"
    r"yesterday|this\s+past\s+(?:week|weekend)|over\s+the\s+weekend)\b",
    re.IGNORECASE,
)


def _cos(left: np.ndarray, right: np.ndarray) -> float:
    denominator = float(np.linalg.norm(left) * np.linalg.norm(right))
    return float(left @ right) / denominator if denominator > 0 else 0.0


def shift_features(context: list[ContextTurn], following: ContextTurn, centre: np.ndarray | None) -> list[float]:
    """The features (``SHIFT_FEATURES``) of the gap before ``context[-1]``, with ``following`` as look-ahead.

    ``context`` ends with the candidate turn and holds at most three turns of its session before it (at least
    one); ``centre`` is the share of the running mean to take off every embedding.
    """
    turns = [*context[-4:], following]
    vectors = np.asarray([t.embedding for t in turns], dtype=np.float32)
    if centre is not None:
        vectors = vectors - centre
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    *before, here, after = list(vectors)
    turn, previous = turns[-2], turns[-3]
    earlier = before[-2] if len(before) >= 2 else before[-1]
    seen = set(previous.stems) | (set(turns[-4].stems) if len(turns) >= 4 else set())
    return [
        float(here @ before[-1]),
        _cos(here, np.sum(before, axis=0)),
        _cos(here + after, before[-1] + earlier),
        float(after @ before[-1]),
        float(before[-1] @ before[-2]) if len(before) >= 2 else 0.0,
        float(after @ here),
        float(turn.asks),
        float(turn.asks and not previous.asks),
        len(set(turn.stems) & seen) / (len(turn.stems) + 1),
        float(turn.position <= 2),
        float(turn.follow_up),
        float(turn.echoes),
        float(turn.asks_you),
    ]


def probability_of_shift(features: list[float]) -> float:
    score = SHIFT_BIAS + sum(w * f for w, f in zip(SHIFT_WEIGHTS, features, strict=True))
    return 1.0 / (1.0 + math.exp(-score))


class BoundaryDetector:
    def __init__(self, config: SegmentationConfig | None = None, judge: BoundaryJudge | None = None) -> None:
        self.config = config or SegmentationConfig()
        self.judge = judge

    def step(self, state: SegmenterState, turn: Turn, embedding: np.ndarray) -> list[Segment]:
        """Add one turn; return the segments it closed (at most two: one the look-ahead decided, one a hard
        boundary before this turn closed), oldest first. Mutates ``state``."""
        closed: list[Segment] = []
        state.turns += 1
        self._update_centre(state, embedding)
        hard: BoundaryReason | None = None
        if state.open_turns:
            hard = self._hard_boundary(state, turn)
            new_session = hard in {BoundaryReason.SESSION, BoundaryReason.TIME_GAP}
            position = 0 if new_session else state.context[-1].position + 1 if state.context else 0
            current = ContextTurn.of(turn, embedding, position)
            if state.pending:
                state.pending = False
                # At the length limit the pending boundary is taken if any rule allows it, rather than cutting
                # blindly before this turn; after a new session this turn is no look-ahead for the last one.
                forced = hard is BoundaryReason.LENGTH
                reason = self._decide(state, None if new_session else current, forced)
                if reason is not None:
                    closed.append(self._close_before_last(state, reason))
                    if forced:
                        hard = self._hard_boundary(state, turn)
            if hard is None and state.open_tokens >= self.config.min_tokens and TIME_SHIFT_PHRASE.search(turn.text):
                hard = BoundaryReason.TIME_SHIFT
            if hard is not None:
                segment = self.close(state, hard)
                if segment is not None:
                    closed.append(segment)
                state.opened_by = hard
                if new_session:
                    state.context = []
            else:
                state.pending = True
                state.pending_tokens = state.open_tokens
        else:  # the first turn, or the first after an idle close or the end of an input
            if state.context and state.context[-1].session_id != turn.session_id:
                state.context = []
            current = ContextTurn.of(turn, embedding, state.context[-1].position + 1 if state.context else 0)
        state.context = [*state.context[-(CONTEXT_TURNS - 2):], current]
        state.open_turns.append(SegmentTurn(turn=turn, embedding=embedding.tolist()))
        state.open_tokens += count_tokens(turn.indexed_text())
        return closed

    def close(self, state: SegmenterState, reason: BoundaryReason) -> Segment | None:
        """Close the open segment (boundary, idle timeout or end of input); None when nothing is open.

        A boundary still waiting for its look-ahead is decided as no boundary: the last turn stays."""
        if not state.open_turns:
            return None
        segment = Segment(turns=state.open_turns, boundary_reason=reason)
        state.open_turns = []
        state.open_tokens = 0
        state.pending = False
        return segment

    def _close_before_last(self, state: SegmenterState, reason: BoundaryReason) -> Segment:
        """Close the open segment without its last turn, which opens the next segment."""
        last = state.open_turns[-1]
        segment = Segment(turns=state.open_turns[:-1], boundary_reason=reason)
        state.open_turns = [last]
        state.open_tokens = count_tokens(last.turn.indexed_text())
        state.opened_by = reason
        return segment

    def _update_centre(self, state: SegmenterState, embedding: np.ndarray) -> None:
        rate = self.config.centre_rate
        previous = np.asarray(state.centre, dtype=np.float32) if state.centre is not None else 0.0
        state.centre = ((1 - rate) * previous + rate * embedding).tolist()
        state.centre_weight = (1 - rate) * state.centre_weight + rate

    def centre_offset(self, state: SegmenterState) -> np.ndarray | None:
        if state.centre is None or state.centre_weight <= 0:
            return None
        return np.asarray(state.centre, dtype=np.float32) * (self.config.centre_strength / state.centre_weight)

    def shift_probability(self, state: SegmenterState, following: ContextTurn) -> float:
        """The topic-shift model's probability for the boundary before the last open turn."""
        return probability_of_shift(shift_features(state.context, following, self.centre_offset(state)))

    def _hard_boundary(self, state: SegmenterState, turn: Turn) -> BoundaryReason | None:
        config = self.config
        last = state.open_turns[-1].turn
        if turn.session_id != last.session_id:
            return BoundaryReason.SESSION
        if turn.timestamp - last.timestamp > config.max_gap:
            return BoundaryReason.TIME_GAP
        speakers = {t.turn.speaker for t in state.open_turns}
        if len(speakers) >= 2 and turn.speaker not in speakers:
            return BoundaryReason.PARTICIPANTS
        if state.open_tokens + count_tokens(turn.indexed_text()) > config.hard_max_tokens:
            return BoundaryReason.LENGTH
        return None

    def _decide(self, state: SegmenterState, following: ContextTurn | None,
                forced: bool = False) -> BoundaryReason | None:
        """The boundary before the last open turn, now that ``following`` (None: no look-ahead) is known;
        ``forced``: the segment must close here or before the next turn (any allowed boundary is taken)."""
        context = state.context
        if len(context) < 2:
            return None
        turn, previous = context[-1], context[-2]
        if previous.offers_help and turn.speaker != previous.speaker and not turn.closing:
            return BoundaryReason.NEW_REQUEST
        if turn.marker is not None and turn.position >= 2:
            return BoundaryReason.MARKER
        if previous.ends_with_question and turn.speaker != previous.speaker:
            return None  # an answer continues its question
        if turn.offers_help:
            return None  # "Anything else I can help you with?" closes the request it follows
        long = forced or state.pending_tokens >= self.config.soft_max_tokens
        if turn.opener is not None and not turn.asks and not long:
            return None  # a comment on what was just said ("That's a lot of work", "Wow, congrats") continues it
        if forced:
            return BoundaryReason.LENGTH
        if (following is None or len(state.open_turns) - 1 < self.config.min_turns  # the turns before this one
                or turn.position < self.config.min_position):
            return None
        probability = self.shift_probability(state, following)
        scale = self.config.soft_factor if long else 1.0
        threshold = self.config.shift_threshold * scale
        shift = probability >= threshold
        if self.judge is not None and abs(probability - threshold) < self.config.llm_band * scale:
            verdict = self._ask_judge(state, self.judge)
            if verdict is not None:
                counts = state.judge
                counts.cut += int(verdict and not shift)
                counts.kept += int(shift and not verdict)
                counts.agreed += int(verdict == shift)
                return BoundaryReason.JUDGED if verdict else None
        return BoundaryReason.SEMANTIC if shift else None

    def _ask_judge(self, state: SegmenterState, judge: BoundaryJudge) -> bool | None:
        """The judge's answer for the boundary before the last open turn, within the conversation's budget."""
        counts = state.judge
        if counts.asked >= max(1.0, self.config.llm_max_share * state.turns):
            counts.over_budget += 1
            return None
        counts.asked += 1
        recent = [t.turn for t in state.open_turns[-JUDGE_CONTEXT_TURNS - 1:-1]]
        verdict = judge(recent, state.open_turns[-1].turn)
        counts.no_answer += int(verdict is None)
        return verdict
