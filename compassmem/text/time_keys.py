"""Times as search keys: the days, months and years a turn speaks of, and those a question names.

A question that names a time ("Which city was Jon in on 20 October?") is answered by turns that share neither its
words nor its meaning ("Yesterday I met Dana in Boston", said on the 21st). The vector store keeps each turn's keys
as an indexed keyword list, so such turns are found by a filter (turns whose keys meet the question's), not only
lifted when words or meaning found them first.

Keys are ``d:YYYY-MM-DD``, ``m:YYYY-MM`` and ``y:YYYY``. For each time a turn mentions (``time_resolution``, resolved
against when it was said) it has the days of a span up to ``DAY_SPAN`` days ("last weekend", a trip from the 11th to
the 20th), the months of one up to ``MONTH_SPAN`` days ("in May", "last summer"), else its years ("three years ago",
"for three years": the start of a duration). A question's span gives the keys of the same level, so a day meets the
turns speaking of it, a month those speaking of that month.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, timedelta

from compassmem.core.models import Granularity, TimeAnchor

DAY_SPAN = 16
MONTH_SPAN = 100
_JOINED = re.compile(r"\s*(?:to|until|till|through|-|–)\s*", re.IGNORECASE)
# "between August 11 and August 15": "and" joins two days into a range only after "between".
_AND = re.compile(r"\s*and\s*", re.IGNORECASE)
_BETWEEN = re.compile(r"\bbetween\s+$", re.IGNORECASE)
# "I'm leaving the day after tomorrow ... I plan to return on October 27": an away of a few days, told as its
# two ends. A return word between two days (in the same turn, a sentence or two apart) joins them.
_RETURN = re.compile(r"\b(?:back|return(?:s|ing)?|home)\b", re.IGNORECASE)
_RETURN_WITHIN_CHARS = 160
# A question's span is never turned into more keys than this (a span of decades would list every year).
MAX_KEYS = 64


def span_keys(start: date, end: date) -> list[str]:
    """The keys of one span, at the finest level its length allows."""
    days = (end - start).days + 1
    if days <= DAY_SPAN:
        return [f"d:{start + timedelta(days=offset):%Y-%m-%d}" for offset in range(days)]
    if days <= MONTH_SPAN:
        keys, month = [], date(start.year, start.month, 1)
        while month <= end:
            keys.append(f"m:{month:%Y-%m}")
            month = date(month.year + month.month // 12, month.month % 12 + 1, 1)
        return keys
    return [f"y:{year}" for year in range(start.year, min(end.year, start.year + MAX_KEYS - 1) + 1)]


def joined_spans(text: str, anchors: Sequence[TimeAnchor]) -> list[tuple[date, date]]:
    """The spans two consecutive days of a text (in text order, as ``time_resolution`` gives them) make when joined
    as a range ("from October 11 to October 20", "May 3 - May 9", "between May 3 and May 9", "leaving on May 3
    ... back on May 9"): a trip from the 11th to the 20th covers the 12th as well."""
    spans: list[tuple[date, date]] = []
    position = 0
    ends: list[tuple[int, int]] = []
    for anchor in anchors:
        start = text.find(anchor.expression, position)
        if start < 0:
            return spans
        ends.append((start, start + len(anchor.expression)))
        position = start + len(anchor.expression)
    for (first, second), ((first_start, first_end), (second_start, _)) in zip(zip(anchors, anchors[1:]),
                                                                                zip(ends, ends[1:])):
        days = (second.start - first.end).days
        if not (first.granularity is Granularity.DAY and second.granularity is Granularity.DAY
                and 0 < days <= DAY_SPAN):
            continue
        between = text[first_end:second_start]
        if _JOINED.fullmatch(between) or (
                _AND.fullmatch(between) and _BETWEEN.search(text, max(0, first_start - 16), first_start)) or (
                len(between) <= _RETURN_WITHIN_CHARS and _RETURN.search(between)):
            spans.append((first.start, second.end))
    return spans


def turn_time_keys(text: str, anchors: Sequence[TimeAnchor]) -> list[str]:
    """A turn's keys: every time it mentions, and the ranges two of them make (sorted, each once). Not the time it
    was said: the turns of a session said on the day a question names are found by what they say, and as the
    channel's candidates they were rivals of the turns that speak of that day (LoCoMo development split, recall@10
    of questions naming a date: 86.5 without the channel, 81.7 with the days said; see
    docs/decisions/002-retrieval-across-conversation-styles.md)."""
    keys: set[str] = set()
    for start, end in [*((anchor.start, anchor.end) for anchor in anchors), *joined_spans(text, anchors)]:
        keys.update(span_keys(start, end))
    return sorted(keys)


def question_time_keys(spans: Sequence[tuple[date, date]]) -> tuple[str, ...]:
    """The keys a question's spans meet (at most MAX_KEYS): empty when it names no time."""
    keys = dict.fromkeys(key for start, end in spans for key in span_keys(start, end))
    return tuple(keys)[:MAX_KEYS]
