"""Event boundary detection (Event Segmentation Theory): cut the turn stream where the conversation moves on. An event
is a topic between peers and a request where one party helps (a service chat, a user with an assistant).

Streaming with one turn of look-ahead: the boundary before a turn is decided when the next turn arrives (or on
arrival, for the rules below that need no look-ahead), and a decision is final; the past is never re-segmented.
Until then the turn sits in the open segment like any other, so the open segment (what a stream processor shows
as a provisional event) always holds every turn received.

Who helps is learnt per session, from the turns so far: a speaker named as an assistant (``HELPER_NAMES``), one who
offers more help ("Anything else I can help you with?") without having opened the session, one who sees the other
off after their thanks, or one who answers the session's opening request.

Rules, in order:

1. Hard boundaries, decided on arrival: a new session, a long silence (``max_gap``), a new participant once two
   have spoken, the length limit, and a time shift ("the next day", "last week", ...) past ``min_tokens``. The
   limits count each turn's tokens up to ``turn_token_cap`` (what the embedder reads of it) and scale with the
   conversation's mean turn; the hard limit never cuts before a helper's turn, and at the limit the pending boundary
   before the previous turn is taken instead when the rules below allow a cut there, so the limit does not part a
   question from its answer.
2. A helper's turn never opens an event: it answers the request it follows.
3. A resolution ("Have a great day!", "You're welcome") followed by a turn that is not a closing ("No, thanks"):
   the turn starts a new request.
4. A helper's offer of more help followed by a turn that asks for something of its own and does not point back
   ("Yes, I need to change my address"): a new request.
5. A sentence opening with a topic-shift or new-request phrase ("By the way", "Speaking of", "Any plans for",
   "One more thing", "I also need", ...): the turn starts a new topic (not within the session's first two turns).
6. Between peers: an answer continues its question (a turn after another speaker's question is never cut on
   meaning), and a comment continues what it comments on (a turn that opens with an anaphor or a reaction and asks
   nothing, until the segment passes the soft limit).
7. A score: with a helper, the request model (``REQUEST_FEATURES``: is the other party's turn a new request or a
   follow-up, a clarification, a confirmation, thanks?); between peers, the topic-shift model (``SHIFT_FEATURES``:
   what the turns *say* on a short window around the gap, the depth of the similarity dip, shared content words,
   question structure). Past the soft limit (peers only) the threshold falls to a quarter. With a
   ``BoundaryJudge`` (an LLM asked "does this turn start a new topic?", off by default), a probability within
   ``llm_band`` of the threshold, where the model is little better than chance, is decided by the judge's answer
   instead; no answer (a failure, an unclear reply, the conversation's budget spent) leaves the score's.

The embeddings compared are the ones the pipeline computes for retrieval, which carry the speaker and the date
(``Turn.search_text``): every turn of a session shares that part. The detector compares them after taking off a
share of the conversation's running mean (``centre_strength`` of an exponential moving average), which removes
most of what all turns share, so no second embedding per turn is needed. The request model also reads its
similarities relative to the conversation's own (``RunningMoments``): a chat whose requests all concern one
project is similar throughout, and what marks a new request there is a dip below its usual.

Why it is built this way, with the measurements: ``docs/decisions/001-event-boundaries.md``.

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

from compassmem.core.models import Turn
from compassmem.text.text_features import (
    asks,
    closes,
    continues,
    count_tokens,
    ends_with_question,
    keyword_stems,
    makes_request,
    offers_more_help,
    opener,
    question_cues,
    resolves_request,
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


# The topic-shift model: logistic regression over ``shift_features``, fitted on the gaps it decides in the `train`
# splits of TIAGE (PersonaChat dialogues with human topic-shift labels) and of the joined task dialogues (their
# turns before a helper is known) by `python -m benchmarks.segmentation --fit`, which prints these numbers; the turns
# were fed as the pipeline feeds them (search-text embeddings, two alternating speakers).
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
SHIFT_BIAS = -1.815
SHIFT_WEIGHTS: tuple[float, ...] = (-1.282, -1.186, -1.621, -0.758, 0.419, 0.344, 0.725, -0.130, -1.964, -0.831,
                                    -1.216, -0.301, 0.983)

# The request model: logistic regression over ``request_features``, for a requester's turn in a conversation where
# the other party helps (a service chat, a user with an assistant): does the turn start a new request, or follow up
# on the open one? Fitted on the `train` splits of the joined task dialogues and the assistant chats by
# `python -m benchmarks.segmentation --fit`, which prints these numbers.
REQUEST_FEATURES: tuple[str, ...] = (
    "similarity_previous",       # the turn against the turn before it (the helper's answer)
    "similarity_left",           # the turn against the three turns before it
    "similarity_blocks",         # the turn and the next against the two turns before the gap
    "similarity_request",        # the turn against the turn that opened the open event (its request)
    "length_relative",           # log of the turn's tokens over the opening request's (a follow-up is short)
    "asks",                      # the turn asks something
    "makes_request",             # ... or asks for something early on ("Can you help me find ...", "I need ...")
    "follow_up",                 # its question points back ("What if it fails?")
    "reacts",                    # it opens with a reaction ("Thanks!", "Great", "Yes")
    "refers",                    # it opens with an anaphor ("That works", "It still fails")
    "continues",                 # it carries on ("hmm, what if ...", "But what about ...")
    "word_overlap",              # share of its content words said in the two turns before
    "after_offer",               # the helper offered more help just before ("Anything else?")
    "after_question",            # the helper's turn before it ended on a question ("Which city?")
    "resolving",                 # the session has closed a request aloud ("That's all." -> "Have a great day!")
    # The same similarities and word overlap relative to this conversation's own: their z-scores against the
    # requester's earlier turns (a chat whose requests all concern one project is similar throughout).
    "similarity_previous_relative",
    "similarity_left_relative",
    "similarity_blocks_relative",
    "similarity_request_relative",
    "word_overlap_relative",
)
# Which request features are also read relative to the conversation (their indices).
RELATIVE_REQUEST_FEATURES = tuple(REQUEST_FEATURES.index(name) for name in (
    "similarity_previous", "similarity_left", "similarity_blocks", "similarity_request", "word_overlap"))
REQUEST_BIAS = -1.198
REQUEST_WEIGHTS: tuple[float, ...] = (-3.011, -4.121, -1.250, -1.221, 0.292, 0.014, 2.259, 0.407, -7.533, -5.961,
                                      -7.819, 6.635, -0.830, -1.536, -4.514, 0.315, 0.424, 0.170, 0.264, -0.993)

# Turns of context the features read: three before the candidate turn, the turn, and the look-ahead turn.
CONTEXT_TURNS = 5
# Speaker names of a party that answers rather than asks: in a chat with one of these, its turns never open an event.
HELPER_NAMES = frozenset({"assistant", "ai", "ai assistant", "bot", "chatbot", "agent", "system", "model", "support"})


class SegmentationConfig(BaseModel):
    # Cut before a turn when the topic-shift model's probability reaches this (chosen on TIAGE train: the lowest
    # Pk with the number of cuts within 15% of the human count).
    shift_threshold: float = Field(default=0.30, ge=0.0, le=1.0)
    # Cut before a requester's turn when the request model's probability reaches this.
    request_threshold: float = Field(default=0.55, ge=0.0, le=1.0)
    # Below this size a segment is not cut on a time-shift phrase ("the next day"): a story's own steps.
    min_tokens: int = Field(default=60, ge=0)
    # Past the soft limit the shift threshold falls (``soft_factor``); past the hard limit the segment closes at the
    # first gap the rules allow. Each limit is the larger of its tokens and its turns times the conversation's mean
    # turn: an event holds about as many turns of a chat of long messages as of short ones.
    soft_max_tokens: int = Field(default=160, ge=1)
    hard_max_tokens: int = Field(default=300, ge=1)
    soft_max_turns: float = Field(default=5.0, ge=1.0)
    hard_max_turns: float = Field(default=10.0, ge=1.0)
    # Where a helper is known, the hard limit is this many times higher and the soft one is off: the requests bound
    # the events.
    request_max_factor: float = Field(default=2.0, ge=1.0)
    # A turn counts towards the limits and the mean with at most this many tokens: what the embedder reads of it
    # (a 3,000-word answer is embedded as its first 256 word pieces and summarised from its first sentences).
    turn_token_cap: int = Field(default=256, ge=1)
    max_gap: timedelta = timedelta(minutes=30)
    # The running mean taken off the embeddings before they are compared: its rate (an exponential moving average
    # over the conversation's turns) and the share of it subtracted.
    centre_rate: float = Field(default=0.1, gt=0.0, le=1.0)
    centre_strength: float = Field(default=0.7, ge=0.0, le=1.0)
    # For the request model, that share grows to the full one over the conversation's first this many turns.
    centre_turns: int = Field(default=8, ge=1)
    # A segment of fewer turns is not cut on the topic-shift score (markers and requests still cut it).
    min_turns: int = Field(default=1, ge=1)
    # Turns of a session before this index are not cut on the topic-shift score: the opening exchange.
    min_position: int = Field(default=2, ge=0)
    # Past ``soft_max_tokens`` the shift threshold is multiplied by this: a long segment ends at the first gap the
    # rules allow that shows some shift, rather than running on to the hard limit (which cuts anywhere).
    soft_factor: float = Field(default=0.25, ge=0.0, le=1.0)
    # With a boundary judge: probabilities closer than this to the threshold are the judge's to decide (the band
    # shrinks with the threshold past ``soft_max_tokens``): docs/decisions/009-llm-boundary-band.md.
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
    # A farewell or the acknowledgement of thanks ("Have a great day!", "You're welcome"): the request is resolved.
    resolves: bool = False
    # Asks for something of its own early on ("Can you help me find ...", "I need a taxi").
    requests: bool = False
    opener: str | None = None
    # Opens by carrying on from what was said ("hmm, what if ...", "So ...", "But what about ...").
    continues: bool = False
    follow_up: bool = False
    echoes: bool = False
    asks_you: bool = False
    stems: list[str] = Field(default_factory=list)
    # The turn's tokens as the limits count them (at most ``turn_token_cap``).
    tokens: int = 0
    # Which turn this was, so that a redaction can take its stems (its words) out; None in a state written before.
    turn_id: str | None = None

    @classmethod
    def of(cls, turn: Turn, embedding: np.ndarray, position: int, tokens: int) -> ContextTurn:
        text = turn.text
        cues = question_cues(text)
        return cls(embedding=embedding.tolist(), speaker=turn.speaker, session_id=turn.session_id, position=position,
                   turn_id=turn.turn_id, tokens=tokens,
                   asks=asks(text),
                   ends_with_question=ends_with_question(text), marker=shift_marker(text),
                   offers_help=offers_more_help(text), closing=closes(text), resolves=resolves_request(text),
                   requests=makes_request(text), opener=opener(text), continues=continues(text),
                   follow_up=cues.refers_back, echoes=cues.echoes, asks_you=cues.to_you,
                   stems=sorted(set(keyword_stems(text[:4096]))))


# How fast the running statistics follow a long conversation, and the least variance they divide by.
MOMENTS_RATE = 0.05
MOMENTS_MIN_VAR = 0.05 ** 2


class RunningMoments(BaseModel):
    """Running means and variances of a few values over a conversation: a plain average over the first turns, an
    exponential one (``MOMENTS_RATE``) later, so that a long conversation's drift is followed."""

    count: int = 0
    mean: list[float] = Field(default_factory=list)
    var: list[float] = Field(default_factory=list)

    def relative(self, values: Sequence[float]) -> list[float]:
        """The values' z-scores against those seen before (0 until two were seen); then takes them in."""
        if self.count < 2:
            scores = [0.0] * len(values)
        else:
            scores = [(v - m) / math.sqrt(max(var, MOMENTS_MIN_VAR)) for v, m, var in
                      zip(values, self.mean, self.var, strict=True)]
        self.count += 1
        if self.count == 1:
            self.mean, self.var = list(values), [0.0] * len(values)
        else:
            rate = max(1.0 / self.count, MOMENTS_RATE)
            deltas = [v - m for v, m in zip(values, self.mean, strict=True)]
            self.mean = [m + rate * d for m, d in zip(self.mean, deltas, strict=True)]
            self.var = [(1 - rate) * (var + rate * d * d) for var, d in zip(self.var, deltas, strict=True)]
        return scores


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
    # Tokens of every turn received (each at most ``turn_token_cap``): the conversation's mean turn sets the limits.
    token_total: int = 0
    # The party that helps (an assistant, a service agent), once known: its turns answer and never open an event,
    # and the other party's turns are decided by the request model.
    helper: str | None = None
    # Who spoke first in the current session, and whether the session has closed a request aloud ("That's all,
    # thanks." -> "Have a great day!"): a conversation that does starts few requests without such a closing.
    session_opener: str | None = None
    resolving: bool = False
    # The requester's turns so far, as the request model's relative features read them.
    request_moments: RunningMoments = Field(default_factory=RunningMoments)


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


