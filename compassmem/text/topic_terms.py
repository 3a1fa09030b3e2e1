"""The words a topic is named by: the content words its events share and the rest of the conversation says less.

Counting the commonest keywords of a topic's events named LoCoMo's topics after their speakers and what people say
everywhere ("nate, love, i'll", "caroline, share, melanie"): every event of a two-person chat names both, and every
shared picture "shares a photo". A term here scores like TF-IDF over the conversation's events: the topic's events
that hold it, times the log of how rare it is among all the conversation's events. The participants' names, stop
words and contractions are never terms, whatever they score. Terms are stems, as events keep their keywords;
``spelt_out`` turns them back into the words the events say.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from compassmem.text.text_features import STOP_WORDS, stems, words

# A topic of this many events or more is named by terms at least two of them hold (one event's rare word names
# that event, not the topic).
SHARED_FROM = 3
# Verb forms and adverbs every chat is full of that the stop word list leaves out ("did", "went", "let"): they name
# no topic. Compared as stems too, since terms are stems.
_LIGHT_WORDS = frozenset("""does did doing done let lets get gets got getting go goes going went gone make makes made
    making want wants wanted know knew think thought like liked feel felt say said tell told try tried look looked
    looking see saw come came take took soon later probably maybe sorry thing things""".split())
_NOT_TERMS = STOP_WORDS | _LIGHT_WORDS | frozenset(stems(sorted(_LIGHT_WORDS)))
# Words as keywords are made of them, hyphenated ones whole ("dairy-free"); an apostrophe's tail is dropped, so
# that "nature's" counts as "nature".
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")


def name_terms(names: Iterable[str]) -> frozenset[str]:
    """The words of people's names as keywords hold them: lower-cased and stemmed ("Caroline" -> "carolin")."""
    lowered = sorted({word.lower() for name in names for word in words(name)})
    return frozenset(lowered) | frozenset(stems(lowered))


def is_content_term(term: str, names: frozenset[str]) -> bool:
    """Not a name of ``names``, a stop word or light word, a contraction ("i'll", "we'r"), a number or a scrap."""
    return len(term) > 2 and "'" not in term and not term.isdigit() and term not in _NOT_TERMS and term not in names


def topic_terms(members: Sequence[Sequence[str]], conversation: Iterable[Sequence[str]], names: frozenset[str],
                count: int) -> list[str]:
    """The ``count`` terms that best name a topic: ``members`` are its events' keywords, ``conversation`` those of
    every event of the conversation (the members among them), ``names`` the terms never used (``name_terms``)."""
    held = Counter(term for keywords in members for term in set(keywords) if is_content_term(term, names))
    if not held:
        return []
    everywhere: Counter[str] = Counter()
    events = 0
    for keywords in conversation:
        events += 1
        everywhere.update(term for term in set(keywords) if term in held)
    events = max(events, len(members))  # the members are the conversation's, even where a caller left them out
    shared = 2 if len(members) >= SHARED_FROM and any(n >= 2 for n in held.values()) else 1

    def score(term: str) -> float:
        return held[term] * math.log(events / max(everywhere[term], held[term]))

    candidates = [term for term, n in held.items() if n >= shared]
    # A term every event of the conversation holds names no topic of it, unless nothing else is left.
    telling = [term for term in candidates if score(term) > 0] or candidates
    return sorted(telling, key=lambda t: (-score(t), -held[t], t))[:count]


def spelt_out(terms: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Terms (stems) as the words ``texts`` say: each as the most frequent word of ``texts`` with that stem (ties:
    the shortest), itself when none has it; repeats dropped. Only a word with the very stem counts: a prefix would
    spell "car" as "caroline"."""
    counts = Counter(word.lower() for text in texts for word in _WORD.findall(text))
    by_stem: dict[str, list[str]] = {}
    for word, stem in zip(counts, stems(counts), strict=True):
        by_stem.setdefault(stem, []).append(word)
    spelt: list[str] = []
    for term in terms:
        term = term.lower()
        word = min(by_stem.get(term, [term]), key=lambda w: (-counts[w], len(w), w))
        if word not in spelt:
            spelt.append(word)
    return spelt
