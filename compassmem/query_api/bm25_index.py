"""BM25 over a small in-memory corpus (one conversation's turns or windows), with bm25s.

Parameters: k1 1.5, b 0.75, English stop words, Snowball English stemmer.
"""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer

BM25_K1 = 1.5
BM25_B = 0.75


class Bm25Index:
    """bm25s over a list of texts; ``scores`` gives one BM25 score per text."""

    def __init__(self, texts: Sequence[str], k1: float = BM25_K1, b: float = BM25_B) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._size = len(texts)
        self._model = bm25s.BM25(k1=k1, b=b)
        tokens = self._tokenize(list(texts))
        self._model.index(tokens, show_progress=False)

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        tokenized = bm25s.tokenize(
            texts, stopwords="en", stemmer=self._stemmer.stemWords, return_ids=False, show_progress=False
        )
        return [list(t) for t in tokenized]

    def scores(self, query: str) -> np.ndarray:
        query_tokens = self._tokenize([query])[0]
        if not query_tokens:
            return np.zeros(self._size, dtype=np.float32)
        return np.asarray(self._model.get_scores(query_tokens), dtype=np.float32)