def _centred(embeddings: Sequence[Sequence[float]], centre: np.ndarray | None) -> np.ndarray:
    """The embeddings less ``centre``, each scaled to unit length (one row each)."""
    vectors = np.asarray(embeddings, dtype=np.float32)
    if centre is not None:
        vectors = vectors - centre
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)


def _word_overlap(turn: ContextTurn, before: Sequence[ContextTurn]) -> float:
    """The share of the turn's content words said in ``before``."""
    seen = set().union(*(t.stems for t in before))
    return len(set(turn.stems) & seen) / (len(turn.stems) + 1)


def shift_features(context: list[ContextTurn], following: ContextTurn, centre: np.ndarray | None) -> list[float]:
    """The features (``SHIFT_FEATURES``) of the gap before ``context[-1]``, with ``following`` as look-ahead.

    ``context`` ends with the candidate turn and holds at most three turns of its session before it (at least
    one); ``centre`` is the share of the running mean to take off every embedding.
    """
    turns = [*context[-4:], following]
    *before, here, after = list(_centred([t.embedding for t in turns], centre))
    turn, previous = turns[-2], turns[-3]
    return [
        *_against_before(here, after, before),
        float(after @ before[-1]),
        float(before[-1] @ before[-2]) if len(before) >= 2 else 0.0,
        float(after @ here),
        float(turn.asks),
        float(turn.asks and not previous.asks),
        _word_overlap(turn, turns[-4:-2]),
        float(turn.position <= 2),
        float(turn.follow_up),
        float(turn.echoes),
        float(turn.asks_you),
    ]


