"""Category labels of a text: the kinds of thing its nouns name, as keyword terms a store can search.

A turn that says "we went camping and swimming" is labelled with the categories of "camping" and "swimming"
(outdoor activity, sport, activity, ...), so "What activities has Melanie done?" finds it through the label
``category:<synset>`` although the two texts share no word. Labels are WordNet synsets (``lexicon.py``); they go
into the turn's sparse keyword vector beside its stems, under their own prefix, so they never collide with a word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from compassmem.text.lexicon import noun_lexicon
from compassmem.text.text_features import STOP_WORDS

CATEGORY_PREFIX = "category:"
# A text's nouns are looked up one by one: a 16 KiB paste has at most a few thousand words, and each lookup is
# a dictionary probe (the categories of a lemma are cached per lemma, bounded by WordNet's vocabulary).
_MIN_WORD_LENGTH = 3
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_SENTENCE_END = re.compile(r"[.!?]")


def noun_lemmas(text: str) -> list[str]:
    """The WordNet noun lemmas a text names, in order: two-word compounds ("board games" -> "board_game") and
    single content words. A capitalised word counts as WordNet's proper noun ("Paris") or, at the start of a
    sentence, as a word people use that is no name ("Camping", not "John"), so names are not read as common
    nouns."""
    lexicon = noun_lexicon()
    tokens = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
    found: list[str] = []
    previous_end = 0
    for index, (token, start, end) in enumerate(tokens):
        opens_sentence = index == 0 or _SENTENCE_END.search(text, previous_end, start) is not None
        previous_end = end
        lower = token.lower()
        if index + 1 < len(tokens) and lower in lexicon.compound_heads:
            compound = lexicon.lemma(f"{lower} {tokens[index + 1][0].lower()}")
            if compound is not None:
                found.append(compound)
        if len(lower) < _MIN_WORD_LENGTH or lower in STOP_WORDS:
            continue
        lemma = lexicon.lemma(lower)
        if lemma is None:
            continue
        if token[0].isupper() and not lexicon.is_proper(lemma) and not (
                opens_sentence and lexicon.is_attested(lemma) and not lexicon.names_someone(lemma)):
            continue
        found.append(lemma)
    return list(dict.fromkeys(found))


def category_term(synset: int) -> str:
    return f"{CATEGORY_PREFIX}{synset}"


def category_terms(text: str, labels: Iterable[str] = ()) -> list[str]:
    """A text's categories as keyword terms, sorted (the same text always gives the same sparse vector).

    ``labels``: kinds of thing the text names, told by another means (an LLM's "video game" for a turn about
    Valorant, which WordNet does not know); each adds its own senses and their ancestors, as a noun of the text
    does."""
    lexicon = noun_lexicon()
    found: set[int] = set()
    for lemma in noun_lemmas(text):
        found.update(lexicon.categories(lemma))
    for label in labels:
        lemma = lexicon.lemma(label)
        if lemma is not None:
            found.update(lexicon.categories(lemma))
    return [category_term(s) for s in sorted(found)]
