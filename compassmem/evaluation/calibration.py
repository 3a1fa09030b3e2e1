"""Whether memory's probabilities mean what they say: the area under the ROC curve of ``answerable`` between
questions it can answer and questions it cannot, and the expected calibration error of turn ``relevance``
(``compassmem eval`` and ``benchmarks/fit_relevance.py`` report both)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

CALIBRATION_BINS = 10


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """The probability that a random positive scores above a random negative (ties count half); None when either
    side is empty."""
    if not len(positives) or not len(negatives):
        return None
    scores = np.concatenate([np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)])
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    # Tied scores share their mean rank.
    for value in np.unique(scores):
        tied = scores == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    count = len(positives)
    return float((ranks[:count].sum() - count * (count + 1) / 2) / (count * len(negatives)))


class CalibrationBin(BaseModel):
    low: float
    high: float
    count: int
    mean_probability: float
    observed: float


class Calibration(BaseModel):
    """Expected calibration error over equal-width bins, and the bins themselves (a reliability table)."""

    ece: float
    count: int
    bins: list[CalibrationBin]


def calibration(probabilities: Sequence[float], outcomes: Sequence[bool],
                bins: int = CALIBRATION_BINS) -> Calibration | None:
    """How far each bin's mean probability is from its observed rate, weighted by the bin's share; None for no
    data."""
    if not len(probabilities):
        return None
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    y = np.asarray(outcomes, dtype=np.float64)
    index = np.minimum((p * bins).astype(np.int64), bins - 1)
    table, error = [], 0.0
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        if not count:
            continue
        mean, observed = float(p[inside].mean()), float(y[inside].mean())
        error += count / len(p) * abs(mean - observed)
        table.append(CalibrationBin(low=b / bins, high=(b + 1) / bins, count=count, mean_probability=round(mean, 4),
                                    observed=round(observed, 4)))
    return Calibration(ece=round(error, 4), count=len(p), bins=table)
