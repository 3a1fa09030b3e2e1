"""Rule-based question analysis: what kind of answer is wanted, and which subgoals need evidence.

The offline path of decomposition (an LLM may replace it when configured): conjunctions split a question
into subgoals that each need their own evidence; cue words say whether time or causes are asked for.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from compassmem.text.lexicon import MIN_CATEGORY_DEPTH, noun_lexicon
from compassmem.text.text_features import STOP_WORDS, entities, keyword_stems
from compassmem.text.time_resolution import (
    resolve_time_expressions,
    without_time_expressions,
)

_TEMPORAL = re.compile(
    r"(?:^\s*|\band\s+|,\s*)when\b|\bwhat (?:year|month|date|day|time|week)\b|\bhow long\b|\bsince when\b|\bhow many "
    r"(?:days|weeks|months|years|times)\b|\b(?:before|after|until|during)\b|\bhow old\b",
    re.IGNORECASE,
)
_CAUSAL = re.compile(r"^\s*why\b|\bwhat (?:caused|made|led|motivated|inspired)\b|\breason\b|\bbecause\b", re.I)
_SPLIT = re.compile(r"\s*(?:,\s*and\s+|\band\s+(?=(?:what|when|where|who|why|how|which|did|does|do|is|was)\b)|;\s*)",
                    re.IGNORECASE)
# Questions that gather several facts ("What books has ...", "How many tournaments ...", "What are ...")
# rather than one: their evidence is spread over sessions.
_AGGREGATE = re.compile(
    r"^\s*(?:what|which)\s+(?:[a-z]+\s+)?[a-z]+(?<!ss)(?<!ou)s\b(?<!\bis)(?<!\bwas)(?<!\bdoes)(?<!\bhas)|^\s*how many\b"
    r"|^\s*what\s+(?:are|were)\b|\bboth\b|\b(?:kinds?|types?|ways?)\s+of\b|\bshare\b|\bin common\b",
    re.IGNORECASE,
)
# The category a question asks for: the noun after "what/which" (and "kinds of"), before the verb ("What outdoor
# activities has John done?", "Which cities has Jon visited?"), or the noun a "what are ..." question names ("What
# are Joanna's hobbies?"). The word before it may make a compound ("board games", "martial arts").
_CATEGORY_HEAD = re.compile(
    r"^\s*(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?(?P<before>(?:[a-z\-]+\s+){0,2}?)(?P<head>[a-z\-]+)\s+"
    r"(?:has|have|had|does|do|did|is|are|was|were|can|could|would|will)\b"
    r"|^\s*what\s+(?:are|were)\s+(?:the\s+|some\s+)?(?:[A-Za-z][\w\-]*'s?\s+)?(?:(?:kinds?|types?|sorts?)\s+of\s+)?"
    r"(?P<before2>(?:[a-z\-]+\s+)?)(?P<head2>[a-z\-]+)\s*(?:\?|$)",
    re.IGNORECASE,
)
# The senses of the asked-for noun that count: "instruments" is first a device and only sixth a musical one, so
# all of them do; the store's IDF weighs a turn naming a rare sense's instance above one naming a broad sense's.
CATEGORY_SENSES = 8
# Two events related in time ("How many weeks passed between Maria adopting Coco and Shadow?", "Which city was John
# in before traveling to Chicago?"): the answer needs the turns of both, and the first event's turns crowd out the
# second's when the question is searched whole. Each event becomes a subgoal of its own.
# The question is split at the first of these words, found by a plain search: a pattern with two lazy parts and an
# end anchor backtracked over every split of a long question (0.7 s for 4,000 characters of spaces).
_BETWEEN = re.compile(r"\bbetween\b", re.IGNORECASE)
_AND = re.compile(r"\band\b", re.IGNORECASE)
_RELATION_WORD = re.compile(r"\b(?:before|after|since|until)\b", re.IGNORECASE)
# Only a question whose answer needs both events relates two: a distance in time ("How many weeks between A and B?",
# "How long before B did A?") or an order ("Which city was John in before traveling to Chicago?"). In "When did
# John meet his teammates after returning from Chicago?" the second event only says which meeting; "How did Melanie
# feel after the accident?" asks about one event.
_ASKS_TIME_OR_ORDER = re.compile(r"^\s*(?:how long|how many|how much time|which)\b|\bbetween\b", re.IGNORECASE)
# "How long before B did A ...?": the second part holds B, then A from its auxiliary on.
_AUXILIARY = re.compile(r"\b(?:did|does|do|was|were|had|has|have)\b", re.IGNORECASE)
_ONLY_HOW_LONG = re.compile(r"^\s*how\s+(?:long|many\s+\w+|much\s+time)\s*$", re.IGNORECASE)
# Resolving a text against a fixed day only tells whether it names a time; the day itself is unused.
_SOME_DAY = datetime(2000, 1, 1, tzinfo=UTC)
# Each subgoal costs a full hybrid search and a graph walk: a question of many conjunctions must not cost as much as
# dozens of ordinary ones. The whole question comes first, then its clauses in order, then an LLM's; the rest are
# dropped.
MAX_SUBGOALS = 8
_QUESTION_WORDS = frozenset("what when where who whom whose why how which did does do is was were are has have".split())


class Subgoal(BaseModel):
    text: str
    keywords: list[str]


class QuestionAnalysis(BaseModel):
    question: str
    temporal: bool
    causal: bool
    aggregate: bool = False
    entities: list[str] = Field(default_factory=list)
    # WordNet synsets of the category the question asks for (``asked_categories``); empty when it names none.
    categories: list[int] = Field(default_factory=list)
    subgoals: list[Subgoal]
    # The two events a question relates in time ("between A and B", "A before B"), each also a subgoal.
    events: list[str] = Field(default_factory=list)


def keyword_query(text: str) -> str:
    """The content words of a question: what a rewrite searches for when the full question found too little."""
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z'\-]*|\d+", text) if w.lower() not in STOP_WORDS
             and w.lower() not in _QUESTION_WORDS]
    return " ".join(words)


def analyse(question: str) -> QuestionAnalysis:
    """The whole question is always the first subgoal; conjunct clauses add their own (``MAX_SUBGOALS`` in all)."""
    # Whitespace runs become one space first: the split pattern, begun at every position of a long run, was
    # quadratic in it (0.6 s for 4,000 spaces).
    parts = [p.strip(" ?,.") for p in _SPLIT.split(" ".join(question.split())) if p and len(keyword_stems(p)) >= 2]
    events = two_events(question)
    texts = [question.strip(), *events]
    texts.extend(p for p in parts if p and p.lower() != question.strip(" ?").lower())
    texts = [t for text in list(dict.fromkeys(texts))[:MAX_SUBGOALS] for t in (text, _timeless(text))]
    return QuestionAnalysis(
        question=question,
        temporal=bool(_TEMPORAL.search(question)),
        causal=bool(_CAUSAL.search(question)),
        aggregate=bool(_AGGREGATE.search(question)),
        entities=entities(question),
        categories=asked_categories(question),
        subgoals=[Subgoal(text=t, keywords=keyword_stems(t)) for t in list(dict.fromkeys(texts))[:MAX_SUBGOALS]],
        events=events,
    )


def _timeless(text: str) -> str:
    """A subgoal that names a time, searched once more without it: the indexed text of every turn carries the day
    it was said, so "in March 2023" matches every turn said in March and crowds out the turn that tells what
    happened (told in April as "last month"). The time itself is scored by the date boost (engine.question_spans).
    Added beside the subgoal, not in its place: docs/decisions/005-ranking-adjustments.md."""
    timeless = without_time_expressions(text)
    return timeless if timeless != text and keyword_stems(timeless) else text


def names_a_time(text: str) -> bool:
    """The text names a day, a period or a duration ("before 16 November 2023" is a date, not an event)."""
    return bool(resolve_time_expressions(text, _SOME_DAY))


def two_events(question: str) -> list[str]:
    """The two events a question relates in time, as texts to search for, or [] when it relates none (a date is
    no event: "What did Tim do before 16 November 2023?" is one event and a date). An elliptical second event
    borrows the first's words ("between Maria adopting Coco and Shadow" -> "Maria adopting Shadow"), and one that
    names nobody borrows the people the question names ("Melanie ... after the roadtrip" -> "Melanie the
    roadtrip")."""
    text = question.strip().rstrip("?.! ")
    if "?" in text or not _ASKS_TIME_OR_ORDER.search(text):
        return []
    between = _BETWEEN.search(text)
    if between is not None:
        rest = text[between.end():]
        joint = _AND.search(rest)
        if joint is None:
            return []
        first, second = rest[: joint.start()].strip(" ,"), rest[joint.end():].strip(" ,")
        before = text[: between.start()].strip()
        first_event = first if len(keyword_stems(first)) >= 2 else f"{before} {first}"
    else:
        relation = _RELATION_WORD.search(text)
        if relation is None:
            return []
        first, second = text[: relation.start()].strip(" ,"), text[relation.end():].strip(" ,")
        auxiliary = _AUXILIARY.search(second)
        if _ONLY_HOW_LONG.match(first) and auxiliary is not None and auxiliary.start() > 0:
            first_event, second = second[auxiliary.start():], second[: auxiliary.start()].strip()
        else:
            first_event = first
    if not first or not second:
        return []
    if not keyword_stems(second) or names_a_time(second) or names_a_time(first_event):
        return []
    if len(second.split()) == 1 and len(first_event.split()) > 1:
        second_event = " ".join([*first_event.split()[:-1], second])
    else:
        named = [name for name in entities(first_event) if name not in second]
        second_event = " ".join([*named, second])
    if len(keyword_stems(first_event)) < 1 or first_event.lower() == second_event.lower():
        return []
    return [first_event, second_event]


def asked_categories(question: str) -> list[int]:
    """The senses of the category noun a question asks for ("What activities ..." -> activity, ...), most
    frequent first; empty when the question asks for no category or WordNet does not know the noun."""
    match = _CATEGORY_HEAD.search(question)
    if match is None:
        return []
    head = match.group("head") or match.group("head2")
    if head[0].isupper():
        return []  # a name ("What does John do ...?"), not a category
    before = (match.group("before") or match.group("before2") or "").split()
    lexicon = noun_lexicon()
    lemma = (lexicon.lemma(f"{before[-1]} {head}") if before else None) or lexicon.lemma(head)
    if lemma is None:
        return []
    return [s for s in lexicon.senses(lemma)[:CATEGORY_SENSES] if lexicon.depth(s) >= MIN_CATEGORY_DEPTH]


# The shape of a question, for reporting recall by shape and for a query's explanation: "When ...?" questions hold
# up on unseen conversations while questions that name a date, ask how long, ask which year, list instances or
# relate two events are where recall is lost. The engine does not branch on these labels.
SHAPES = ("when", "names-a-date", "how-long", "which-year", "list", "two-event", "other")
_SHAPE_TWO_EVENT = re.compile(
    r"\bhow (long|many \w+)\b.*\b(before|after|between)\b|\b(before|after) or (before|after)\b"
    r"|\bwhich (came|happened|was) (first|earlier|later)\b", re.IGNORECASE)
_SHAPE_HOW_LONG = re.compile(r"^\s*how (long|many (days|weeks|months|years))\b", re.IGNORECASE)
_SHAPE_WHICH_YEAR = re.compile(r"\b(which|what) (year|month|day|date|week)\b", re.IGNORECASE)
_SHAPE_WHEN = re.compile(r"^\s*when\b", re.IGNORECASE)


def question_shape(question: str, analysis: QuestionAnalysis | None = None) -> str:
    """The first shape that fits, in the order of SHAPES' specificity: two-event, how-long, which-year,
    names-a-date, when, list, other. ``analysis``: the question's own, when it is at hand (else analysed here)."""
    if _SHAPE_TWO_EVENT.search(question):
        return "two-event"
    if _SHAPE_HOW_LONG.search(question):
        return "how-long"
    if _SHAPE_WHICH_YEAR.search(question):
        return "which-year"
    if names_a_time(question):
        return "names-a-date"
    if _SHAPE_WHEN.search(question):
        return "when"
    if (analysis or analyse(question)).aggregate:
        return "list"
    return "other"


def with_subgoals(analysis: QuestionAnalysis, extra: list[str]) -> QuestionAnalysis:
    """Add subgoals from another decomposer (an LLM) after the rule-based ones, without repeats, up to
    ``MAX_SUBGOALS`` in all."""
    known = {s.text.lower() for s in analysis.subgoals}
    room = max(0, MAX_SUBGOALS - len(analysis.subgoals))
    fresh = [t for t in extra if t.strip() and t.lower() not in known]
    added = [Subgoal(text=t, keywords=keyword_stems(t)) for t in fresh[:room]]
    return analysis.model_copy(update={"subgoals": analysis.subgoals + added})
