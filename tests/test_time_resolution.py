"""Table-driven tests for compassmem.text.time_resolution."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from compassmem.core.models import Granularity
from compassmem.text.time_resolution import (
    has_time_expression,
    resolve_time_expressions,
    without_time_expressions,
)

# 1:56 pm on 8 May 2023 (a Monday), UTC: the LoCoMo session style.
MON = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
WED = datetime(2023, 5, 10, 9, 0, tzinfo=timezone.utc)
SUN = datetime(2023, 5, 14, 18, 0, tzinfo=timezone.utc)
JAN = datetime(2024, 1, 5, 10, 0, tzinfo=timezone.utc)
OCT = datetime(2023, 10, 12, 10, 0, tzinfo=timezone.utc)

D, W, M, S, Y = Granularity.DAY, Granularity.WEEK, Granularity.MONTH, Granularity.SEASON, Granularity.YEAR


def d(text: str) -> date:
    return date.fromisoformat(text)


# (text, reference, expected expression, start, end, granularity): exactly one anchor expected.
SINGLE = [
    # days
    ("I went to a support group yesterday.", MON, "yesterday", "2023-05-07", "2023-05-07", D),
    ("We talked about it today.", MON, "today", "2023-05-08", "2023-05-08", D),
    ("I'm seeing her tonight", MON, "tonight", "2023-05-08", "2023-05-08", D),
    ("I ran this morning", MON, "this morning", "2023-05-08", "2023-05-08", D),
    ("we went out last night", MON, "last night", "2023-05-07", "2023-05-07", D),
    ("It happened the day before yesterday.", MON, "the day before yesterday", "2023-05-06", "2023-05-06", D),
    ("I leave tomorrow morning", MON, "tomorrow morning", "2023-05-09", "2023-05-09", D),
    ("Back the day after tomorrow", MON, "the day after tomorrow", "2023-05-10", "2023-05-10", D),
    # weekdays
    ("Last Saturday I ran a charity race.", MON, "Last Saturday", "2023-05-06", "2023-05-06", D),
    ("last Monday", MON, "last Monday", "2023-05-01", "2023-05-01", D),
    ("next Friday", MON, "next Friday", "2023-05-12", "2023-05-12", D),
    ("next Monday", MON, "next Monday", "2023-05-15", "2023-05-15", D),
    ("this Friday", MON, "this Friday", "2023-05-12", "2023-05-12", D),
    ("this Monday", WED, "this Monday", "2023-05-08", "2023-05-08", D),
    ("this past Sunday", WED, "this past Sunday", "2023-05-07", "2023-05-07", D),
    ("I saw it on Saturday night", MON, "Saturday night", "2023-05-06", "2023-05-06", D),
    ("on Monday we spoke", MON, "Monday", "2023-05-08", "2023-05-08", D),
    # weeks, weekends, months, years
    ("last week was hectic", MON, "last week", "2023-05-01", "2023-05-07", W),
    ("last week was hectic", SUN, "last week", "2023-05-01", "2023-05-07", W),
    ("this week", WED, "this week", "2023-05-08", "2023-05-14", W),
    ("next week", MON, "next week", "2023-05-15", "2023-05-21", W),
    ("the week before last", MON, "the week before last", "2023-04-24", "2023-04-30", W),
    ("earlier this week", WED, "earlier this week", "2023-05-08", "2023-05-09", W),
    ("earlier this month", MON, "earlier this month", "2023-05-01", "2023-05-07", M),
    ("later this year", MON, "later this year", "2023-05-09", "2023-12-31", Y),
    ("this weekend", MON, "this weekend", "2023-05-13", "2023-05-14", W),
    ("last weekend", MON, "last weekend", "2023-05-06", "2023-05-07", W),
    ("the past weekend", MON, "the past weekend", "2023-05-06", "2023-05-07", W),
    ("I went hiking over the weekend", MON, "over the weekend", "2023-05-06", "2023-05-07", W),
    ("over the weekend", SUN, "over the weekend", "2023-05-13", "2023-05-14", W),
    ("next weekend", MON, "next weekend", "2023-05-20", "2023-05-21", W),
    ("this coming weekend", MON, "this coming weekend", "2023-05-13", "2023-05-14", W),
    ("next month", MON, "next month", "2023-06-01", "2023-06-30", M),
    ("last month", MON, "last month", "2023-04-01", "2023-04-30", M),
    ("this month", MON, "this month", "2023-05-01", "2023-05-31", M),
    ("last year", MON, "last year", "2022-01-01", "2022-12-31", Y),
    ("next year", MON, "next year", "2024-01-01", "2024-12-31", Y),
    ("the year before last", MON, "the year before last", "2021-01-01", "2021-12-31", Y),
    ("over the past week", MON, "the past week", "2023-05-01", "2023-05-08", W),
    ("in the past two weeks", MON, "the past two weeks", "2023-04-24", "2023-05-08", W),
    ("for the last few days", MON, "the last few days", "2023-05-04", "2023-05-08", D),
    ("in the next couple of months", MON, "the next couple of months", "2023-05-08", "2023-08-08", M),
    # N units ago / in N units / later
    ("two weeks ago", MON, "two weeks ago", "2023-04-24", "2023-04-30", W),
    ("2 weeks ago", SUN, "2 weeks ago", "2023-04-24", "2023-04-30", W),
    ("3 days ago", MON, "3 days ago", "2023-05-05", "2023-05-05", D),
    ("a week ago", MON, "a week ago", "2023-05-01", "2023-05-07", W),
    ("a month ago", MON, "a month ago", "2023-04-01", "2023-04-30", M),
    ("about two years ago", MON, "two years ago", "2021-01-01", "2021-12-31", Y),
    ("ten years ago", MON, "ten years ago", "2013-01-01", "2013-12-31", Y),
    ("a few days ago", MON, "a few days ago", "2023-05-04", "2023-05-06", D),
    ("a couple of days ago", MON, "a couple of days ago", "2023-05-05", "2023-05-06", D),
    ("a couple days ago", MON, "a couple days ago", "2023-05-05", "2023-05-06", D),
    ("several weeks ago", MON, "several weeks ago", "2023-03-20", "2023-04-23", W),
    ("a few years back", MON, "a few years back", "2019-01-01", "2021-12-31", Y),
    ("3 hours ago", datetime(2023, 5, 8, 1, 0, tzinfo=timezone.utc), "3 hours ago", "2023-05-07", "2023-05-07", D),
    ("in 3 days", MON, "in 3 days", "2023-05-11", "2023-05-11", D),
    ("in two weeks", MON, "in two weeks", "2023-05-22", "2023-05-28", W),
    ("in a month", MON, "in a month", "2023-06-01", "2023-06-30", M),
    ("two days later", MON, "two days later", "2023-05-10", "2023-05-10", D),
    ("a week later", MON, "a week later", "2023-05-15", "2023-05-21", W),
    ("five days from now", MON, "five days from now", "2023-05-13", "2023-05-13", D),
    ("the next day we left", MON, "the next day", "2023-05-09", "2023-05-09", D),
    # vague
    ("I saw him the other day", MON, "the other day", "2023-05-01", "2023-05-07", D),
    ("I recently started painting", MON, "recently", "2023-04-24", "2023-05-08", W),
    # seasons
    ("last summer", MON, "last summer", "2022-06-01", "2022-08-31", S),
    ("last summer", OCT, "last summer", "2023-06-01", "2023-08-31", S),
    ("this summer", MON, "this summer", "2023-06-01", "2023-08-31", S),
    ("this summer", OCT, "this summer", "2023-06-01", "2023-08-31", S),
    ("next summer", OCT, "next summer", "2024-06-01", "2024-08-31", S),
    ("last winter", MON, "last winter", "2022-12-01", "2023-02-28", S),
    ("next winter", MON, "next winter", "2023-12-01", "2024-02-29", S),
    ("this winter", JAN, "this winter", "2023-12-01", "2024-02-29", S),
    ("next spring", MON, "next spring", "2024-03-01", "2024-05-31", S),
    ("last fall", MON, "last fall", "2022-09-01", "2022-11-30", S),
    ("last autumn", MON, "last autumn", "2022-09-01", "2022-11-30", S),
    ("we met in the fall", MON, "the fall", "2022-09-01", "2022-11-30", S),
    ("during the summer of 2021", MON, "the summer of 2021", "2021-06-01", "2021-08-31", S),
    ("winter 2022", MON, "winter 2022", "2021-12-01", "2022-02-28", S),
    # months and dates
    ("It was 8 May 2023.", MON, "8 May 2023", "2023-05-08", "2023-05-08", D),
    ("1:56 pm on 8 May, 2023", MON, "8 May, 2023", "2023-05-08", "2023-05-08", D),
    ("on May 8, 2023", MON, "May 8, 2023", "2023-05-08", "2023-05-08", D),
    ("May 8th", MON, "May 8th", "2023-05-08", "2023-05-08", D),
    ("the 8th of May", MON, "the 8th of May", "2023-05-08", "2023-05-08", D),
    ("on June 20th", MON, "June 20th", "2023-06-20", "2023-06-20", D),
    ("on the 20th of December", JAN, "the 20th of December", "2023-12-20", "2023-12-20", D),
    ("Sept. 3, 2021", MON, "Sept. 3, 2021", "2021-09-03", "2021-09-03", D),
    ("Feb 29 2024", MON, "Feb 29 2024", "2024-02-29", "2024-02-29", D),
    ("2023-04-30", MON, "2023-04-30", "2023-04-30", "2023-04-30", D),
    ("May 2023", MON, "May 2023", "2023-05-01", "2023-05-31", M),
    ("in May of 2022", MON, "May of 2022", "2022-05-01", "2022-05-31", M),
    ("in May", MON, "May", "2023-05-01", "2023-05-31", M),
    ("in June", MON, "June", "2022-06-01", "2022-06-30", M),
    ("since March", MON, "March", "2023-03-01", "2023-03-31", M),
    ("January was cold", MON, "January", "2023-01-01", "2023-01-31", M),
    ("last May", MON, "last May", "2022-05-01", "2022-05-31", M),
    ("last May", OCT, "last May", "2023-05-01", "2023-05-31", M),
    ("next May", MON, "next May", "2024-05-01", "2024-05-31", M),
    ("this December", MON, "this December", "2023-12-01", "2023-12-31", M),
    ("early June 2022", MON, "early June 2022", "2022-06-01", "2022-06-10", M),
    ("by the end of April", MON, "the end of April", "2023-04-21", "2023-04-30", M),
    # years
    ("in 2022", MON, "2022", "2022-01-01", "2022-12-31", Y),
    ("I've lived here since 2016", MON, "2016", "2016-01-01", "2016-12-31", Y),
    ("class of 1999", MON, "1999", "1999-01-01", "1999-12-31", Y),
    ("in late 2021", MON, "late 2021", "2021-09-01", "2021-12-31", Y),
    # durations in the perfect: anchored where the state began
    ("I've had them for 3 years now.", MON, "for 3 years now", "2020-01-01", "2020-12-31", Y),
    ("I have been painting for seven years", MON, "for seven years", "2016-01-01", "2016-12-31", Y),
    ("it has been two months since I started", MON, "it has been two months", "2023-03-01", "2023-03-31", M),
    ("Been dancing for a couple of years now!", MON, "for a couple of years now", "2020-01-01", "2021-12-31", Y),
    # as people type in chats
    ("see you tmrw!", MON, "tmrw", "2023-05-09", "2023-05-09", D),
    ("2moro works for me", MON, "2moro", "2023-05-09", "2023-05-09", D),
    ("yday was crazy", MON, "yday", "2023-05-07", "2023-05-07", D),
    ("last nite was fun", MON, "last nite", "2023-05-07", "2023-05-07", D),
    ("party tonite", MON, "tonite", "2023-05-08", "2023-05-08", D),
    ("this wknd we go camping", MON, "this wknd", "2023-05-13", "2023-05-14", W),
    ("I was out over the wknd", MON, "over the wknd", "2023-05-06", "2023-05-07", W),
    ("Last Fri I took the kids to a pottery workshop.", WED, "Last Fri", "2023-05-05", "2023-05-05", D),
    ("I joined a new group last Tues.", WED, "last Tues.", "2023-05-09", "2023-05-09", D),
    ("Wanna see my moves next Fri?", MON, "next Fri", "2023-05-12", "2023-05-12", D),
    ("this past Sat", WED, "this past Sat", "2023-05-06", "2023-05-06", D),
    ("We met on Sat and talked for hours", WED, "Sat", "2023-05-06", "2023-05-06", D),
    ("Sat night was wild", WED, "Sat night", "2023-05-06", "2023-05-06", D),
    ("my car broke down last fri", WED, "last fri", "2023-05-05", "2023-05-05", D),
    ("see you next tues", MON, "next tues", "2023-05-09", "2023-05-09", D),
    ("SEE YOU NEXT FRI", MON, "NEXT FRI", "2023-05-12", "2023-05-12", D),
    ("back on thurs", WED, "thurs", "2023-05-04", "2023-05-04", D),
    ("fri night was fun", WED, "fri night", "2023-05-05", "2023-05-05", D),
    ("the following Monday we left", WED, "the following Monday", "2023-05-15", "2023-05-15", D),
    # halves and fortnights
    ("half a year ago", MON, "half a year ago", "2022-11-01", "2022-11-30", M),
    ("a year and a half ago", MON, "a year and a half ago", "2021-11-01", "2021-11-30", M),
    ("two and a half weeks ago", MON, "two and a half weeks ago", "2023-04-21", "2023-04-21", D),
    ("I've lived here for two and a half years", MON, "for two and a half years", "2020-11-01", "2020-11-30", M),
    ("a fortnight ago", MON, "a fortnight ago", "2023-04-24", "2023-04-30", W),
    ("in a fortnight", MON, "in a fortnight", "2023-05-22", "2023-05-28", W),
    # a day of the month alone, the part of a period
    ("on the 3rd we moved", WED, "the 3rd", "2023-05-03", "2023-05-03", D),
    ("I met back up with my teammates on the 15th after my trip", datetime(2023, 8, 17, tzinfo=timezone.utc),
     "the 15th", "2023-08-15", "2023-08-15", D),
    ("I'm away from the 2nd to the 6th", datetime(2023, 5, 30, tzinfo=timezone.utc), "the 2nd", "2023-06-02",
     "2023-06-02", D),
    # ... the nearest whatever the tense: it dates an arrangement as often as the thing arranged
    ("I've arranged care starting on the 12th", WED, "the 12th", "2023-05-12", "2023-05-12", D),
    ("I fly out on the 28th.", WED, "the 28th", "2023-04-28", "2023-04-28", D),
    ("I fly out on the 28th.", datetime(2023, 5, 25, tzinfo=timezone.utc), "the 28th", "2023-05-28", "2023-05-28", D),
    ("It's due by the 2nd", datetime(2023, 5, 30, tzinfo=timezone.utc), "the 2nd", "2023-06-02", "2023-06-02", D),
    ("early last month", MON, "early last month", "2023-04-01", "2023-04-10", M),
    ("I'll finish by the end of the month", MON, "the end of the month", "2023-05-21", "2023-05-31", M),
    ("by the end of the week", MON, "the end of the week", "2023-05-12", "2023-05-14", W),
    ("late next year", MON, "late next year", "2024-09-01", "2024-12-31", Y),
    ("end of April", MON, "end of April", "2023-04-21", "2023-04-30", M),
    # short years
    ("back in '19", MON, "'19", "2019-01-01", "2019-12-31", Y),
    ("the summer of '08", MON, "the summer of '08", "2008-06-01", "2008-08-31", S),
    ("May '21", MON, "May '21", "2021-05-01", "2021-05-31", M),
    # parts of a month
    ("the first weekend of August 2023", MON, "the first weekend of August 2023", "2023-08-05", "2023-08-06", W),
    ("in the second week of November", OCT, "the second week of November", "2022-11-08", "2022-11-14", W),
    ("the last week of May 2023", MON, "the last week of May 2023", "2023-05-25", "2023-05-31", W),
    ("the first half of September 2022", MON, "the first half of September 2022", "2022-09-01", "2022-09-15", M),
    ("the second half of next month", MON, "the second half of next month", "2023-06-16", "2023-06-30", M),
    # a lead moves the time after it
    ("the week before August 3, 2023", MON, "the week before August 3, 2023", "2023-07-24", "2023-07-30", W),
    ("the weekend before 17 October", OCT, "the weekend before 17 October", "2023-10-14", "2023-10-15", W),
    ("on the Sunday before October 25, 2022", MON, "the Sunday before October 25, 2022", "2022-10-23",
     "2022-10-23", D),
    ("two weeks before August 11, 2023", MON, "two weeks before August 11, 2023", "2023-07-24", "2023-07-30", W),
    ("last weekend before April 10, 2023", MON, "last weekend before April 10, 2023", "2023-04-08", "2023-04-09",
     W),
    ("the day after Christmas 2022", MON, "the day after Christmas 2022", "2022-12-26", "2022-12-26", D),
    ("three days after Thanksgiving 2022", MON, "three days after Thanksgiving 2022", "2022-11-27", "2022-11-27", D),
    # numeric dates where only one order is possible
    ("We left on 12/24", MON, "12/24", "2022-12-24", "2022-12-24", D),
    ("It shipped 24/12/2022", MON, "24/12/2022", "2022-12-24", "2022-12-24", D),
    ("Payment is due by 5/15", MON, "5/15", "2023-05-15", "2023-05-15", D),
    ("12/24/22", MON, "12/24/22", "2022-12-24", "2022-12-24", D),
    # holidays: the nearest one, the last or next, or of the year given
    ("We spent Christmas Eve at my parents'.", JAN, "Christmas Eve", "2023-12-24", "2023-12-24", D),
    ("What did you do over Christmas?", JAN, "Christmas", "2023-12-25", "2023-12-25", D),
    ("Xmas shopping is stressful", datetime(2023, 12, 10, tzinfo=timezone.utc), "Xmas", "2023-12-25", "2023-12-25", D),
    ("last Thanksgiving", MON, "last Thanksgiving", "2022-11-24", "2022-11-24", D),
    ("We always host, but last Thanksgiving was at my sister's.", MON, "last Thanksgiving", "2022-11-24",
     "2022-11-24", D),
    ("next Thanksgiving", MON, "next Thanksgiving", "2023-11-23", "2023-11-23", D),
    ("Thanksgiving 2021", MON, "Thanksgiving 2021", "2021-11-25", "2021-11-25", D),
    ("We had a party on New Year's Eve", JAN, "New Year's Eve", "2023-12-31", "2023-12-31", D),
    ("on Halloween", OCT, "Halloween", "2023-10-31", "2023-10-31", D),
    ("Easter 2024", MON, "Easter 2024", "2024-03-31", "2024-03-31", D),
    ("last Easter", MON, "last Easter", "2023-04-09", "2023-04-09", D),
    ("Mother's Day brunch", MON, "Mother's Day", "2023-05-14", "2023-05-14", D),
    ("Father’s Day", MON, "Father’s Day", "2023-06-18", "2023-06-18", D),
    ("on Valentine's", MON, "Valentine's", "2023-02-14", "2023-02-14", D),
    ("St. Patrick's Day", MON, "St. Patrick's Day", "2023-03-17", "2023-03-17", D),
    ("the Fourth of July", MON, "the Fourth of July", "2023-07-04", "2023-07-04", D),
    ("Memorial Day weekend", MON, "Memorial Day", "2023-05-29", "2023-05-29", D),
    ("Labour Day", MON, "Labour Day", "2023-09-04", "2023-09-04", D),
]


@pytest.mark.parametrize(("text", "reference", "expression", "start", "end", "granularity"), SINGLE)
def test_single_expression(
    text: str, reference: datetime, expression: str, start: str, end: str, granularity: Granularity
) -> None:
    anchors = resolve_time_expressions(text, reference)
    assert [(a.expression, a.start, a.end, a.granularity) for a in anchors] == [
        (expression, d(start), d(end), granularity)
    ]
    assert has_time_expression(text)


NEGATIVE = [
    "I may go to the park.",
    "May I ask you something?",
    "the last time we talked was fun",
    "We'll march on no matter what.",
    "I have 2 kids.",
    "That was the last one.",
    "2000 people came to the show.",
    "I go hiking on Saturdays.",
    "I go hiking every Saturday.",
    "June called me about the party.",
    "Jan said hi.",
    "It was my second try.",
    "At last, it's done!",
    "I fall asleep easily.",
    "It was the first time in three years that I cried.",
    "We meet twice in a month.",
    "my last year of college was the best",
    "It was the last week of school.",
    "Thanks, that sounds great!",
    "See you next time.",
    "The spring water tastes good.",
    "I paid $2019 for it.",
    "We stayed in Rome for 3 days.",
    "I will be there for two weeks.",
    "I have a dog. We walked for 2 hours.",
    # weekday abbreviations lowercase or without a lead are other words; ordinals of things; decades; habits
    "I sat down and cried.",
    "The sun is out and I went for a walk.",
    "Sat in traffic for ages.",
    "Sun is shining, let's go!",
    "c'mon mon, they got wed and moved",
    "last sat here ages",
    "We live on the 3rd floor.",
    "He finished on the 2nd try.",
    "She got it on the 2nd of three tries.",
    "I love music from the '90s.",
    "Every Christmas we bake cookies.",
    "During Thanksgiving, we usually watch a few movies.",
    "Do you have any favorite Thanksgiving traditions?",
    "I sent valentines to the whole class.",
    "Happy new year!",
    "My mother called me.",
    "I had to collaborate with the laboratory.",
    "I got 12/15 on the quiz.",
    "We're open 24/7.",
    "Add 1/2 cup of sugar and rate it 9/10.",
    "It was 5/8/2023.",
    "See you on 4/31.",
    "A week before her birthday she called.",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_no_anchor(text: str) -> None:
    assert resolve_time_expressions(text, MON) == []
    assert not has_time_expression(text)


# Several expressions, in text order: (text, reference, [(expression, start, end)]).
MULTIPLE = [
    (
        "I went to a LGBTQ support group yesterday, and next month I'm starting a counseling course.",
        MON,
        [("yesterday", "2023-05-07", "2023-05-07"), ("next month", "2023-06-01", "2023-06-30")],
    ),
    (
        "Last Saturday I took the kids camping; we'd been planning it since May 2022.",
        MON,
        [("Last Saturday", "2023-05-06", "2023-05-06"), ("May 2022", "2022-05-01", "2022-05-31")],
    ),
    (
        "From 2019 to 2022 I lived in Boston.",
        MON,
        [("2019", "2019-01-01", "2019-12-31"), ("2022", "2022-01-01", "2022-12-31")],
    ),
]


@pytest.mark.parametrize(("text", "reference", "expected"), MULTIPLE)
def test_multiple_expressions_in_text_order(
    text: str, reference: datetime, expected: list[tuple[str, str, str]]
) -> None:
    anchors = resolve_time_expressions(text, reference, turn_id="D1:3")
    assert [(a.expression, a.start, a.end) for a in anchors] == [(e, d(s), d(f)) for e, s, f in expected]
    assert all(a.turn_id == "D1:3" for a in anchors)


def test_longest_match_wins() -> None:
    anchors = resolve_time_expressions("It was the day before yesterday.", MON)
    assert [a.expression for a in anchors] == ["the day before yesterday"]


def test_uses_local_date_of_reference() -> None:
    # 23:30 on 8 May at UTC-7 is already 9 May in UTC; "yesterday" is still 7 May locally.
    reference = datetime(2023, 5, 8, 23, 30, tzinfo=timezone(timedelta(hours=-7)))
    (anchor,) = resolve_time_expressions("yesterday", reference)
    assert anchor.start == anchor.end == date(2023, 5, 7)


def test_turn_id_defaults_to_none() -> None:
    (anchor,) = resolve_time_expressions("yesterday", MON)
    assert anchor.turn_id is None


def test_anchors_are_well_formed_for_many_references() -> None:
    text = (
        "last Saturday, this weekend, last weekend, next winter, this winter, last summer, in the fall, "
        "a few weeks ago, in a couple of months, Feb 29, early May, the past month, recently"
    )
    reference = datetime(2020, 1, 1, 12, 0, tzinfo=timezone.utc)
    for offset in range(0, 3 * 366, 5):
        anchors = resolve_time_expressions(text, reference + timedelta(days=offset))
        assert len(anchors) == 13
        assert all(a.start <= a.end for a in anchors)


def test_empty_and_plain_text() -> None:
    assert resolve_time_expressions("", MON) == []
    assert not has_time_expression("")
    assert not has_time_expression("Hello there, how are you?")


@pytest.mark.parametrize(("text", "expected"), [
    ("What did John attend with his colleagues in March 2023?", "What did John attend with his colleagues?"),
    ("Where was John between August 11 and August 15 2023?", "Where was John?"),
    ("Which city did Jon visit last week, and why?", "Which city did Jon visit, and why?"),
    ("What did Tim do before 16 November 2023?", "What did Tim do?"),
    ("When did Maria meet Jean?", "When did Maria meet Jean?"),
    ("The 2000 people in May were many.", "The 2000 people were many."),
    ("What did Jon do over Christmas 2022?", "What did Jon do?"),
    ("Where did Gina go on the 3rd?", "Where did Gina go?"),
    ("What did John do the week before August 3, 2023 involving his kids?", "What did John do involving his kids?"),
])
def test_time_expressions_come_out_with_their_prepositions(text: str, expected: str) -> None:
    assert without_time_expressions(text) == expected
