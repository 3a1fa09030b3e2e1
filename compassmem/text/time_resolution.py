"""Resolve time expressions in a turn against the moment the turn was said.

Deterministic, offline and regex-based: no dateparser, no network, no clock. Every expression is resolved
against the *local date* of ``reference`` (``reference.date()``, i.e. the calendar date in the reference's
own UTC offset); only "N hours/minutes ago" uses the full datetime.

Each resolved expression becomes a :class:`~compassmem.core.models.TimeAnchor` with inclusive ``start``/``end``
dates. ``granularity`` is the calendar unit the expression speaks in (day, week, month, season, year); the
span carries any vagueness ("a few days ago" is a 3-day window with day granularity).

Rules for ambiguous cases (each is a choice, written down so results are predictable):

* Weeks run Monday-Sunday. A weekend is the Saturday-Sunday of a week and has week granularity.
* ``last <weekday>``: the most recent such day strictly before the reference day ("last Saturday" said on
  Monday 2023-05-08 is 2023-05-06). ``next <weekday>``: the first such day strictly after it (never
  "the one in next week"). ``this <weekday>``: that day in the current Monday-Sunday week, past or future.
  ``this past``/``this coming`` mean ``last``/``next``.
* A bare weekday ("on Saturday", "Saturday night"): the most recent such day on or before the reference day.
  Conversations mostly recount the past, so tense-free mentions are read as past. Plurals ("on Saturdays")
  and "every/each Saturday" are habitual and give no anchor. ``the following``/``the next <weekday>`` are read
  like ``next``. Abbreviations ("Sat", "Tues.", "thurs", "fri") count in any case but "Sat" and "Sun", which
  count only capitalised (lowercase they are "sat" and "sun"), and bare only after "on", "by", "until",
  "since", "from", "before", "after" or before a part of the day ("on Sat", "fri night").
* Chat spellings are the words they stand for: "tmrw", "tmr", "2moro" (tomorrow), "yday" (yesterday),
  "tonite", "2nite", "last nite", and "wknd" for weekend.
* ``last/this/next week|month|year`` are calendar periods. ``the past week/month/year`` (and
  ``this past ...``) and ``the past/last/next N units`` are rolling windows ending (or starting) at the
  reference day. ``the next/following week|month|year|day`` are read like ``next ...`` (the reference is
  the only anchor this module has, as for "N days later").
* Weekends: ``this weekend`` is the current week's; ``last weekend``/``the past weekend``/``this past
  weekend`` the most recent one that ended before the reference day; ``next weekend`` the next week's;
  ``this coming weekend`` the first one starting after the reference day; ``over/on/at/during the weekend``
  the most recent one that started on or before the reference day (past-biased, like bare weekdays).
* ``N days ago`` is that day. ``N weeks ago`` is the Monday-Sunday week containing the day 7N days back
  ("two weeks ago" said on Monday 2023-05-08 is 2023-04-24..2023-04-30), consistent with "last week";
  ``N months ago`` / ``N years ago`` are the calendar month / year N back. ``in N units``, ``N units later``
  and ``N units from now`` go forward the same way; "later"/"earlier" are resolved against the reference,
  although in narration they may be relative to an earlier event. Hours and minutes give the day they land on.
  A fortnight is two weeks. Halves are counted in the next smaller unit, rounded down: "half a year ago" is
  the month six months back, "a year and a half ago" eighteen, "a week and a half ago" the day ten days back.
* A duration in the perfect ("I've had them for 3 years now", "been dancing for two years", "it has been five
  months since") is anchored at its start, N units back like "N units ago"; "for N units" without the perfect
  ("we stayed for 3 days") gives nothing.
* Vague counts give windows: "a couple (of)" = 2-3, "a few" = 2-4 (about 3), "several" = 3-7 units.
  "the other day" = the 7 days before the reference day. "recently"/"lately" = the 14 days up to and
  including the reference day (week granularity); a rough convention, since people say "recently" about
  things months old. "a while ago", "years ago" (no count) and decades are not resolved.
* Seasons are meteorological, northern hemisphere: spring Mar-May, summer Jun-Aug, fall/autumn Sep-Nov,
  winter Dec-Feb. "winter 2022"/"the winter of 2022" is the winter whose January is in 2022
  (2021-12-01..2022-02-28). ``last <season>``: the most recent one that ended before the reference day;
  ``next <season>``: the first one starting after it; ``this <season>``: the one containing the reference
  day, else the nearest one; ``in/during/over the <season>``: the one containing the reference day, else the
  most recent past one.
* Months: a month with a day but no year ("May 8th", "the 8th of May") takes the year that puts the date
  nearest to the reference day (so "Dec 20" said in early January is last December). A month alone
  ("in May", "since May") is the most recent such month not after the reference month. ``last May``: the
  most recent May strictly before the reference month; ``next May``: the first strictly after; ``this May``:
  May of the reference year. "early/mid/late May" (and "the beginning/middle/end of May") narrow to days
  1-10 / 11-20 / 21-end; "early/mid/late 2022" narrow to Jan-Apr / May-Aug / Sep-Dec; so do "early last
  month", "the end of the month" (the current one), "late next year", and for weeks "the beginning / middle /
  end of the week" are Monday-Tuesday / Wednesday-Thursday / Friday-Sunday.
* A day of the month alone ("on the 3rd", "by the 20th"): that day of the previous, current or next month,
  whichever is nearest the reference day (ties to the past); not by the tense of its sentence, which names when
  a thing was arranged as often as when it happens ("I've arranged care starting the 6th"). Only after "on", "by", "until", "before", "after", "since" or
  "from", and only when nothing follows that makes it an ordinal of something else ("on the 3rd floor", "the
  2nd try", "the 2nd of three tries"): an end of sentence, a comma, or a word such as "and", "at", "when",
  "we", "after", "to".
* False-positive guards: "May" and "March" must be capitalised (the modal verb "may", "march on"), and even
  then need a day, a year, a modifier ("early", "last") or a preceding preposition ("in", "since", "of",
  "by", ...); so do "April", "June" and "August", which are also names. Other full month names may stand
  alone; abbreviations ("Jan", "Sept.") need a day or year. ``last`` after a determiner ("the last time",
  "my last year of school", "the last night") gives nothing, nor does ``last/next ... of``. Ordinals such as
  "second" are never units.
* Bare years: only 19xx/20xx, and only after "in", "since", "of", "from", "during", "until", "by",
  "around", "before", "after", "year", or "early/mid/late", or as the second year of a range
  ("from 2019 to 2022"); a year after a month or season belongs to that expression. "2000 people" gives
  nothing; "in 2000 people" would (an accepted limitation). A year written short ("in '19", "summer of '08",
  "May '21") is in the 2000s unless that is more than ten years after the reference, else the 1900s; "the
  '90s" is a decade and gives nothing. Numeric dates: ISO ``YYYY-MM-DD``, and ``M/D`` or ``D/M`` (with an
  optional year) only where one order is impossible ("12/24", "24/12/2022"; ``5/8/2023`` is ambiguous between
  US and European order and gives nothing), and without a year only after "on", "by", "until", "since",
  "from", "before" or "after" ("I got 12/15 on the quiz", "9/10", "24/7" are scores, ratings and hours).
* Holidays: Christmas (Eve, Day; "Xmas"), Boxing Day, New Year's (Eve, Day), Halloween, Valentine's Day, St.
  Patrick's Day, the Fourth of July, Easter (Sunday), and the US dates of Thanksgiving, Mother's and Father's
  Day, Memorial and Labor Day. With a year, that year's; ``last``/``next``/``this`` as for months; alone, the
  nearest one (ties to the past), as a day and month without a year are read. "every Christmas", and a holiday
  alone in a sentence that says "usually", "always", "every year" or "tradition" ("During Thanksgiving we
  usually watch movies"), are habits and give nothing.
* Parts of a month: "the first/second/third/fourth/last week of <month>" are days 1-7, 8-14, 15-21, 22-28 and
  the last seven; "the first ... weekend of" is the Saturday and Sunday of the month's first ... Saturday; "the
  first/second half of" days 1-15 and 16 to the end. The month is "<month> [year]" (without a year the latest
  not after the reference, as "in May") or "this/last/next month".
* A lead before a time moves it: "the week / the weekend / the day / the Sunday / two weeks before <time>" is
  what "last week", "last weekend", "yesterday", "last Sunday", "two weeks ago" would be if said on the time's
  first day; "... after <time>" is "next week", "tomorrow", "two weeks later" said on its last day ("the
  weekend before 17 October", "three days after Thanksgiving 2022"). The expression is the two together.
* "since X" anchors X itself; expressions name the time phrase, not a licensing preposition ("in May" gives
  the expression "May"), except where the word changes the meaning ("in 3 days", "over the weekend").
* Overlapping matches: the longest wins ("the day before yesterday" is one anchor); anchors are returned in
  text order.
* Bounded work: only the first ``MAX_MATCHES_PER_RULE`` (64) matches of each rule in a text are resolved,
  and every scan is linear in the text, so a 16 KiB turn of thousands of dates costs milliseconds; such a
  turn gets anchors for its first dates only.

Decades ("the 90s"), holidays of moving calendars other than Easter (Hanukkah, Diwali, Eid, Lunar New Year) and
time-of-day clocks are out of scope.
"""

