"""BM25 over a small corpus assembled per query: windows of turns whose tokens were counted once, when cached.

Scores follow bm25s' "lucene" variant (k1 1.5, b 0.75, English stop words, Snowball English stemmer, a query token
repeated counts again), but only the query's terms are looked at, so scoring a few hundred windows costs well under
a millisecond and no index is built: the corpus is whatever the query's candidate turns are.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

BM25_K1 = 1.5
BM25_B = 0.75

_STEMMER = Stemmer.Stemmer("english")
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_STOP_WORDS = frozenset(STOPWORDS_EN)


def bm25_tokens(texts: Sequence[str]) -> list[list[str]]:
    """Stemmed, stop-word-free tokens of each text, as ``bm25s.tokenize`` gives them (its token pattern, English
    stop words and stemmer, each distinct word stemmed once), without its per-text costs: it rebuilds its stop-word
    set for every text, a third of a cold hot-tier load of a few hundred turns."""
    found = [[token for token in _TOKEN.findall(text.lower()) if token not in _STOP_WORDS] for text in texts]
    words = list(dict.fromkeys(token for tokens in found for token in tokens))
    stems = dict(zip(words, _STEMMER.stemWords(words), strict=True))
    return [[stems[token] for token in tokens] for tokens in found]


def token_counts(texts: Sequence[str]) -> list[dict[str, int]]:
    """Each text's token counts as a plain dict: the garbage collector stops tracking a dict of strings and ints
    (it would track a Counter for good), and the API's hot tier keeps one per turn it holds."""
    return [dict(Counter(tokens)) for tokens in bm25_tokens(texts)]


def token_lengths(turn_counts: Sequence[Mapping[str, int]]) -> np.ndarray:
    """Tokens per turn: what a window's length adds up, computed once per corpus rather than per query."""
    return np.fromiter((sum(counts.values()) for counts in turn_counts), dtype=np.float64, count=len(turn_counts))


def window_bm25(query: str, turn_counts: Sequence[Mapping[str, int]], lengths: np.ndarray, window_rows: np.ndarray,
                window_of_row: np.ndarray, windows: int, k1: float = BM25_K1, b: float = BM25_B,
                unsearched: Collection[str] = ()) -> np.ndarray:
    """BM25 score of each window for ``query``; window ``window_of_row[i]`` holds turn ``window_rows[i]``;
    ``lengths``: token_lengths(turn_counts). The query's tokens in ``unsearched`` are left out, unless nothing else
    is left."""
    scores = np.zeros(windows, dtype=np.float64)
    query_tokens = bm25_tokens([query])[0]
    query_tokens = [token for token in query_tokens if token not in unsearched] or query_tokens
    if not query_tokens or windows == 0:
        return scores
    # Sums per window by bincount, term by term: np.add.at over a (window, term) matrix took a quarter longer.
    length = np.bincount(window_of_row, weights=lengths[window_rows], minlength=windows)
    average = float(length.mean()) or 1.0
    norm = k1 * ((1 - b) + b * length / average)
    for term in sorted(set(query_tokens)):
        per_turn = np.fromiter((counts.get(term, 0) for counts in turn_counts), dtype=np.float64,
                               count=len(turn_counts))
        tf = np.bincount(window_of_row, weights=per_turn[window_rows], minlength=windows)
        df = np.count_nonzero(tf)
        idf = np.log(1 + (windows - df + 0.5) / (df + 0.5))
        scores += tf / (norm + tf) * idf * query_tokens.count(term)
    return scores


class Bm25Index:
    """BM25 over a fixed list of texts (each its own document); ``scores`` gives one score per text."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._counts = token_counts(texts) if texts else []
        self._lengths = token_lengths(self._counts)
        self._rows = np.arange(len(self._counts), dtype=np.int64)

    def scores(self, query: str) -> np.ndarray:
        return window_bm25(query, self._counts, self._lengths, self._rows, self._rows, len(self._counts))
