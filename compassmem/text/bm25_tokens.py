"""The tokens BM25 counts: bm25s' tokenisation (its token pattern, English stop words, Snowball English stemmer)
without its per-text costs. Shared by the write path (a turn's counts are stored with it) and the query path (BM25
over the candidates' windows, ``compassmem/retrieval/bm25_index.py``)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

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


def encoded_counts(counts: dict[str, int]) -> str:
    """Token counts as one JSON text: what a turn's payload stores (one string per point, not one value per token)."""
    return json.dumps(counts, separators=(",", ":"))


def decoded_counts(stored: str) -> dict[str, int]:
    return json.loads(stored)