from __future__ import annotations

import bisect
import calendar
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import islice

from compassmem.core.models import Granularity, TimeAnchor

__all__ = ["has_time_expression", "is_bare_holiday", "resolve_time_expressions", "without_time_expressions"]


# --------------------------------------------------------------------------------------------- calendar


@dataclass(frozen=True)
class _Span:
    start: date
    end: date
    granularity: Granularity


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _shift_date_months(day: date, delta: int) -> date:
    """The same day-of-month ``delta`` months away, clamped to the month's length."""
    year, month = _add_months(day.year, day.month, delta)
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


_UNIT_GRANULARITY = {
    "day": Granularity.DAY,
    "week": Granularity.WEEK,
    "month": Granularity.MONTH,
    "year": Granularity.YEAR,
}


def _period(today: date, unit: str, offset: int) -> _Span:
    """The calendar day/week/month/year ``offset`` units away from the one containing ``today``."""
    if unit == "day":
        day = today + timedelta(days=offset)
        return _Span(day, day, Granularity.DAY)
    if unit == "week":
        start = _monday(today) + timedelta(weeks=offset)
        return _Span(start, start + timedelta(days=6), Granularity.WEEK)
    if unit == "month":
        year, month = _add_months(today.year, today.month, offset)
        return _Span(date(year, month, 1), _month_end(year, month), Granularity.MONTH)
    year = today.year + offset
    return _Span(date(year, 1, 1), date(year, 12, 31), Granularity.YEAR)


def _periods(today: date, unit: str, first: int, last: int) -> _Span:
    """From the start of period ``first`` to the end of period ``last`` (offsets, first <= last)."""
    return _Span(_period(today, unit, first).start, _period(today, unit, last).end, _UNIT_GRANULARITY[unit])


def _rolling(today: date, unit: str, count: int, forward: bool) -> _Span:
    """A window of ``count`` units ending (or, forward, starting) at ``today``."""
    sign = 1 if forward else -1
    if unit == "day":
        other = today + timedelta(days=sign * count)
    elif unit == "week":
        other = today + timedelta(weeks=sign * count)
    elif unit == "month":
        other = _shift_date_months(today, sign * count)
    else:
        other = _shift_date_months(today, sign * 12 * count)
    start, end = (today, other) if forward else (other, today)
    return _Span(start, end, _UNIT_GRANULARITY[unit])


# Meteorological seasons, northern hemisphere: (first month, last month); winter wraps the year end.
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11), "winter": (12, 2)}


def _season(name: str, year: int) -> _Span:
    """The season labelled ``year``; a winter is labelled by the year of its January."""
    first, last = _SEASONS[name]
    start_year = year - 1 if first > last else year
    return _Span(date(start_year, first, 1), _month_end(year, last), Granularity.SEASON)


def _season_candidates(name: str, today: date) -> list[_Span]:
    return [_season(name, year) for year in range(today.year - 2, today.year + 3)]


def _weekend(monday: date) -> _Span:
    return _Span(monday + timedelta(days=5), monday + timedelta(days=6), Granularity.WEEK)


# ------------------------------------------------------------------------------------ regex fragments

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_WEEKDAY_BY_PREFIX = {name[:3]: index for index, name in enumerate(_WEEKDAYS)}
# "Sat" and "Sun" count only capitalised: lowercase they are words ("I sat down", "the sun"). The others are read
# in any case, as people type them in chats ("last fri", "next tues").
_WEEKDAY = (r"(?:(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
            r"|(?P<ab>(?-i:Sat|Sun)|mon|tues?|weds?|thu(?:rs?)?|fri)(?:\.|\b))")
_PART_OF_DAY = r"(?P<pod>\s+(?:morning|afternoon|evening|night))?"

_MONTH_NUMBERS = {
    name: number
    for number, name in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        start=1,
    )
}
_MONTH_BY_PREFIX = {name[:3]: number for name, number in _MONTH_NUMBERS.items()}
# "May" and "March" are matched case-sensitively: lowercase they are almost always the verb.
_MONTH_FULL = (
    r"(?:january|february|(?-i:March|MARCH)|april|(?-i:May|MAY)|june|july|august|september|october"
    r"|november|december)\b"
)
_MONTH_ABBR = r"(?:jan|feb|(?-i:Mar|MAR)|apr|jun|jul|aug|sept|sep|oct|nov|dec)(?:\.|\b)"
_MONTH = rf"(?:{_MONTH_FULL}|{_MONTH_ABBR})"
# Months that are also names: they need a day, a year, a modifier or a preposition to count.
_NEEDS_CONTEXT = {"may", "march", "april", "june", "august"}

_DAY = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?\b"
_YEAR = r"(?:19|20)\d{2}(?!\d)"
# "in '19", "summer of '08"; not a decade ("the '90s").
_SHORT_YEAR = r"['’]\d{2}(?!\d|s\b)"
_ANY_YEAR = rf"(?:{_YEAR}|{_SHORT_YEAR})"

_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
}
# Vague counts as (fewest, most) units; "a few" is centred on 3.
_VAGUE_COUNTS = {"couple": (2, 3), "few": (2, 4), "several": (3, 7)}
_COUNT = (
    r"(?P<n>half\s+an?|(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|several|\d{1,3}"
    r"|(?:thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty"
    r"|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|an|a))"
)
_UNIT = r"(?P<unit>minute|hour|day|week|fortnight|month|year)s?\b"
# "two and a half years", "a week and a half": counted in the next smaller unit (``_counted``).
_HALF_MORE = r"(?P<half_more>\s+and\s+a\s+half)?"
_AND_HALF = r"(?P<and_half>\s+and\s+a\s+half)?"
_SMALLER_UNIT = {"year": ("month", 12), "month": ("week", 4), "week": ("day", 7), "day": ("hour", 24),
                 "hour": ("minute", 60)}