def _against_before(here: np.ndarray, after: np.ndarray, before: list[np.ndarray]) -> list[float]:
    """The turn against what came before it: the previous turn, all of them, and (with the next turn) the last two."""
    earlier = before[-2] if len(before) >= 2 else before[-1]
    return [float(here @ before[-1]), _cos(here, np.sum(before, axis=0)), _cos(here + after, before[-1] + earlier)]


def request_features(context: list[ContextTurn], following: ContextTurn, request: SegmentTurn, request_tokens: int,
                     resolving: bool, centre: np.ndarray | None) -> list[float]:
    """The features (``REQUEST_FEATURES``) of the gap before ``context[-1]``, a requester's turn, with ``following``
    as look-ahead; ``request`` is the open event's first turn (``request_tokens`` long), ``resolving`` whether the
    session has closed a request aloud."""
    turns = [*context[-4:], following]
    *before, here, after, opening = list(_centred([*(t.embedding for t in turns), request.embedding], centre))
    turn, previous = turns[-2], turns[-3]
    return [
        *_against_before(here, after, before),
        float(here @ opening),
        math.log((turn.tokens + 1) / (request_tokens + 1)),
        float(turn.asks),
        float(turn.requests),
        float(turn.follow_up),
        float(turn.opener == "reacts"),
        float(turn.opener == "refers"),
        float(turn.continues),
        _word_overlap(turn, turns[-4:-2]),
        float(previous.offers_help),
        float(previous.ends_with_question),
        float(resolving),
    ]


