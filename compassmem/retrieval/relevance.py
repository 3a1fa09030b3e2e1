"""How likely each returned turn is evidence, and how likely the memory holds an answer at all.

The ranking's scores say which turn is better than which, not whether any is good: every question gets a first
turn. Two logistic models, fitted on development questions with conversations held out
(``benchmarks/fit_relevance.py``; docs/decisions/017-calibrated-relevance.md), turn absolute signals into
probabilities an agent can threshold:

- ``relevance`` of a returned turn: the probability that it is evidence for the question, from
  ``TURN_INPUTS`` (its cosine similarity to the question, the share of the question's content words it holds, its
  place and its score margin below the first turn, how much of the question the candidates cover at all);
- ``answerable``: the probability that the memory holds evidence for the question, from ``QUESTION_INPUTS`` (the
  best turn's relevance in log-odds, the mean of the best three, the candidates' coverage of the question, the
  best cosine similarity). A question about something never said (the capital of France asked of a chat between
  friends, a question asked of the wrong conversation) names words no candidate holds and finds no close turn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from functools import cache
from importlib import resources

import numpy as np
from pydantic import BaseModel, Field

# Per returned turn, what its relevance is computed from:
#   cosine     cosine similarity of the turn (its closest passage, for a long turn) to the whole question
#   overlap    the share of the question's content-word stems the turn holds
#   coverage   the share of the question's content-word stems any candidate turn (or participant's name) holds
#   place      log(1 + its 0-based place in the ranking)
#   margin     its final ranking score less the first turn's (0 for the first, negative below)
#   names      1 when the question names a participant (not every one), else 0
#   speaker    1 when the question names a participant and the turn is theirs: "What did Ann realise after her
#              race?" is answered by Ann's turns; when only Bob's tell of a race, the question's premise is wrong
TURN_INPUTS: tuple[str, ...] = ("cosine", "overlap", "coverage", "place", "margin", "names", "speaker")
# Per question, what ``answerable`` is computed from:
#   best_logit   the best returned turn's relevance in log-odds
#   top3         the mean relevance of the best three returned turns
#   coverage     as above
#   top_cosine   the best cosine similarity of any candidate turn to the question
#   names        as above
#   speaker      the share of the three candidate turns closest to the question (cosine + overlap) said by the
#                participant the question names (0 when it names none): ``closest_speaker_share``
QUESTION_INPUTS: tuple[str, ...] = ("best_logit", "top3", "coverage", "top_cosine", "names", "speaker")
# Log-odds kept finite: a probability of exactly 0 or 1 is never claimed.
_LOGIT_LIMIT = 12.0


class Logistic(BaseModel):
    """p = 1 / (1 + exp(-(intercept + sum of weight x input)))."""

    intercept: float
    weights: dict[str, float]

    def logits(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        size = len(next(iter(inputs.values()))) if inputs else 0
        total = np.full(size, self.intercept, dtype=np.float64)
        for name, weight in self.weights.items():
            total += weight * inputs[name]
        return np.clip(total, -_LOGIT_LIMIT, _LOGIT_LIMIT)


class RelevanceModel(BaseModel):
    """The two fitted models, where they came from and what held-out questions measured of them."""

    source: str
    turn: Logistic
    question: Logistic
    # (the turn model's probability, the share of evidence held-out turns of about that probability had), rising:
    # the linear model puts too little on its best turns (0.35 given, 0.57 observed), so what is reported is mapped
    # through these points (isotonic regression on cross-fitted predictions; empty: reported as the model gives it).
    turn_calibration: list[tuple[float, float]] = Field(default_factory=list)
    validation: dict[str, float] = Field(default_factory=dict)

    def turn_relevance(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The turn model's probabilities, before ``calibrated`` (what ``question_inputs`` reads)."""
        return _sigmoid(self.turn.logits(inputs))

    def calibrated(self, probabilities: np.ndarray) -> np.ndarray:
        """The relevance reported for ``turn_relevance``'s probabilities."""
        if not self.turn_calibration:
            return probabilities
        given, observed = zip(*self.turn_calibration, strict=True)
        return np.interp(probabilities, given, observed)

    def answerable(self, inputs: Mapping[str, np.ndarray]) -> float:
        """The probability from a question's ``question_inputs``."""
        return float(_sigmoid(self.question.logits(inputs))[0])


def question_inputs(relevance: np.ndarray, coverage: float, top_cosine: float, names: bool,
                    speaker: float) -> dict[str, np.ndarray]:
    """QUESTION_INPUTS of one question from its returned turns' relevance and the candidates' figures."""
    best = np.sort(relevance)[::-1][:3]
    top = float(best[0]) if len(best) else 0.0
    clipped = min(max(top, 1e-6), 1 - 1e-6)
    return {"best_logit": np.asarray([math.log(clipped / (1 - clipped))]),
            "top3": np.asarray([float(best.mean()) if len(best) else 0.0]),
            "coverage": np.asarray([coverage]), "top_cosine": np.asarray([top_cosine]),
            "names": np.asarray([float(names)]), "speaker": np.asarray([speaker])}


def closest_speaker_share(cosine: np.ndarray, overlap: np.ndarray, speaker: np.ndarray, top: int = 3) -> float:
    """Who said what the question is about: the share of the ``top`` candidate turns closest to it in meaning and
    words (cosine + overlap, whatever the ranking's lift of the named participant's turns) that the named
    participant said."""
    if not len(cosine):
        return 0.0
    closest = np.argsort(-(cosine + overlap), kind="stable")[:top]
    return float(speaker[closest].mean())


def overlaps(turn_tokens: Sequence[Collection[str]], question_tokens: Collection[str]) -> np.ndarray:
    """Per turn, the share of the question's content-word tokens it holds."""
    asked = set(question_tokens)
    if not asked:
        return np.zeros(len(turn_tokens))
    return np.asarray([len(asked.intersection(tokens)) / len(asked) for tokens in turn_tokens], dtype=np.float64)


def turn_inputs(cosine: np.ndarray, overlap: np.ndarray, coverage: float, final: np.ndarray, speaker: np.ndarray,
                names: bool) -> dict[str, np.ndarray]:
    """TURN_INPUTS of the returned turns, in their order: ``cosine``, ``overlap``, ``final`` and ``speaker`` per
    returned turn, the candidates' coverage of the question and whether it names a participant."""
    count = len(cosine)
    return {"cosine": np.asarray(cosine, dtype=np.float64),
            "overlap": np.asarray(overlap, dtype=np.float64), "coverage": np.full(count, coverage),
            "place": np.log1p(np.arange(count, dtype=np.float64)),
            "margin": np.asarray(final, dtype=np.float64) - (float(final[0]) if count else 0.0),
            "names": np.full(count, float(names)), "speaker": np.asarray(speaker, dtype=np.float64)}


def coverage_of(question_tokens: Collection[str], candidate_tokens: Collection[str]) -> float:
    """The share of the question's content-word tokens found among the candidates' (1 for a question of none)."""
    asked = set(question_tokens)
    return len(asked & set(candidate_tokens)) / len(asked) if asked else 1.0


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


@cache
def shipped_relevance_model() -> RelevanceModel:
    """The fitted models shipped with the package."""
    text = resources.files("compassmem.retrieval").joinpath("relevance_model.json").read_text(encoding="utf-8")
    return RelevanceModel.model_validate(json.loads(text))