# Lookbehind checks "<word> <whitespace> up to the match": for each, the longest word (see _preceded_by).
_WORD_BEFORE_LENGTH: dict[re.Pattern[str], int] = {}


def _word_before(words: str) -> re.Pattern[str]:
    pattern = re.compile(rf"(?<!\w)(?:{words})\s+$", re.IGNORECASE)
    _WORD_BEFORE_LENGTH[pattern] = max(len(word) for word in words.split("|"))
    return pattern


_LAST_DETERMINER = _word_before("the|my|his|her|their|our|your|its|a|that|this|those|these|every|each|whose|very")
_HABITUAL = _word_before("every|each")
# The words that make a short form a date where alone it could be something else: a weekday abbreviation ("on
# Sat"), a day of the month ("by the 20th"), a numeric date without a year ("on 12/24").
_DAY_LEAD = _word_before("on|by|until|till|since|from|before|after")
# Prepositions that make a bare month or year a time expression ("in May", "since 2016", "class of 2016").
_DATE_PREPOSITION = _word_before(
    "in|on|since|during|until|till|by|from|of|through|throughout|around|before|after|year|circa"
)
# The words that tie a time expression into a sentence, taken out with it (without_time_expressions).
_TIME_LEAD = _word_before("in|on|at|since|during|until|till|by|from|of|through|throughout|around|before|after"
                          "|between|circa|over")
_JOINS_TWO_TIMES = re.compile(r"\s*(?:and|to|until|till|through|-|–)\s*", re.IGNORECASE)
_YEAR_RANGE_BEFORE = re.compile(r"(?<!\d)(?:19|20)\d{2}\s*(?:-|–|to|and|until|through)\s*$", re.IGNORECASE)
_SEASON_PREPOSITION = _word_before("in|during|over|throughout|through|all|since")
# "twice in a month", "the first time in three years": "in N units" is then a frequency or a duration.
_NOT_FUTURE_IN = _word_before("once|twice|thrice|times?|much|many|more|less")

_LOOKBACK_CHARS = 60


def _preceded_by(pattern: re.Pattern[str], text: str, start: int) -> bool:
    """Whether ``pattern`` matches in the ``_LOOKBACK_CHARS`` before ``start``, ending there."""
    low = max(0, start - _LOOKBACK_CHARS)
    longest = _WORD_BEFORE_LENGTH.get(pattern)
    if longest is not None:
        # "<word>\s+$": the word ends where the whitespace before ``start`` begins, so it starts at most
        # ``longest`` characters before that: search only there, not from every position of the window.
        word_end = low + len(text[low:start].rstrip())
        if word_end == start:
            return False
        low = max(low, word_end - longest)
    return pattern.search(text, low, start) is not None


# Characters that IGNORECASE matches to an ASCII letter but that str.lower() leaves alone (or expands):
# "yeſterday" is matched as "yesterday", and must then be looked up as that.
_ASCII_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def _lower(fragment: str) -> str:
    if not fragment.isascii():
        fragment = fragment.translate(_ASCII_FOLD)
    return fragment.lower()


def _may_hold_time(text: str) -> bool:
    """The prefilter: False only where no rule can match (as IGNORECASE matches: "ſ" is an "s")."""
    if not text.isascii() and ("\u0130" in text or "\u0131" in text or "\u017f" in text):
        text = text.translate(_ASCII_FOLD)  # lower() makes "İ" two characters, "i" and a combining dot
    # the Kelvin sign becomes "k"
    return _PREFILTER.search(text.lower()) is not None or _CASED_PREFILTER.search(text) is not None


def _norm(fragment: str) -> str:
    return " ".join(_lower(fragment).split())


def _counted(match: re.Match[str]) -> tuple[str, int, int]:
    """The unit and (fewest, most) count of a "<count> <unit>" match: a fortnight as two weeks; a half ("half a
    year", "a week and a half") counted in the next smaller unit, halves rounded down (six months, ten days)."""
    unit, raw = _lower(match["unit"]), _norm(match["n"])
    groups = match.groupdict()
    half = raw.startswith("half") or groups.get("and_half") is not None or groups.get("half_more") is not None
    fewest, most = (0, 0) if raw.startswith("half") else _count_range(raw)
    if unit == "fortnight":
        unit, fewest, most, half = "week", 2 * fewest + half, 2 * most + half, False
    if half and unit in _SMALLER_UNIT:
        unit, factor = _SMALLER_UNIT[unit]
        fewest, most = fewest * factor + factor // 2, most * factor + factor // 2
    return unit, fewest, most


def _year_value(raw: str, today: date) -> int:
    """A year as written: "2019", "'19" or "19" (two digits: the 2000s unless that is more than ten years ahead of
    ``today``)."""
    digits = raw.lstrip("'’")
    if len(digits) == 4:
        return int(digits)
    short = int(digits)
    return 2000 + short if 2000 + short <= today.year + 10 else 1900 + short


def _count_range(raw: str) -> tuple[int, int]:
    """(fewest, most) for a count such as "3", "two", "a few", "a couple of"."""
    word = _norm(raw)
    if word.isdigit():
        return int(word), int(word)
    for key, bounds in _VAGUE_COUNTS.items():
        if key in word:
            return bounds
    return _NUMBER_WORDS[word], _NUMBER_WORDS[word]


# ---------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class _Context:
    text: str
    reference: datetime
    today: date


_Resolver = Callable[[re.Match[str], _Context], _Span | None]
_RULES: list[tuple[re.Pattern[str], _Resolver, tuple[str, ...]]] = []


_WORD_START = r"(?<![\w$£€])"


def _rule(pattern: str, first: str, needs: tuple[str, ...] = ()) -> Callable[[_Resolver], _Resolver]:
    """Register a resolver for matches of ``pattern`` (case-insensitive, word-bounded at the start).

    ``first``: the characters a match can start with (a regex character class body). It changes no match;
    it lets the scan skip the other positions at once instead of trying the pattern's alternatives there.
    ``needs``: lowercase fragments one of which every match holds; a text holding none is not scanned (a rule
    whose matches start with common letters, such as the holidays', would otherwise try its alternatives at most
    words of every text: a substring test is far cheaper).
    """

    def register(resolver: _Resolver) -> _Resolver:
        _RULES.append((re.compile(rf"(?=[{first}]){_WORD_START}" + pattern, re.IGNORECASE), resolver, needs))
        return resolver

    return register


def _last_is_fine(match: re.Match[str], ctx: _Context) -> bool:
    """False for "the last time" style uses: "last" after a determiner is an ordinal, not a time."""
    starts_with_last = _lower(ctx.text[match.start() : match.start() + 4]) == "last"
    return not (starts_with_last and _preceded_by(_LAST_DETERMINER, ctx.text, match.start()))


_DAY_OFFSETS = {
    "the day before yesterday": -2,
    "day before yesterday": -2,
    "the day after tomorrow": 2,
    "day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
    "the next day": 1,
    "the following day": 1,
    # As people type them in chats.
    "yday": -1,
    "last nite": -1,
    "tonite": 0,
    "2nite": 0,
    "2night": 0,
    "tmrw": 1,
    "tmr": 1,
    "tmrrw": 1,
    "2moro": 1,
    "2morrow": 1,
    "2morow": 1,
}
_DAY_WORDS = "|".join(
    key.replace(" ", r"\s+") for key in sorted(_DAY_OFFSETS, key=len, reverse=True)
)


