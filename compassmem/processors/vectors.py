"""Small vector helpers shared by the processors."""

from __future__ import annotations

import numpy as np


def unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
