"""Passages of a long message: spans of its text, each short enough to be embedded whole.

The embedder reads 256 word pieces of a turn; an assistant's answer of 3,000 words would be known by its opening
only. A long turn is cut into passages at paragraph, then sentence, then word boundaries, each at most
``PASSAGE_WORDS`` words; every passage after the first is embedded and stored as a point of its own (the turn's own
vector stands for the first), so a fact in the fifth paragraph is found by meaning, a turn ranks by its best
passage, and evidence shows that passage instead of the whole message. The spans are a function of the text alone:
the query side finds them again without storing them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# About 200 word pieces with the speaker and date prefix: under the embedder's 256 with room for long words.
PASSAGE_WORDS = 150

_PARAGRAPH = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*•]|\d+[.)]|#+)\s)")
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")
_WORD = re.compile(r"\S+")

Span = tuple[int, int]


def passage_spans(text: str, max_words: int = PASSAGE_WORDS) -> list[Span]:
    """(start, end) character offsets of the passages of ``text`` in order; one span, the whole text, when it is
    short. Passages cover every word, never split a word, and hold at most ``max_words`` words each."""
    # str.split() and _WORD agree on what a word is (both split at str.isspace()); split() is the faster count.
    if len(text) <= 2 * max_words or len(text.split()) <= max_words:
        return [(0, len(text))]
    spans: list[Span] = []
    start: int | None = None
    end = 0
    words = 0
    for piece_start, piece_end, piece_words in _pieces(text, max_words):
        if start is not None and words + piece_words > max_words:
            spans.append((start, end))
            start, words = None, 0
        if start is None:
            start = piece_start
        end, words = piece_end, words + piece_words
    if start is not None:
        spans.append((start, end))
    return spans


def _pieces(text: str, max_words: int) -> Iterator[tuple[int, int, int]]:
    """Paragraphs, a paragraph longer than a passage as its sentences, a sentence longer than a passage as runs
    of words: (start, end, words) of each, in order, whitespace trimmed."""
    for paragraph in _split(text, 0, len(text), _PARAGRAPH):
        if paragraph[2] <= max_words:
            yield paragraph
            continue
        for sentence in _split(text, paragraph[0], paragraph[1], _SENTENCE_END):
            if sentence[2] <= max_words:
                yield sentence
                continue
            words = list(_WORD.finditer(text, sentence[0], sentence[1]))
            for first in range(0, len(words), max_words):
                run = words[first: first + max_words]
                yield run[0].start(), run[-1].end(), len(run)


def _split(text: str, start: int, end: int, boundary: re.Pattern[str]) -> Iterator[tuple[int, int, int]]:
    position = start
    for match in boundary.finditer(text, start, end):
        yield from _trimmed(text, position, match.start())
        position = match.end()
    yield from _trimmed(text, position, end)


def _trimmed(text: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    piece = text[start:end]
    words = piece.strip()
    if words:
        first = start + len(piece) - len(piece.lstrip())
        yield first, first + len(words), len(words.split())