def _logistic(bias: float, weights: Sequence[float], features: Sequence[float]) -> float:
    score = bias + sum(w * f for w, f in zip(weights, features, strict=True))
    return 1.0 / (1.0 + math.exp(-score))


def probability_of_shift(features: list[float]) -> float:
    return _logistic(SHIFT_BIAS, SHIFT_WEIGHTS, features)


def probability_of_request(features: list[float]) -> float:
    return _logistic(REQUEST_BIAS, REQUEST_WEIGHTS, features)


class BoundaryDetector:
    def __init__(self, config: SegmentationConfig | None = None, judge: BoundaryJudge | None = None) -> None:
        self.config = config or SegmentationConfig()
        self.judge = judge

    def step(self, state: SegmenterState, turn: Turn, embedding: np.ndarray) -> list[Segment]:
        """Add one turn; return the segments it closed (at most two: one the look-ahead decided, one a hard
        boundary before this turn closed), oldest first. Mutates ``state``."""
        closed: list[Segment] = []
        tokens = self._tokens(turn)
        state.turns += 1
        state.token_total += tokens
        self._update_centre(state, embedding)
        hard: BoundaryReason | None = None
        if state.open_turns:
            hard = self._hard_boundary(state, turn, tokens)
            new_session = hard in {BoundaryReason.SESSION, BoundaryReason.TIME_GAP}
            position = 0 if new_session else state.context[-1].position + 1 if state.context else 0
            current = ContextTurn.of(turn, embedding, position, tokens)
            if state.pending:
                state.pending = False
                # At the length limit the pending boundary is taken if any rule allows it, rather than cutting
                # blindly before this turn; after a new session this turn is no look-ahead for the last one.
                forced = hard is BoundaryReason.LENGTH
                reason = self._decide(state, None if new_session else current, forced)
                if reason is not None:
                    closed.append(self._close_before_last(state, reason))
                    if forced:
                        hard = self._hard_boundary(state, turn, tokens)
            if hard is None and state.open_tokens >= self.config.min_tokens and TIME_SHIFT_PHRASE.search(turn.text):
                hard = BoundaryReason.TIME_SHIFT
            if hard is not None:
                segment = self.close(state, hard)
                if segment is not None:
                    closed.append(segment)
                state.opened_by = hard
                if new_session:
                    state.context = []
                    state.helper = None  # learnt again: an offer among friends in one session binds no other
            else:
                state.pending = True
                state.pending_tokens = state.open_tokens
        else:  # the first turn, or the first after an idle close or the end of an input
            if state.context and state.context[-1].session_id != turn.session_id:
                state.context = []
                state.helper = None
            current = ContextTurn.of(turn, embedding, state.context[-1].position + 1 if state.context else 0, tokens)
        state.context = [*state.context[-(CONTEXT_TURNS - 2):], current]
        state.open_turns.append(SegmentTurn(turn=turn, embedding=embedding.tolist()))
        state.open_tokens += tokens
        self._learn_helper(state, current)
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

    def _tokens(self, turn: Turn) -> int:
        return min(count_tokens(turn.indexed_text()), self.config.turn_token_cap)

    def _close_before_last(self, state: SegmenterState, reason: BoundaryReason) -> Segment:
        """Close the open segment without its last turn, which opens the next segment."""
        last = state.open_turns[-1]
        segment = Segment(turns=state.open_turns[:-1], boundary_reason=reason)
        state.open_turns = [last]
        state.open_tokens = self._tokens(last.turn)
        state.opened_by = reason
        return segment

    @staticmethod
    def _learn_helper(state: SegmenterState, turn: ContextTurn) -> None:
        """Who helps: a speaker named as an assistant; one who offers more help ("Anything else I can help you
        with?") and did not open the session (the one who did, asking "Anything else?", wants more options); one who
        sees the other off ("That's all, thanks." -> "Have a great day!"); one who answers a session's opening request
        ("Can you help me find a dentist?"). Also notes whether the session closes its requests aloud."""
        if turn.position == 0:
            state.session_opener = turn.speaker
            state.resolving = False
        previous = state.context[-2] if len(state.context) >= 2 else None
        answers = previous is not None and previous.speaker != turn.speaker
        sees_off = turn.resolves and answers and previous is not None and previous.closing
        if (turn.speaker.casefold() in HELPER_NAMES
                or (turn.offers_help and turn.speaker != state.session_opener)
                or sees_off
                or (turn.position == 1 and answers and previous is not None and previous.requests)):
            state.helper = turn.speaker
        state.resolving = state.resolving or sees_off

    def _update_centre(self, state: SegmenterState, embedding: np.ndarray) -> None:
        rate = self.config.centre_rate
        previous = np.asarray(state.centre, dtype=np.float32) if state.centre is not None else 0.0
        state.centre = ((1 - rate) * previous + rate * embedding).tolist()
        state.centre_weight = (1 - rate) * state.centre_weight + rate

    def centre_offset(self, state: SegmenterState, ramp: bool = False) -> np.ndarray | None:
        """The share of the running mean to take off the embeddings; with ``ramp`` (the request model's), a share
        that grows over the conversation's first ``centre_turns`` turns."""
        if state.centre is None or state.centre_weight <= 0:
            return None
        # The mean of a chat's first few turns is mostly those turns themselves: taken off whole, it sets a short
        # question and its long answer against each other.
        share = min(1.0, state.turns / self.config.centre_turns) if ramp else 1.0
        return np.asarray(state.centre, dtype=np.float32) * (self.config.centre_strength * share / state.centre_weight)

    def limits(self, state: SegmenterState) -> tuple[float, float]:
        """The soft and hard token limits of this conversation's events (see ``SegmentationConfig``). Where a
        helper is known the requests bound the events: no soft limit, and the hard one ``request_max_factor`` times
        higher."""
        config = self.config
        mean = state.token_total / max(1, state.turns)
        hard = max(config.hard_max_tokens, config.hard_max_turns * mean)
        if state.helper is not None:
            return math.inf, hard * config.request_max_factor
        return max(config.soft_max_tokens, config.soft_max_turns * mean), hard

    def shift_probability(self, state: SegmenterState, following: ContextTurn) -> float:
        """The probability that the last open turn starts a new event: the request model's for a requester's turn
        once a helper is known, the topic-shift model's otherwise."""
        by_request, features = self.features(state, following)
        return probability_of_request(features) if by_request else probability_of_shift(features)

    def features(self, state: SegmenterState, following: ContextTurn) -> tuple[bool, list[float]]:
        """Whether the request model decides the gap before the last open turn, and that model's features; the
        request model's turn is taken into the conversation's running statistics (call once per decided gap)."""
        if state.helper is None:
            return False, shift_features(state.context, following, self.centre_offset(state))
        request = state.open_turns[0]
        features = request_features(state.context, following, request, self._tokens(request.turn), state.resolving,
                                     self.centre_offset(state, ramp=True))
        return True, features + state.request_moments.relative([features[i] for i in RELATIVE_REQUEST_FEATURES])

    def _hard_boundary(self, state: SegmenterState, turn: Turn, tokens: int) -> BoundaryReason | None:
        config = self.config
        last = state.open_turns[-1].turn
        if turn.session_id != last.session_id:
            return BoundaryReason.SESSION
        if turn.timestamp - last.timestamp > config.max_gap:
            return BoundaryReason.TIME_GAP
        speakers = {t.turn.speaker for t in state.open_turns}
        if len(speakers) >= 2 and turn.speaker not in speakers:
            return BoundaryReason.PARTICIPANTS
        if state.open_tokens + tokens > self.limits(state)[1] and turn.speaker != state.helper:
            return BoundaryReason.LENGTH  # not before a helper's answer: the limit closes the event after it
        return None

    def _decide(self, state: SegmenterState, following: ContextTurn | None,
                forced: bool = False) -> BoundaryReason | None:
        """The boundary before the last open turn, now that ``following`` (None: no look-ahead) is known;
        ``forced``: the segment must close here or before the next turn (any allowed boundary is taken)."""
        context = state.context
        if len(context) < 2:
            return None
        turn, previous = context[-1], context[-2]
        helper = state.helper
        if turn.speaker == helper:
            return None  # an assistant's or an agent's turn answers the request it follows
        if previous.resolves and not (turn.closing or turn.resolves):
            return BoundaryReason.NEW_REQUEST  # "Have a great day!" -> the next request
        if (previous.offers_help and previous.speaker == helper and turn.requests and not turn.follow_up
                and turn.opener != "refers"):
            return BoundaryReason.NEW_REQUEST  # "Anything else?" -> "Yes, I need to change my address"
        if turn.marker is not None and turn.position >= 2:
            return BoundaryReason.MARKER
        if turn.offers_help:
            return None  # "Anything else I can help you with?" closes the request it follows
        long = forced or state.pending_tokens >= self.limits(state)[0]
        if helper is None:
            if previous.ends_with_question and turn.speaker != previous.speaker:
                return None  # an answer continues its question
            if turn.opener is not None and not turn.asks and not long:
                return None  # a comment on what was just said ("That's a lot of work", "Wow, congrats") continues it
        if forced:
            return BoundaryReason.LENGTH
        if (following is None or len(state.open_turns) - 1 < self.config.min_turns  # the turns before this one
                or turn.position < self.config.min_position):
            return None
        probability = self.shift_probability(state, following)
        scale = self.config.soft_factor if long else 1.0
        base = self.config.request_threshold if helper is not None else self.config.shift_threshold
        threshold = base * scale
        shift = probability >= threshold
        if self.judge is not None and abs(probability - threshold) < self.config.llm_band * scale:
            verdict = self._ask_judge(state, self.judge)
            if verdict is not None:
                counts = state.judge
                counts.cut += int(verdict and not shift)
                counts.kept += int(shift and not verdict)
                counts.agreed += int(verdict == shift)
                return BoundaryReason.JUDGED if verdict else None
        reason = BoundaryReason.NEW_REQUEST if helper is not None else BoundaryReason.SEMANTIC
        return reason if shift else None

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
