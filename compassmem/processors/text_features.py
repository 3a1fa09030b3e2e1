"""Cheap lexical features of turns and events: tokens, keyword stems, named entities, action phrases.

All rule-based and deterministic: they run on every turn of the stream, so they must cost little next to
the embedder, and the offline path must not need a model beyond the embedder.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import Stemmer
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from compassmem.sinks.vector_store import SparseVector

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CAPITALISED = re.compile(r"\b([A-Z][a-zA-Z'\-]+(?:\s+(?:of|the|de|van|von)?\s*[A-Z][a-zA-Z'\-]+)*)")

# Conversational filler that is capitalised or frequent but names nothing.
_FILLER = frozenset(
    """hey hi hello yeah yes yep no nope oh wow thanks thank thx ok okay lol haha hmm um uh gonna wanna
    really totally awesome great cool nice good glad sure so just also definitely absolutely amazing""".split()
)
STOP_WORDS = frozenset(ENGLISH_STOP_WORDS) | _FILLER | {"i'm", "it's", "that's", "you're", "i've", "don't", "can't"}
_NOT_ENTITIES = frozenset(
    """I I'm I've I'll I'd Hey Hi Hello Yeah Yes Wow Oh Thanks Thank Ok Okay So But And Or The A An It It's That
    That's This These Those What When Where Why How Who Which My Your Our Their His Her We You They He She Just
    Also Sure Great Awesome Cool Nice Good Glad Haha Lol Sounds Definitely Absolutely Totally Really Well Anyway
    Congrats Congratulations Aw Aww Omg Btw Mon Tue Wed Thu Fri Sat Sun Monday Tuesday Wednesday Thursday
    Friday Saturday Sunday January February March April May June July August September October November
    December Let Let's Take Keep Have Had Do Did Is Was Are Were Be Been Not No Me Mine""".split()
)
_SUBJECTS = frozenset({"i", "we", "she", "he", "they"})
_CLAUSE_BREAK = re.compile(r"[,.;:!?()\"]")


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def count_tokens(text: str) -> int:
    """A model-free token estimate (words x 1.3, the usual English ratio for word-piece tokenizers)."""
    return max(1, round(len(words(text)) * 1.3))


def keyword_stems(text: str) -> list[str]:
    """Content-word stems in order, repeats kept (term frequency matters for sparse vectors)."""
    content = [w.lower() for w in words(text) if len(w) > 2 and w.lower() not in STOP_WORDS and not w.isdigit()]
    return _stemmer().stemWords(content)


def entities(text: str) -> list[str]:
    """Capitalised names that are not sentence openers or filler: people, places, brands, titles."""
    found: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        for match in _CAPITALISED.finditer(sentence):
            parts = match.group(1).split()
            at_start = match.start() == 0
            while parts and parts[0] in _NOT_ENTITIES:
                parts.pop(0)
                at_start = False
            if not parts or (at_start and len(parts) == 1 and parts[0].lower() in STOP_WORDS):
                continue
            found.append(" ".join(parts))
    return list(dict.fromkeys(found))


def action_phrases(text: str, max_words: int = 7) -> list[str]:
    """'I went to a support group yesterday' -> 'went to a support group yesterday': what someone did or does."""
    phrases: list[str] = []
    for clause in _CLAUSE_BREAK.split(text):
        tokens = clause.split()
        for index, token in enumerate(tokens[:-1]):
            if token.lower() in _SUBJECTS:
                phrase = " ".join(tokens[index + 1 : index + 1 + max_words])
                if len(phrase.split()) >= 2:
                    phrases.append(phrase)
                break
    return phrases


def jaccard(left: Iterable[str], right: Iterable[str]) -> float:
    a, b = set(left), set(right)
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def overlap_coefficient(left: Iterable[str], right: Iterable[str]) -> float:
    a, b = set(left), set(right)
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def _term_index(term: str) -> int:
    # A stable 31-bit hash, so the same term gets the same sparse dimension in every process and store.
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


def sparse_keyword_vector(stems: Iterable[str], k1: float = 1.2) -> SparseVector:
    """BM25-style saturated term frequencies; the store's IDF modifier supplies the inverse document frequency."""
    counts = Counter(stems)
    merged: dict[int, float] = {}
    for term, tf in counts.items():
        index = _term_index(term)
        merged[index] = merged.get(index, 0.0) + tf * (k1 + 1) / (tf + k1)
    ordered = sorted(merged)
    return SparseVector(indices=ordered, values=[merged[i] for i in ordered])


def first_sentence(text: str, max_words: int = 20) -> str:
    sentence = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    tokens = sentence.split()
    return " ".join(tokens[:max_words]) + (" ..." if len(tokens) > max_words else "")
