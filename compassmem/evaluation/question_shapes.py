"""The shape of a question, for reporting recall by shape: "When ...?" questions hold up on unseen conversations
while questions that name a date, ask how long, ask which year, list instances or relate two events are where
recall is lost. Used by benchmarks only; the engine does not branch on these labels."""

from __future__ import annotations

import re

from compassmem.retrieval.decomposition import analyse, names_a_time

SHAPES = ("when", "names-a-date", "how-long", "which-year", "list", "two-event", "other")

_TWO_EVENT = re.compile(
    r"\bhow (long|many \w+)\b.*\b(before|after|between)\b|\b(before|after) or (before|after)\b"
    r"|\bwhich (came|happened|was) (first|earlier|later)\b", re.IGNORECASE)
_HOW_LONG = re.compile(r"^\s*how (long|many (days|weeks|months|years))\b", re.IGNORECASE)
_WHICH_YEAR = re.compile(r"\b(which|what) (year|month|day|date|week)\b", re.IGNORECASE)
_WHEN = re.compile(r"^\s*when\b", re.IGNORECASE)


def question_shape(question: str) -> str:
    """The first shape that fits, in the order of SHAPES' specificity: two-event, how-long, which-year,
    names-a-date, when, list, other."""
    if _TWO_EVENT.search(question):
        return "two-event"
    if _HOW_LONG.search(question):
        return "how-long"
    if _WHICH_YEAR.search(question):
        return "which-year"
    if names_a_time(question):
        return "names-a-date"
    if _WHEN.search(question):
        return "when"
    if analyse(question).aggregate:
        return "list"
    return "other"
