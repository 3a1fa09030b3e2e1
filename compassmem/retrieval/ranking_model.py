"""The final score of a candidate turn: a weighted sum of what the engine knows about it (``FEATURES``).

Two sets of weights share this form: the hand-chosen ones (``hand_model``: the RankingConfig fields a person set on
chats between people) and the shipped one (``ranking_model.json``, the default): the same hand weights on every
feature, plus fitted weights on each feature times the conversation's turn length (``NAME*long``), so that a
conversation of long answers is ranked otherwise than one of chat lines. ``benchmarks/fit_ranking.py`` writes it,
with every development conversation held out in turn; docs/decisions/003-fitted-ranking.md has the measurements.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

import numpy as np
from pydantic import BaseModel, Field

# What each feature holds, per candidate turn (the most any subgoal gave it):
#   fused     the turn's hybrid score: its channels reciprocal-rank fused, divided by the best turn's
#   context   the fused score of the best neighbouring turn of the same session
#   event     its event's score (event search and graph walk), divided by the best event's
#   walk      what the graph walk alone gave its event (the walk's score of it; 0 for a seed or an event not reached):
#             the walk bonus is inside ``event`` too, and this lets a fitted term weigh it by conversation shape
#   dense     the turn's cosine similarity to the subgoal less the best candidate's (0 for the nearest turn)
#   dense_rank, keyword_rank, window_rank, time_rank, label_rank
#             its place in each channel's list as 10 / (10 + rank), 0 when the channel did not list it
#   asks      the share of its text that asks a question (a question rarely holds its answer)
#   wish      1 when the turn states a standing instruction or preference ("Always ... when I ask about ...",
#             "I prefer ..."): it answers every later request on its subject
#   temporal_time  the question asks when, and the turn carries a time expression
#   dated     the question names a day or period, and the turn was said then or names a day in it
#   speaker   the question names a participant (or a person: "I", "you"), and the turn is theirs
#   user_side 1 for the user's turns where the participants are a user and an assistant named by role, unless the
#             question names the assistant alone: what the user tells of themselves is what is asked about later
#   early     the question asks how things began ("when I first described", "originally", "at the start"): 1 for
#             the conversation's earliest candidate turn down to 0 for its latest
#   length    log of the turn's keyword tokens over log of 4,096 (a one-line turn is near 0.2, a long answer near 1)
#   rerank    how well the relevance reranker (retrieval/reranker.py), reading the question and the turn together,
#             finds that the turn answers it, against the best of the first ``rerank_candidates`` turns of the ranking
#             without it (exp of its score less the best one's: 1 for the best); 0 for the others and where no
#             reranker runs
#   NAME*long the feature times how long the conversation's turns are (``conversation_shape``): how much each
#             counts can follow the shape of the conversation (chat lines between people, an assistant's answers)
BASE_FEATURES: tuple[str, ...] = (
    "fused", "context", "event", "walk", "dense", "dense_rank", "keyword_rank", "window_rank", "time_rank",
    "label_rank", "asks", "wish", "temporal_time", "dated", "speaker", "length", "user_side", "early", "rerank",
)
FEATURES: tuple[str, ...] = (*BASE_FEATURES, *(f"{name}*long" for name in BASE_FEATURES))
# The candidates' mean length feature mapped to 0 for turns of a chat line (20 keyword tokens) and 1 for those of a
# written answer (300); LoCoMo's candidates average 0.37 (about 20 tokens), BEAM's 0.60.
SHORT_TURN_TOKENS = 20
LONG_TURN_TOKENS = 300
RANK_SCALE = 10.0
SPEAKER = "speaker"
RERANK = "rerank"
# The reranker's verdict and its shape term: 0 until QueryEngine._add_rerank fills them.
RERANK_TERMS = (RERANK, f"{RERANK}*long")


class RankingModel(BaseModel):
    """Weights per feature (a feature without a weight counts 0) and where they came from."""

    source: str
    weights: dict[str, float]
    # What the fitting script measured, kept with the weights it produced (conversation-grouped validation).
    validation: dict[str, float] = Field(default_factory=dict)

    def without(self, *names: str) -> RankingModel:
        """These weights with the named features (and their shape terms) left out: for ablations."""
        gone = {*names, *(f"{name}*long" for name in names)}
        return self.model_copy(update={"source": f"{self.source} without {', '.join(names)}",
                                       "weights": {n: w for n, w in self.weights.items() if n not in gone}})

    def score(self, features: dict[str, np.ndarray], count: int) -> np.ndarray:
        total = np.zeros(count, dtype=np.float64)
        for name, weight in self.weights.items():
            if weight:
                total += weight * features[name]
        return total


def conversation_shape(length_feature: np.ndarray) -> float:
    """0 for candidates as short as chat lines, 1 for candidates as long as written answers, in between linearly
    (by the mean of their length feature)."""
    if not len(length_feature):
        return 0.0
    short, long = (np.log1p(tokens) / np.log1p(4096.0) for tokens in (SHORT_TURN_TOKENS, LONG_TURN_TOKENS))
    return float(np.clip((length_feature.mean() - short) / (long - short), 0.0, 1.0))


def rank_feature(ranks: np.ndarray) -> np.ndarray:
    """A place in a ranked list as a feature: 1 for the first, 1/2 for the eleventh, towards 0 below."""
    return RANK_SCALE / (RANK_SCALE + ranks)


def hand_model(turn_weight: float, context_weight: float, question_penalty: float, time_boost: float,
               date_boost: float, speaker_boost: float) -> RankingModel:
    """The hand-chosen weights (RankingConfig's fields) in the model's form."""
    return RankingModel(source="hand", weights={
        "fused": turn_weight, "context": context_weight,
        "event": max(0.0, 1 - turn_weight - context_weight), "asks": -question_penalty,
        "temporal_time": time_boost, "dated": date_boost, SPEAKER: speaker_boost,
    })


@cache
def shipped_model() -> RankingModel:
    """The fitted model shipped with the package."""
    text = resources.files("compassmem.retrieval").joinpath("ranking_model.json").read_text(encoding="utf-8")
    return RankingModel.model_validate(json.loads(text))