@_rule(rf"(?P<w>{_DAY_WORDS})\b{_PART_OF_DAY}", first="tdyl2")
def _day_word(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _last_is_fine(match, ctx):
        return None
    day = ctx.today + timedelta(days=_DAY_OFFSETS[_norm(match["w"])])
    return _Span(day, day, Granularity.DAY)


@_rule(r"the\s+other\s+day\b", first="t")
def _other_day(match: re.Match[str], ctx: _Context) -> _Span | None:
    return _Span(ctx.today - timedelta(days=7), ctx.today - timedelta(days=1), Granularity.DAY)


@_rule(r"(?:(?:just|very|quite|only)\s+)?(?:recently|lately)\b", first="jvqorl")
def _recently(match: re.Match[str], ctx: _Context) -> _Span | None:
    return _Span(ctx.today - timedelta(days=14), ctx.today, Granularity.WEEK)


def _weekday_index(match: re.Match[str]) -> int:
    """Monday 0 .. Sunday 6, of a full name or a capitalised abbreviation ("Thurs")."""
    return _WEEKDAY_BY_PREFIX[_lower(match["wd"] or match["ab"])[:3]]


_NEXT_RELS = {"next", "the next", "the following", "coming", "the coming", "this coming"}


@_rule(rf"(?P<rel>this\s+past|this\s+coming|the\s+following|the\s+next|last|next|this|coming)\s+{_WEEKDAY}"
       rf"{_PART_OF_DAY}", first="tlnc")
def _relative_weekday(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _last_is_fine(match, ctx):
        return None
    target = _weekday_index(match)
    rel = _norm(match["rel"])
    if rel in ("last", "this past"):
        back = (ctx.today.weekday() - target) % 7 or 7
        day = ctx.today - timedelta(days=back)
    elif rel in _NEXT_RELS:
        ahead = (target - ctx.today.weekday()) % 7 or 7
        day = ctx.today + timedelta(days=ahead)
    else:  # "this": the day of the current Monday-Sunday week
        day = _monday(ctx.today) + timedelta(days=target)
    return _Span(day, day, Granularity.DAY)


# A bare abbreviation is a day only after a ``_DAY_LEAD`` or before a part of the day ("on Sat", "Fri night"):
# "Sun" and "Sat" open sentences about other things too.


@_rule(rf"{_WEEKDAY}{_PART_OF_DAY}", first="mtwfs")
def _bare_weekday(match: re.Match[str], ctx: _Context) -> _Span | None:
    if _preceded_by(_HABITUAL, ctx.text, match.start()):
        return None
    if match["ab"] and not (match["pod"] or _preceded_by(_DAY_LEAD, ctx.text, match.start())):
        return None
    target = _weekday_index(match)
    # Past bias: the most recent such day on or before the reference day.
    day = ctx.today - timedelta(days=(ctx.today.weekday() - target) % 7)
    return _Span(day, day, Granularity.DAY)



@_rule(
    r"(?P<rel>this\s+past|this\s+coming|the\s+past|the\s+coming|the\s+next|the\s+following|last|next|this"
    r"|coming)\s+(?P<unit>weekend|wknd|week|month|year)\b(?!\s+of\b)",
    first="tlnc",
)
def _relative_period(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _last_is_fine(match, ctx):
        return None
    rel, unit, today = _norm(match["rel"]), _lower(match["unit"]), ctx.today
    if unit in ("weekend", "wknd"):
        this_week = _monday(today)
        if rel == "this":
            return _weekend(this_week)
        if rel in ("last", "this past", "the past"):
            # The most recent weekend that ended before the reference day: always the previous week's,
            # since the current week's ends on Sunday at the earliest.
            return _weekend(this_week - timedelta(weeks=1))
        if rel in ("coming", "the coming", "this coming"):
            return _weekend(this_week if today.weekday() < 5 else this_week + timedelta(weeks=1))
        return _weekend(this_week + timedelta(weeks=1))
    if rel == "last":
        return _period(today, unit, -1)
    if rel == "this":
        return _period(today, unit, 0)
    if rel in _NEXT_RELS:
        return _period(today, unit, 1)
    return _rolling(today, unit, 1, forward=False)  # "the past week", "this past month"


@_rule(r"(?:over|on|at|during)\s+the\s+(?:weekend|wknd)\b", first="oad")
def _the_weekend(match: re.Match[str], ctx: _Context) -> _Span | None:
    # Past bias: the most recent weekend that started on or before the reference day.
    this_week = _monday(ctx.today)
    return _weekend(this_week if ctx.today.weekday() >= 5 else this_week - timedelta(weeks=1))


@_rule(r"the\s+(?P<unit>weekend|wknd|week|month|year)\s+before\s+last\b", first="t")
def _before_last(match: re.Match[str], ctx: _Context) -> _Span | None:
    unit = _lower(match["unit"])
    if unit in ("weekend", "wknd"):
        return _weekend(_monday(ctx.today) - timedelta(weeks=2))
    return _period(ctx.today, unit, -2)


@_rule(r"(?P<when>earlier|later)\s+this\s+(?P<unit>week|month|year)\b", first="el")
def _earlier_later(match: re.Match[str], ctx: _Context) -> _Span | None:
    period, today = _period(ctx.today, _lower(match["unit"]), 0), ctx.today
    if _lower(match["when"]) == "earlier":
        return _Span(period.start, max(period.start, today - timedelta(days=1)), period.granularity)
    return _Span(min(period.end, today + timedelta(days=1)), period.end, period.granularity)


@_rule(rf"the\s+(?P<dir>past|last|next|coming)\s+{_COUNT}\s+{_UNIT}(?!\s+of\b)", first="t")
def _rolling_window(match: re.Match[str], ctx: _Context) -> _Span | None:
    unit, _, most = _counted(match)
    forward = _lower(match["dir"]) in ("next", "coming")
    if unit in ("minute", "hour"):
        return _Span(ctx.today, ctx.today, Granularity.DAY)
    return _rolling(ctx.today, unit, most, forward)


def _offset_span(ctx: _Context, unit: str, fewest: int, most: int, forward: bool) -> _Span:
    if unit in ("minute", "hour"):
        step = timedelta(hours=1) if unit == "hour" else timedelta(minutes=1)
        sign = 1 if forward else -1
        ends = sorted(((ctx.reference + sign * fewest * step).date(), (ctx.reference + sign * most * step).date()))
        return _Span(ends[0], ends[1], Granularity.DAY)
    if forward:
        return _periods(ctx.today, unit, fewest, most)
    return _periods(ctx.today, unit, -most, -fewest)


@_rule(rf"(?<![\d.]){_COUNT}{_HALF_MORE}\s+{_UNIT}{_AND_HALF}\s+(?P<dir>ago|back|earlier|later|from\s+now)\b",
       first=r"acfstenoh\d")
def _units_ago(match: re.Match[str], ctx: _Context) -> _Span | None:
    unit, fewest, most = _counted(match)
    forward = _lower(match["dir"]) not in ("ago", "back", "earlier")
    return _offset_span(ctx, unit, fewest, most, forward)


@_rule(rf"in\s+(?:about\s+|around\s+|another\s+)?{_COUNT}{_HALF_MORE}\s+{_UNIT}{_AND_HALF}"
       r"(?!\s+(?:ago|back|earlier|later)\b)",
       first="i")
def _in_units(match: re.Match[str], ctx: _Context) -> _Span | None:
    if _preceded_by(_NOT_FUTURE_IN, ctx.text, match.start()):
        return None
    unit, fewest, most = _counted(match)
    return _offset_span(ctx, unit, fewest, most, forward=True)


# A duration in the perfect ("I've had them for 3 years", "been painting for seven years now", "it has been two
# years since") tells when a state began: the anchor is that start, N units back, as "N units ago" would give.
# Without the perfect ("we stayed for 3 days") a duration says how long, not when, and gives nothing.
_PERFECT_BEFORE = re.compile(r"\b(?:have|has|had|'ve|been)\b[^.!?]*$", re.IGNORECASE)


@_rule(rf"(?:for|it\s+has\s+been|it's\s+been|been)\s+(?:about\s+|around\s+|almost\s+|nearly\s+|over\s+|more\s+than\s+)?"
       rf"{_COUNT}{_HALF_MORE}\s+{_UNIT}{_AND_HALF}(?P<now>\s+now\b)?(?!\s+(?:ago|back|earlier|later|from\s+now)\b)",
       first="fbi")
def _duration_start(match: re.Match[str], ctx: _Context) -> _Span | None:
    lead = _lower(match.group(0).split()[0])
    perfect = lead in ("it", "it's", "been") or match["now"] is not None
    if not perfect:
        sentence_before = ctx.text[max(0, match.start() - _LOOKBACK_CHARS) : match.start()]
        perfect = _PERFECT_BEFORE.search(sentence_before) is not None
    unit, fewest, most = _counted(match)
    if not perfect or unit in ("minute", "hour"):
        return None
    return _offset_span(ctx, unit, fewest, most, forward=False)


_SEASON = r"(?P<s>summer|winter|spring|fall|autumn)\b"


@_rule(
    rf"(?P<rel>this\s+past|this\s+coming|the\s+past|the\s+coming|last|next|this|coming)\s+{_SEASON}"
    r"(?!\s+of\b)",
    first="tlnc",
)
def _relative_season(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _last_is_fine(match, ctx):
        return None
    rel, today = _norm(match["rel"]), ctx.today
    candidates = _season_candidates(_lower(match["s"]), today)
    if rel in ("last", "this past", "the past"):
        return max((c for c in candidates if c.end < today), key=lambda c: c.end)
    if rel in ("next", "coming", "the coming", "this coming"):
        return min((c for c in candidates if c.start > today), key=lambda c: c.start)
    return _nearest_season(candidates, today)


def _nearest_season(candidates: list[_Span], today: date) -> _Span:
    def distance(span: _Span) -> int:
        if span.start <= today <= span.end:
            return 0
        return (span.start - today).days if span.start > today else (today - span.end).days

    # Ties go to the past one (min keeps the first; candidates are in chronological order).
    return min(candidates, key=distance)


@_rule(rf"(?:the\s+)?{_SEASON}\s+(?:of\s+)?(?P<y>{_ANY_YEAR})", first="tswfa")
def _season_of_year(match: re.Match[str], ctx: _Context) -> _Span | None:
    return _season(_lower(match["s"]), _year_value(match["y"], ctx.today))


@_rule(rf"(?:the\s+)?{_SEASON}(?!\s+of\b)", first="tswfa")
def _season_after_preposition(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _preceded_by(_SEASON_PREPOSITION, ctx.text, match.start()):
        return None
    today = ctx.today
    candidates = [c for c in _season_candidates(_lower(match["s"]), today) if c.start <= today]
    return max(candidates, key=lambda c: c.start)  # contains the reference day, else the latest past one


_MONTH_PARTS = {"early": (1, 10), "mid": (11, 20), "late": (21, 31)}
_PART = r"(?P<part>early|mid|late|(?:the\s+)?(?:beginning|start|middle|end)\s+of)"
_PART_WORDS = {"beginning": "early", "start": "early", "middle": "mid", "end": "late"}


def _part_key(raw: str) -> str:
    """"early", "mid" or "late" of a part as written ("the end of" -> "late")."""
    word = _norm(raw)
    if word in _MONTH_PARTS:
        return word
    return next(_PART_WORDS[w] for w in word.split() if w in _PART_WORDS)


def _month_number(raw: str) -> int:
    return _MONTH_BY_PREFIX[_lower(raw).rstrip(".")[:3]]


def _is_full_month_name(raw: str) -> bool:
    return _lower(raw) in _MONTH_NUMBERS


def _month_span(year: int, month: int, part: str | None) -> _Span:
    end = _month_end(year, month)
    if part is None:
        return _Span(date(year, month, 1), end, Granularity.MONTH)
    first, last = _MONTH_PARTS[_part_key(part)]
    return _Span(date(year, month, first), date(year, month, min(last, end.day)), Granularity.MONTH)


def _nearest_dated(month: int, day: int, today: date) -> date | None:
    """The date with this month and day nearest to ``today`` (ties to the past)."""
    options = []
    # Four years either side, so that 29 February always finds a leap year.
    for year in range(today.year - 4, today.year + 5):
        try:
            options.append(date(year, month, day))
        except ValueError:  # 29 February in a common year
            continue
    return min(options, key=lambda d: (abs((d - today).days), d > today), default=None)


@_rule(
    rf"(?:{_PART}[\s-]+)?(?:(?:the\s+)?(?P<d1>{_DAY})(?:\s+of)?\s+(?P<m1>{_MONTH})"
    rf"|(?P<m2>{_MONTH})(?:\s+(?:the\s+)?(?P<d2>{_DAY}))?)(?:,?\s+(?:of\s+)?(?P<y>{_ANY_YEAR}))?",
    first=r"emltjfasondb\d",
)
def _month_date(match: re.Match[str], ctx: _Context) -> _Span | None:
    raw_month = match["m1"] or match["m2"]
    month = _month_number(raw_month)
    raw_day = match["d1"] or match["d2"]
    year = _year_value(match["y"], ctx.today) if match["y"] else None
    if raw_day is not None:
        day_number = int(_lower(raw_day).rstrip("stndrh"))  # "8th" -> 8
        if year is not None:
            try:
                day = date(year, month, day_number)
            except ValueError:
                return None
        else:
            found = _nearest_dated(month, day_number, ctx.today)
            if found is None:
                return None
            day = found
        return _Span(day, day, Granularity.DAY)
    if not _is_full_month_name(raw_month) and year is None:
        return None  # "Jan", "Sept." alone are too ambiguous
    licensed = (
        year is not None
        or match["part"] is not None
        or _preceded_by(_DATE_PREPOSITION, ctx.text, match.start())
        or _lower(raw_month) not in _NEEDS_CONTEXT
    )
    if not licensed or _preceded_by(_HABITUAL, ctx.text, match.start()):
        return None
    return _month_span(year if year is not None else _latest_year_of(month, ctx.today), month, match["part"])


def _latest_year_of(month: int, today: date) -> int:
    """The year of the most recent such month not after ``today``'s ("in May")."""
    return today.year if month <= today.month else today.year - 1


@_rule(rf"(?P<rel>this\s+past|this\s+coming|last|next|this)\s+(?P<m>{_MONTH_FULL})", first="tln")
def _relative_month(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _last_is_fine(match, ctx):
        return None
    month, rel, today = _month_number(match["m"]), _norm(match["rel"]), ctx.today
    if rel in ("last", "this past"):
        year = today.year if month < today.month else today.year - 1
    elif rel in ("next", "this coming"):
        year = today.year if month > today.month else today.year + 1
    else:
        year = today.year
    return _month_span(year, month, None)


_YEAR_PARTS = {"early": (1, 4), "mid": (5, 8), "late": (9, 12)}


def _year_span(year: int, part: str | None) -> _Span:
    """A year, or its early / mid / late third (``part`` as ``_part_key`` gives it)."""
    first, last = _YEAR_PARTS[part] if part else (1, 12)
    return _Span(date(year, first, 1), _month_end(year, last), Granularity.YEAR)


@_rule(rf"(?:(?P<part>early|mid|late)[\s-]+)?(?P<y>{_YEAR})(?!s\b|'s\b|[.,]\d|\s*%)", first="eml12")
def _bare_year(match: re.Match[str], ctx: _Context) -> _Span | None:
    start = match.start()
    if match["part"] is None and not (
        _preceded_by(_DATE_PREPOSITION, ctx.text, start) or _preceded_by(_YEAR_RANGE_BEFORE, ctx.text, start)
    ):
        return None
    return _year_span(int(match["y"]), _lower(match["part"]) if match["part"] else None)


@_rule(rf"(?P<y>{_SHORT_YEAR})", first="'’")
def _short_year(match: re.Match[str], ctx: _Context) -> _Span | None:
    # After a preposition, as a bare year: "in '19", "since '08".
    if not _preceded_by(_DATE_PREPOSITION, ctx.text, match.start()):
        return None
    return _year_span(_year_value(match["y"], ctx.today), None)


_WEEK_PARTS = {"early": (0, 1), "mid": (2, 3), "late": (4, 6)}


@_rule(rf"{_PART}[\s-]+(?P<rel>this|last|next|the)\s+(?P<unit>week|month|year)\b(?!\s+(?:of|before|after)\b)",
       first="emltbs", needs=tuple(f"{rel} {unit}" for rel in ("this", "last", "next", "the")
                                   for unit in ("week", "month", "year")))
def _part_of_period(match: re.Match[str], ctx: _Context) -> _Span | None:
    """"early last month", "the end of the week", "late next year": the part of that week, month or year."""
    rel, unit, part = _norm(match["rel"]), _lower(match["unit"]), _part_key(match["part"])
    period = _period(ctx.today, unit, {"last": -1, "next": 1}.get(rel, 0))
    if unit == "week":
        first, last = _WEEK_PARTS[part]
        return _Span(period.start + timedelta(days=first), period.start + timedelta(days=last), Granularity.WEEK)
    if unit == "month":
        return _month_span(period.start.year, period.start.month, match["part"])
    return _year_span(period.start.year, part)


# "on the 3rd", "by the 20th": a day of the month without the month, when followed by nothing that makes it an
# ordinal of something else ("on the 3rd floor", "on the 2nd try"). A time word may follow ("on the 15th after my
# trip", "from the 3rd to the 5th"); "of" may not ("on the 2nd of three tries").
_ENDS_A_DATE = (r"(?=\s*(?:$|[.,;:!?)\]\"'’]|(?:and|or|but|so|at|in|when|then|we|i|you|he|she|they|it|my|our|your"
                r"|his|her|their|because|as|if|this|that|which|who|after|before|until|till|through|to)\b))")


@_rule(rf"the\s+(?P<d>(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th))\b{_ENDS_A_DATE}", first="t")
def _day_of_month(match: re.Match[str], ctx: _Context) -> _Span | None:
    if not _preceded_by(_DAY_LEAD, ctx.text, match.start()):
        return None
    number, today = int(_lower(match["d"])[:-2]), ctx.today
    options = []
    for offset in (-1, 0, 1):  # that day of the previous, this or the next month, the nearest (ties to the past)
        year, month = _add_months(today.year, today.month, offset)
        if number <= calendar.monthrange(year, month)[1]:
            options.append(date(year, month, number))
    day = min(options, key=lambda d: (abs((d - today).days), d > today))
    return _Span(day, day, Granularity.DAY)


def _easter(year: int) -> date:
    """Easter Sunday (the anonymous Gregorian algorithm)."""
    golden, (century, within) = year % 19, divmod(year, 100)
    leap_centuries, century_rest = divmod(century, 4)
    correction = (century - (century + 8) // 25 + 1) // 3
    epact = (19 * golden + century - leap_centuries - correction + 15) % 30
    within_leaps, within_rest = divmod(within, 4)
    weekday = (32 + 2 * century_rest + 2 * within_leaps - epact - within_rest) % 7
    shift = (golden + 11 * epact + 22 * weekday) // 451
    month, day = divmod(epact + weekday - 7 * shift + 114, 31)
    return date(year, month, day + 1)


def _nth_weekday(year: int, month: int, weekday: int, nth: int) -> date:
    """The ``nth`` such weekday of a month (Monday 0); ``nth`` -1 is the last."""
    if nth < 0:
        last = _month_end(year, month)
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (nth - 1))


def _fixed(month: int, day: int) -> Callable[[int], date]:
    return lambda year: date(year, month, day)


# The day of a holiday in a given year. Where countries differ, the US date (Thanksgiving, Mother's and Father's
# Day, Memorial and Labor Day).
_HOLIDAY_DATES: dict[str, Callable[[int], date]] = {
    "christmas": _fixed(12, 25),
    "christmas day": _fixed(12, 25),
    "christmas eve": _fixed(12, 24),
    "boxing day": _fixed(12, 26),
    "new year's eve": _fixed(12, 31),
    "new year's day": _fixed(1, 1),
    "halloween": _fixed(10, 31),
    "valentine's day": _fixed(2, 14),
    "st patrick's day": _fixed(3, 17),
    "fourth of july": _fixed(7, 4),
    "easter": _easter,
    "thanksgiving": lambda year: _nth_weekday(year, 11, 3, 4),
    "mother's day": lambda year: _nth_weekday(year, 5, 6, 2),
    "father's day": lambda year: _nth_weekday(year, 6, 6, 3),
    "memorial day": lambda year: _nth_weekday(year, 5, 0, -1),
    "labor day": lambda year: _nth_weekday(year, 9, 0, 1),
}
_HOLIDAY = (
    r"(?P<h>(?:christmas|xmas)(?:\s+(?:eve|day))?|boxing\s+day|new\s+year['’]?s(?:\s+(?:eve|day))?|halloween"
    r"|valentine(?:['’]s(?:\s+day)?|s?\s+day)|(?:st\.?|saint)\s+patrick['’]?s(?:\s+day)?"
    r"|(?:the\s+)?fourth\s+of\s+july|easter(?:\s+sunday)?|thanksgiving(?:\s+day)?|mother['’]?s\s+day"
    r"|father['’]?s\s+day|memorial\s+day|labou?r\s+day)\b"
)


_BARE_HOLIDAY = re.compile(_HOLIDAY, re.IGNORECASE)
# A holiday said of a habit: no one year's.
_HABIT_CUE = re.compile(r"\b(?:usually|always|every\s+year|each\s+year|traditions?|traditionally|typically)\b",
                        re.IGNORECASE)
_SENTENCE_BOUND = re.compile(r"[.!?\n]")


def _sentence_around(text: str, start: int, end: int) -> str:
    """The sentence holding ``text[start:end]``, at most ``_LOOKBACK_CHARS`` either side."""
    low, high = max(0, start - _LOOKBACK_CHARS), min(len(text), end + _LOOKBACK_CHARS)
    before = [m.end() for m in _SENTENCE_BOUND.finditer(text, low, start)]
    after = _SENTENCE_BOUND.search(text, end, high)
    return text[before[-1] if before else low: after.start() if after else high]


def is_bare_holiday(expression: str) -> bool:
    """Whether an anchor's expression is a holiday's name alone ("Thanksgiving", not "last Thanksgiving" or
    "Christmas 2022"): the name of an occasion as much as a day, and which year's is a guess."""
    return _BARE_HOLIDAY.fullmatch(expression.strip()) is not None


# A word of each holiday's name (as its words begin) and its ``_HOLIDAY_DATES`` key.
_HOLIDAY_WORDS = {"halloween": "halloween", "boxing": "boxing day", "valentine": "valentine's day",
                  "patrick": "st patrick's day", "fourth": "fourth of july", "easter": "easter",
                  "thanksgiving": "thanksgiving", "mother": "mother's day", "father": "father's day",
                  "memorial": "memorial day", "labo": "labor day"}


def _holiday_key(raw: str) -> str:
    """The ``_HOLIDAY_DATES`` key of a holiday as written ("Xmas Eve" -> "christmas eve")."""
    words = [word.replace("’", "'").removesuffix("'s").rstrip(".") for word in _norm(raw).split()]
    if words[0] in ("christmas", "xmas"):
        return " ".join(["christmas", *words[1:]])
    if words[0] == "new":
        return "new year's eve" if words[-1] == "eve" else "new year's day"
    return next(key for word in words for stem, key in _HOLIDAY_WORDS.items() if word.startswith(stem))


@_rule(rf"(?:(?P<rel>this\s+past|this\s+coming|last|next|this)\s+)?{_HOLIDAY}(?:,?\s+(?:of\s+)?(?P<y>{_ANY_YEAR}))?",
       first="tlncxbhvsefm",
       needs=("christmas", "xmas", "boxing", "new year", "halloween", "valentine", "patrick", "fourth of", "easter",
              "thanksgiving", "s day", "memorial", "labor", "labour"))
def _holiday(match: re.Match[str], ctx: _Context) -> _Span | None:
    """A holiday: of the year given, else the last or next one, else the nearest (ties to the past), as a month and
    day without a year are read."""
    if not _last_is_fine(match, ctx) or _preceded_by(_HABITUAL, ctx.text, match.start()):
        return None
    rel = _norm(match["rel"]) if match["rel"] else ""
    if not rel and not match["y"] and _HABIT_CUE.search(_sentence_around(ctx.text, match.start(), match.end())):
        return None  # "During Thanksgiving we usually watch movies": a habit, not one Thanksgiving
    day_of, today = _HOLIDAY_DATES[_holiday_key(match["h"])], ctx.today
    options = [] if match["y"] else [day_of(year) for year in range(today.year - 1, today.year + 2)]
    if match["y"]:
        day = day_of(_year_value(match["y"], today))
    elif rel in ("last", "this past"):
        day = max(d for d in options if d < today)
    elif rel in ("next", "this coming"):
        day = min(d for d in options if d > today)
    elif rel == "this":
        day = day_of(today.year)
    else:
        day = min(options, key=lambda d: (abs((d - today).days), d > today))
    return _Span(day, day, Granularity.DAY)


@_rule(r"(?P<y>(?:19|20)\d{2})-(?P<m>0[1-9]|1[0-2])-(?P<d>0[1-9]|[12]\d|3[01])(?!\d)", first="12")
def _iso_date(match: re.Match[str], ctx: _Context) -> _Span | None:
    try:
        day = date(int(match["y"]), int(match["m"]), int(match["d"]))
    except ValueError:
        return None
    return _Span(day, day, Granularity.DAY)


_NTH = {"first": 1, "second": 2, "third": 3, "fourth": 4, "last": -1}


@_rule(rf"the\s+(?P<nth>first|second|third|fourth|last)\s+(?P<unit>week|weekend|half)\s+of\s+"
       rf"(?:(?P<rel>this|last|next|the)\s+month\b|(?P<m>{_MONTH})(?:,?\s+(?:of\s+)?(?P<y>{_ANY_YEAR}))?)",
       first="t", needs=("week", "half"))
def _nth_part_of_month(match: re.Match[str], ctx: _Context) -> _Span | None:
    """"the first weekend of August 2023", "the second week of November", "the first half of next month"."""
    today, nth = ctx.today, _NTH[_lower(match["nth"])]
    if match["m"]:
        month = _month_number(match["m"])
        year = _year_value(match["y"], today) if match["y"] else _latest_year_of(month, today)
    else:
        period = _period(today, "month", {"last": -1, "next": 1}.get(_lower(match["rel"]), 0))
        year, month = period.start.year, period.start.month
    end = _month_end(year, month)
    unit = _lower(match["unit"])
    if unit == "half":
        if nth not in (1, 2):
            return None
        return _Span(date(year, month, 1 if nth == 1 else 16), date(year, month, 15) if nth == 1 else end,
                     Granularity.MONTH)
    if unit == "week":
        start = end - timedelta(days=6) if nth < 0 else date(year, month, 1 + 7 * (nth - 1))
        return _Span(start, start + timedelta(days=6), Granularity.WEEK)
    saturday = _nth_weekday(year, month, 5, nth)
    return _Span(saturday, saturday + timedelta(days=1), Granularity.WEEK)


# "on 12/24", "24/12/2023": a numeric date only where one order is impossible (a part above 12), and then only with
# a year or after a preposition ("on", "by", "until", ...): "3/4", "9/10", "24/7" and "12/15" on a test are
# fractions, ratings and scores.


@_rule(r"(?P<a>[0-3]?\d)/(?P<b>[0-3]?\d)(?:/(?P<y>(?:19|20)?\d{2}))?(?![\d/])", first=r"\d")
def _numeric_date(match: re.Match[str], ctx: _Context) -> _Span | None:
    first, second = int(match["a"]), int(match["b"])
    if (first > 12) == (second > 12) or (first, second) == (24, 7):
        return None  # both orders possible (or neither): no guess
    if match["y"] is None and not _preceded_by(_DAY_LEAD, ctx.text, match.start()):
        return None
    month, day_number = (first, second) if second > 12 else (second, first)
    if match["y"] is None:
        found = _nearest_dated(month, day_number, ctx.today)
        return None if found is None else _Span(found, found, Granularity.DAY)
    # An impossible day (31/4) raises ValueError: no anchor.
    day = date(_year_value(match["y"], ctx.today), month, day_number)
    return _Span(day, day, Granularity.DAY)


# ------------------------------------------------------------------------------------------ public API

# Every rule needs one of these words or a digit; turns without any skip the rules entirely. It runs on the
# lowercased text (``_may_hold_time``): a case-insensitive alternation is a few times slower to scan.
_PREFILTER = re.compile(
    r"\d|day|night|tomorrow|morning|afternoon|evening|week|month|year|summer|winter|spring|fall|autumn"
    r"|recently|lately|january|february|march|april|may|june|july|august|september|october|november"
    r"|december|christmas|xmas|halloween|thanksgiving|easter(?!n)|valentine|patrick|yday|tmr|\bnite|tonite|2nite"
    r"|wknd"
)
# Weekday abbreviations, looked for in the text as written: any case, but "Sat" and "Sun" only capitalised.
_CASED_PREFILTER = re.compile(r"\b(?:(?i:mon|tues?|weds?|thu|thurs?|fri)|Sat|Sun)\b")
# Any fixed reference works for detection: whether an expression resolves does not depend on it.
_DETECTION_REFERENCE = datetime(2000, 6, 15, 12, 0)
# Only the first this many matches of each rule in a text are resolved: a bound on the work per turn that no
# conversational turn comes near (a 16 KiB turn can hold thousands of "May"s or years, each a resolver call).
MAX_MATCHES_PER_RULE = 64


def _matches(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    return islice(pattern.finditer(text), MAX_MATCHES_PER_RULE)


# "the week before August 3, 2023", "the Sunday before Christmas", "two weeks after 3 May": a period, a weekday or a
# count just before "before"/"after" and a time expression, resolved against that time's first (last) day as
# "last week", "last Sunday", "in two weeks" are against the day they are said.
_RELATIVE_LEAD = re.compile(
    rf"(?<!\w)(?:(?:the|last)\s+(?P<period>day|weekend|week|month|year)|(?:the|last)\s+{_WEEKDAY}"
    rf"|{_COUNT}{_HALF_MORE}\s+{_UNIT}{_AND_HALF})\s+(?P<dir>before|after)\s+$",
    re.IGNORECASE,
)


def _led(text: str, start: int, span: _Span, ctx: _Context) -> tuple[int, _Span] | None:
    """Where a lead before ``text[start:]`` ("the week before") starts, and the time it names; None without one."""
    lead = _RELATIVE_LEAD.search(text, max(0, start - _LOOKBACK_CHARS), start)
    if lead is None:
        return None
    after = _lower(lead["dir"]) == "after"
    relative = "next" if after else "last"
    if lead["period"]:
        period = _lower(lead["period"])
        phrase = ("tomorrow" if after else "yesterday") if period == "day" else f"{relative} {period}"
    elif lead["wd"] or lead["ab"]:
        phrase = f"{relative} {lead['wd'] or lead['ab']}"
    else:
        phrase = f"{text[lead.start():lead.start('dir')].strip()} {'later' if after else 'ago'}"
    day = span.end if after else span.start
    moved, _ = _candidates(phrase, datetime(day.year, day.month, day.day, 12, tzinfo=ctx.reference.tzinfo),
                           leads=False)
    return (lead.start(), moved[0][2]) if moved else None


def _candidates(text: str, reference: datetime, leads: bool = True) -> tuple[list[tuple[int, int, _Span]], bool]:
    """The non-overlapping resolved matches in text order, and whether some resolver failed on a date; with
    ``leads``, a time led by "the week before" and the like is the time the two name together (``_with_leads``)."""
    ctx = _Context(text=text, reference=reference, today=reference.date())
    found: list[tuple[int, int, int, _Span]] = []
    failed = False
    lowered = _lower(text)
    for order, (pattern, resolver, needs) in enumerate(_RULES):
        if needs and not any(fragment in lowered for fragment in needs):
            continue
        for match in _matches(pattern, text):
            try:
                span = resolver(match, ctx)
            except (ValueError, OverflowError):  # a date outside what datetime.date can hold
                failed = True
                continue
            if span is not None:
                found.append((match.start(), match.end(), order, span))
    # Longest match first (ties: earlier in the text, then earlier rule); keep those that overlap nothing kept.
    # The kept matches are disjoint: kept in text order, a match can only overlap its two neighbours there.
    found.sort(key=lambda item: (item[0] - item[1], item[0], item[2]))
    starts: list[int] = []
    kept: list[tuple[int, int, _Span]] = []
    for start, end, _, span in found:
        index = bisect.bisect_right(starts, start)
        if index > 0 and kept[index - 1][1] > start:
            continue
        if index < len(kept) and kept[index][0] < end:
            continue
        starts.insert(index, start)
        kept.insert(index, (start, end, span))
    if leads and kept and ("before" in lowered or "after" in lowered):
        kept = _with_leads(text, kept, ctx)
    return kept, failed


def _with_leads(text: str, kept: list[tuple[int, int, _Span]], ctx: _Context) -> list[tuple[int, int, _Span]]:
    """``kept`` with each time that a lead comes before ("the week before" August 3) replaced by the time the
    two name together, from the lead's start; a time the lead held ("last weekend" before April 10) goes."""
    out: list[tuple[int, int, _Span]] = []
    for start, end, span in kept:
        led = _led(text, start, span, ctx)
        if led is not None:
            start, span = led
            while out and out[-1][1] > start:
                out.pop()
        out.append((start, end, span))
    return out


# has_time_expression's answers for the texts resolve_time_expressions saw last: the pipeline asks both about
# each turn, and this spares the second scan. Whether a match resolves depends on the text alone (the module
# docstring's rules); only a date arithmetic failure can depend on the reference, and then nothing is noted.
_DETECTED: dict[str, bool] = {}
_DETECTED_SIZE = 64
_DETECTED_LOCK = threading.Lock()


def _note_detected(text: str, found: bool) -> None:
    with _DETECTED_LOCK:
        _DETECTED[text] = found
        while len(_DETECTED) > _DETECTED_SIZE:
            del _DETECTED[next(iter(_DETECTED))]


def _any_candidate(text: str, reference: datetime) -> bool:
    """Whether ``_candidates`` would find anything: some rule's match resolves (stops at the first)."""
    ctx = _Context(text=text, reference=reference, today=reference.date())
    lowered = _lower(text)
    for pattern, resolver, needs in _RULES:
        if needs and not any(fragment in lowered for fragment in needs):
            continue
        for match in _matches(pattern, text):
            try:
                if resolver(match, ctx) is not None:
                    return True
            except (ValueError, OverflowError):
                continue
    return False


def resolve_time_expressions(text: str, reference: datetime, turn_id: str | None = None) -> list[TimeAnchor]:
    """Find the time expressions in ``text`` and resolve them against ``reference``.

    ``reference`` is the moment the turn was said, timezone-aware; its local date (``reference.date()``)
    is "today". A naive datetime is used as it is. Returns one anchor per non-overlapping expression, in
    text order; see the module docstring for the rule applied to each kind of expression.
    """
    if not _may_hold_time(text):
        return []
    kept, failed = _candidates(text, reference)
    if kept or not failed:
        _note_detected(text, bool(kept))
    return [
        TimeAnchor(
            expression=text[start:end],
            start=span.start,
            end=span.end,
            granularity=span.granularity,
            turn_id=turn_id,
        )
        for start, end, span in kept
    ]


def without_time_expressions(text: str) -> str:
    """``text`` with the time expressions :func:`resolve_time_expressions` would anchor taken out, each with the
    preposition that licensed it ("What did John do in March 2023?" -> "What did John do?")."""
    if not _may_hold_time(text):
        return text
    kept, _ = _candidates(text, _DETECTION_REFERENCE)
    pieces: list[str] = []
    end_of_last = 0
    for start, end, _span in kept:
        before = text[end_of_last:start]
        if pieces and _JOINS_TWO_TIMES.fullmatch(before):
            before = ""  # "between August 11 and August 15": the "and" goes with them
        lead = _TIME_LEAD.search(before)
        pieces.append(before[: lead.start()] if lead is not None else before)
        end_of_last = end
    pieces.append(text[end_of_last:])
    return " ".join("".join(pieces).split()).replace(" ?", "?").replace(" ,", ",").replace(" .", ".")


def has_time_expression(text: str) -> bool:
    """Whether ``text`` holds at least one expression :func:`resolve_time_expressions` would anchor."""
    known = _DETECTED.get(text)
    if known is not None:
        return known
    if not _may_hold_time(text):
        return False
    return _any_candidate(text, _DETECTION_REFERENCE)
