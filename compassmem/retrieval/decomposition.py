"""Rule-based question analysis: what kind of answer is wanted, and which subgoals need evidence.

The offline path of decomposition (an LLM may replace it when configured): conjunctions split a question
into subgoals that each need their own evidence; cue words say whether time or causes are asked for.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from compassmem.processors.text_features import STOP_WORDS, entities, keyword_stems

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
    subgoals: list[Subgoal]


def keyword_query(text: str) -> str:
    """The content words of a question: what a rewrite searches for when the full question found too little."""
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z'\-]*|\d+", text) if w.lower() not in STOP_WORDS
             and w.lower() not in _QUESTION_WORDS]
    return " ".join(words)


def analyse(question: str) -> QuestionAnalysis:
    """The whole question is always the first subgoal; conjunct clauses add their own (``MAX_SUBGOALS`` in all)."""
    parts = [p.strip(" ?,.") for p in _SPLIT.split(question) if p and len(keyword_stems(p)) >= 2]
    texts = [question.strip()]
    texts.extend(p for p in parts if p and p.lower() != question.strip(" ?").lower())
    return QuestionAnalysis(
        question=question,
        temporal=bool(_TEMPORAL.search(question)),
        causal=bool(_CAUSAL.search(question)),
        aggregate=bool(_AGGREGATE.search(question)),
        entities=entities(question),
        subgoals=[Subgoal(text=t, keywords=keyword_stems(t)) for t in list(dict.fromkeys(texts))[:MAX_SUBGOALS]],
    )


def with_subgoals(analysis: QuestionAnalysis, extra: list[str]) -> QuestionAnalysis:
    """Add subgoals from another decomposer (an LLM) after the rule-based ones, without repeats, up to
    ``MAX_SUBGOALS`` in all."""
    known = {s.text.lower() for s in analysis.subgoals}
    room = max(0, MAX_SUBGOALS - len(analysis.subgoals))
    fresh = [t for t in extra if t.strip() and t.lower() not in known]
    added = [Subgoal(text=t, keywords=keyword_stems(t)) for t in fresh[:room]]
    return analysis.model_copy(update={"subgoals": analysis.subgoals + added})
