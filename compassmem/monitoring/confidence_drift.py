"""Relation-confidence drift: is the extractor getting less sure of what it links?

A falling confidence on new relations means the conversations moved away from what the cue lexicons and the
entity rules were written for (domain drift). Two windows are compared:

- **recent**: the mean of the last ``recent_size`` confidences;
- **reference**: the mean of the confidences that have *left* the recent window: a plain running mean at first,
  exponentially weighted (half-life ``reference_half_life`` relations) once about 1.44 half-lives have left, so
  it follows slow change but never contains the window it is compared with.

``drift`` = recent - reference (negative: less confident than before). ``trend`` is the least-squares slope of
the recent mean, sampled every ``sample_every`` relations once the window is full, over the last
``trend_samples`` samples, as change per 1,000 relations: counted in relations rather than seconds, so an idle
stream shows no trend.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import numpy as np
from pydantic import BaseModel, Field


class DriftConfig(BaseModel):
    recent_size: int = Field(default=200, ge=2)
    reference_half_life: int = Field(default=2000, ge=1)
    sample_every: int = Field(default=50, ge=1)
    trend_samples: int = Field(default=20, ge=3)


class DriftReading(BaseModel):
    relations_seen: int
    recent_mean: float | None
    reference_mean: float | None
    drift: float = Field(description="recent - reference; 0 until the reference window has data")
    trend_per_1000: float = Field(description="slope of the recent mean per 1,000 relations; 0 until enough samples")


class ConfidenceDrift:
    def __init__(self, config: DriftConfig | None = None) -> None:
        self.config = config or DriftConfig()
        self._recent: deque[float] = deque(maxlen=self.config.recent_size)
        self._recent_sum = 0.0
        self._reference: float | None = None
        self._alpha = 1.0 - math.exp(-math.log(2.0) / self.config.reference_half_life)
        self._samples: deque[tuple[int, float]] = deque(maxlen=self.config.trend_samples)
        self._seen = 0
        self._left = 0

    def add(self, confidences: Iterable[float]) -> None:
        for confidence in confidences:
            if len(self._recent) == self._recent.maxlen:
                leaving = self._recent[0]
                self._recent_sum -= leaving
                self._left += 1
                # 1/n: the running mean of everything that left (no bias towards the first values), until the
                # exponential weight takes over.
                weight = max(1.0 / self._left, self._alpha)
                self._reference = leaving if self._reference is None else \
                    self._reference + weight * (leaving - self._reference)
            self._recent.append(confidence)
            self._recent_sum += confidence
            self._seen += 1
            # Only full windows: a filling window's mean is the start-up mix of relations, not a trend.
            if self._seen % self.config.sample_every == 0 and len(self._recent) == self._recent.maxlen:
                self._samples.append((self._seen, self._recent_sum / len(self._recent)))

    def reading(self) -> DriftReading:
        recent = self._recent_sum / len(self._recent) if self._recent else None
        drift = recent - self._reference if recent is not None and self._reference is not None else 0.0
        trend = 0.0
        if len(self._samples) >= 3:
            x = np.array([s[0] for s in self._samples], dtype=float)
            y = np.array([s[1] for s in self._samples], dtype=float)
            trend = float(np.polyfit(x, y, 1)[0]) * 1000.0
        return DriftReading(relations_seen=self._seen, recent_mean=recent, reference_mean=self._reference,
                            drift=drift, trend_per_1000=trend)
