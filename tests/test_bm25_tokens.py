"""The query-time BM25 tokeniser gives what bm25s.tokenize gives (the BM25 baseline's tokeniser), text for text."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import bm25s
import Stemmer

from compassmem.core.models import search_text
from compassmem.retrieval.bm25_index import bm25_tokens, token_counts

TEXTS = [
    "",
    "a an the of",  # stop words only
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful!",
    "Running, runs, ran: the runner's 5k races in 2023 (Mon 8 May)",
    "Ünïcödé wörds ÉCOLE naïve café",
    "It's 3pm—I'd rather... don't! x y z",
    "tab\tseparated\nlines\r\nand   spaces",
    "word " * 300,
]


def test_tokens_match_bm25s_for_every_text() -> None:
    texts = [*TEXTS, search_text("Melanie", "We went camping at the beach last weekend", datetime(2023, 5, 8, 13, 56))]
    reference = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english").stemWords,
                               return_ids=False, show_progress=False)
    assert bm25_tokens(texts) == [list(tokens) for tokens in reference]
    # One text at a time gives the same as a batch (stems do not depend on the other texts).
    assert [bm25_tokens([text])[0] for text in texts] == bm25_tokens(texts)


def test_counts_are_plain_dicts_of_the_tokens() -> None:
    (counts,) = token_counts(["runs running ran run, the runner"])
    assert counts == {"run": 3, "ran": 1, "runner": 1}
    assert type(counts) is dict


def test_counts_are_the_tokens_counted_for_every_text() -> None:
    texts = [*TEXTS, "The runs: RUNNING runs ran. Running the run! " * 40]
    assert token_counts(texts) == [dict(Counter(tokens)) for tokens in bm25_tokens(texts)]
