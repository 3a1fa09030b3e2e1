"""Time as a search channel: turns keep the days, months and years they speak of as indexed keys, and a question
naming a time searches those turns within its scope (real embedded stores, built by ``Memory.add``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.contracts.search import SearchScope
from compassmem.library.memory import Memory
from compassmem.core.models import Granularity, TimeAnchor, Turn
from compassmem.text.time_keys import question_time_keys, span_keys, turn_time_keys
from compassmem.retrieval.engine import EngineConfig, RankingConfig, question_spans
from compassmem.retrieval.ranking_model import shipped_model
from compassmem.sinks.vector_store import HitSearch, TurnHit

SAID = datetime(2024, 10, 21, 9, 0, tzinfo=UTC)


def test_a_span_gives_keys_at_the_finest_level_its_length_allows() -> None:
    assert span_keys(date(2024, 10, 20), date(2024, 10, 20)) == ["d:2024-10-20"]
    # A trip from the 11th to the 20th covers the 12th.
    assert "d:2024-10-12" in span_keys(date(2024, 10, 11), date(2024, 10, 20))
    assert span_keys(date(2024, 6, 1), date(2024, 8, 31)) == ["m:2024-06", "m:2024-07", "m:2024-08"]
    assert span_keys(date(2021, 1, 1), date(2021, 12, 31)) == ["y:2021"]
    assert len(question_time_keys([(date(1900, 1, 1), date(2100, 12, 31))])) == 64  # bounded


def test_a_duration_becomes_the_year_it_started() -> None:
    from compassmem.text.time_resolution import resolve_time_expressions

    anchors = resolve_time_expressions("We have been together for three years now", SAID)
    assert "y:2021" in turn_time_keys("We have been together for three years now", anchors)
    day = TimeAnchor(expression="yesterday", start=date(2024, 10, 20), end=date(2024, 10, 20),
                     granularity=Granularity.DAY)
    assert turn_time_keys("yesterday", [day]) == ["d:2024-10-20"]


def test_a_trip_from_one_day_to_another_covers_the_days_between() -> None:
    from compassmem.text.time_resolution import resolve_time_expressions

    text = "I was away from October 11 to October 20, hiking in the Alps."
    keys = turn_time_keys(text, resolve_time_expressions(text, SAID))
    assert {"d:2024-10-11", "d:2024-10-12", "d:2024-10-20"} <= set(keys)
    # Two days named apart are two days, not a range.
    text = "We met on 3 October and again on 12 October."
    assert "d:2024-10-05" not in turn_time_keys(text, resolve_time_expressions(text, SAID))


def _trip(filler: int) -> list[Turn]:
    """Jon's chat: days of planning which cities to visit some day, then one turn that says where he was."""
    plans = [f"Which city should Jon see on trip number {n}: Lisbon, Rome or Vienna? We can pick one later."
             for n in range(filler)]
    lines = [*(("Jon" if n % 2 else "Ana", text) for n, text in enumerate(plans)),
             ("Jon", "Yesterday I had dinner with Dana in Boston, what a lovely harbour."),
             ("Ana", "Sounds like a good evening.")]
    return [Turn(conversation_id="jon", turn_id=f"t{n}", speaker=speaker, text=text,
                 timestamp=SAID - timedelta(days=3) + timedelta(minutes=n) if n < filler else
                 SAID + timedelta(minutes=n), session_id="1" if n < filler else "2")
            for n, (speaker, text) in enumerate(lines)]


def test_a_time_search_finds_only_the_turns_speaking_of_that_time(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_trip(filler=6))
        vector = memory.embedder.embed(["Which city was Jon in?"])[0]
        scope = SearchScope.conversation("default", "jon")
        found = memory.stores.vectors.hits(scope, [HitSearch("turn", vector, 10, time_keys=("d:2024-10-20",)),
                                                   HitSearch("turn", vector, 10, time_keys=("d:2024-10-19",))])
    assert [hit.turn_id for hit in found[0] if isinstance(hit, TurnHit)] == ["t6"]
    assert found[1] == []


def test_which_city_on_a_day_finds_the_yesterday_told_the_next_day(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    question = QueryRequest(conversation_id="jon", question="Which city was Jon in on 20 October 2024?",
                            budget_turns=5)
    # More turns than the candidate budget (200), each closer to the question by words and meaning: those alone do
    # not reach the answer.
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_trip(filler=260))
        answer = "t260"
        assert answer in memory.query(question).turn_ids
        without = Memory(memory.settings, stores=memory.stores, embedder=memory.embedder,
                         engine_config=EngineConfig(ranking=RankingConfig(time_candidates=0)))
        assert answer not in without.query(question).turn_ids


def test_a_duration_answers_which_year_it_started(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    said = datetime(2024, 6, 10, 19, 0, tzinfo=UTC)
    lines = [("Ann", "Ben cooks dinner most nights, he is much better at it than me."),
             ("Kim", "Lucky you! What do you two do at weekends?"),
             ("Ann", "We love hiking together, and Ben drags me to the climbing gym."),
             ("Kim", "How did you meet him in the first place?"),
             ("Ann", "At a friend's birthday party, he spilled a drink on my shoes."),
             ("Kim", "That is a great story. Are you still happy with him?"),
             ("Ann", "Very. Ben and I have been together for three years now."),
             ("Kim", "Time flies. Any plans to move in together?"),
             ("Ann", "We talk about it, but my flat is tiny and his is far from work.")]
    turns = [Turn(conversation_id="ann", turn_id=f"a{n}", speaker=speaker, text=text,
                  timestamp=said + timedelta(minutes=n), session_id="1")
             for n, (speaker, text) in enumerate(lines)]
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)
        found = memory.query(QueryRequest(conversation_id="ann", budget_turns=3,
                                          question="Which year did Ann and Ben start dating?")).turn_ids
    # "for three years now", said in June 2024, is a start in 2021: the turn that answers "which year".
    assert "a6" in found


def _support_chat(filler: int) -> list[Turn]:
    """Lee's support chat: many turns about checking orders, then two that tell, as people type them, what
    happened on a holiday and on an abbreviated weekday."""
    start = datetime(2024, 12, 2, 10, 0, tzinfo=UTC)
    asks = [("Lee" if n % 2 else "Support", f"Could you check ticket number {n} for me? The page shows nothing "
                                            "useful.") for n in range(filler)]
    told = [("Lee", "It finally showed up on Xmas Eve, the box soaked through."),
            ("Support", "Sorry to hear that."),
            ("Lee", "I mailed the return form last Fri, still no word.")]
    said_late = datetime(2024, 12, 30, 11, 0, tzinfo=UTC)  # a Monday: "last Fri" is 27 December
    return [Turn(conversation_id="lee", turn_id=f"s{n}", speaker=speaker, text=text,
                 timestamp=start + timedelta(minutes=n) if n < filler else said_late + timedelta(minutes=n),
                 session_id="1" if n < filler else "2")
            for n, (speaker, text) in enumerate([*asks, *told])]


def test_holidays_and_chat_spellings_answer_questions_naming_the_day(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    filler = 260
    questions = {"What happened to Lee's parcel on 24 December 2024?": (f"s{filler}", "d:2024-12-24"),
                 "What did Lee do on 27 December 2024?": (f"s{filler + 2}", "d:2024-12-27")}
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_support_chat(filler))
        scope = SearchScope.conversation("default", "lee")
        for question, (answer, day) in questions.items():
            vector = memory.embedder.embed([question])[0]
            # "on Xmas Eve" and "last Fri", said on 30 December, are the days the questions name ...
            (by_day,) = memory.stores.vectors.hits(scope, [HitSearch("turn", vector, 10, time_keys=(day,))])
            assert [hit.turn_id for hit in by_day if isinstance(hit, TurnHit)] == [answer]
            # ... and the answer is among the first five of the 263 turns.
            request = QueryRequest(conversation_id="lee", question=question, budget_turns=5)
            assert answer in memory.query(request).turn_ids, question


def test_a_question_resolves_its_relative_times_against_the_day_it_names() -> None:
    latest = datetime(2023, 12, 1, 12, 0, tzinfo=UTC)  # the conversation's latest turn

    def days(question: str) -> list[tuple[str, str]]:
        return [(start.isoformat(), end.isoformat()) for start, end in question_spans(question, latest)]

    # "last Friday" of a question naming 23 January 2022 is the Friday before it, not the one before December.
    assert days("What did Joanna finish last Friday, as she said on 23 January, 2022?") == [
        ("2022-01-21", "2022-01-21"), ("2022-01-23", "2022-01-23")]
    assert days("What was Tim's writing issue last week, as mentioned on November 6, 2023?") == [
        ("2023-10-30", "2023-11-05"), ("2023-11-06", "2023-11-06")]
    # A named month says when; "recently" of the question's own moment is left out.
    assert days("What cake did Joanna make recently in May 2022?") == [("2022-05-01", "2022-05-31")]
    # Nothing fixed: relative to the conversation's latest time; a weekend asked about starts on its Friday.
    assert days("What did John do last weekend?") == [("2023-11-24", "2023-11-26")]
    assert days("What did John do on the first weekend of August 2023?") == [("2023-08-04", "2023-08-06")]
    # A holiday named alone is an occasion ("Thanksgiving dinner"), searched by its words; with "last" it is a day.
    assert days("How many guests did I invite for Thanksgiving dinner?") == []
    assert days("What did John cook last Thanksgiving?") == [("2023-11-23", "2023-11-23")]
    # Two days joined by "between ... and" are the days between too.
    assert ("2023-08-11", "2023-08-15") in days("Where was John between August 11 and August 15 2023?")


def _planning_chat(said: datetime, filler: str, told: str) -> list[Turn]:
    """Jon and Ana: 30 turns of plans (``filler`` with a number), then Jon's ``told`` (turn "t30") and a reply."""
    lines = [*(("Ana" if n % 2 else "Jon", filler.format(n=n)) for n in range(30)), ("Jon", told),
             ("Ana", "Sounds great.")]
    return [Turn(conversation_id="jon", turn_id=f"t{n}", speaker=speaker, text=text,
                 timestamp=said + timedelta(minutes=n), session_id="1") for n, (speaker, text) in enumerate(lines)]


def _found_by_day_and_by_query(memory: Memory, question: str, keys: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The turns the time search of ``keys`` returns for the question, and the question's top 5."""
    vector = memory.embedder.embed([question])[0]
    (by_day,) = memory.stores.vectors.hits(SearchScope.conversation("default", "jon"),
                                           [HitSearch("turn", vector, 10, time_keys=keys)])
    found = memory.query(QueryRequest(conversation_id="jon", question=question, budget_turns=5)).turn_ids
    return [hit.turn_id for hit in by_day if isinstance(hit, TurnHit)], found


def test_a_trip_told_by_its_two_ends_covers_the_days_between(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    turns = _planning_chat(datetime(2024, 10, 20, 9, 0, tzinfo=UTC),
                           "Which city should Jon see on trip number {n}? We can pick one later.",
                           "I'm leaving the day after tomorrow, so excited! I plan to return on October 27.")
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)
        by_day, found = _found_by_day_and_by_query(memory, "Where was Jon on 24 October 2024?", ("d:2024-10-24",))
    # Leaving on the 22nd and back on the 27th: away on the 24th, which the turn never names.
    assert by_day == ["t30"]
    assert "t30" in found


def test_a_weekend_asked_about_reaches_what_was_done_on_its_friday(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    # Said on a Monday: "last Friday" is 5 May, the Friday of May's first weekend.
    said = datetime(2023, 5, 8, 18, 0, tzinfo=UTC)
    turns = _planning_chat(said, "What should Jon do on weekend number {n}? We can pick something later.",
                           "Last Friday I went to the car show, so many old Mustangs!")
    question = "What did Jon do on the first weekend of May 2023?"
    keys = question_time_keys(question_spans(question, said))
    assert "d:2023-05-05" in keys
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)
        by_day, found = _found_by_day_and_by_query(memory, question, keys)
    assert by_day == ["t30"]
    assert "t30" in found


def test_a_month_question_finds_a_last_friday_told_in_the_next_week(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    # Said on Thursday 1 June 2023: "last Friday" is 26 May. The turn names no month and no injury, the question no
    # day; the other sessions, in April and July, talk of injuries and share more of the question's words.
    sessions = [
        (datetime(2023, 4, 12, 19, 0, tzinfo=UTC), [
            ("Ann", "I watched a documentary about sports injuries, scary stuff."),
            ("Bob", "Injuries are why I stopped playing rugby."),
            ("Ann", "Did you have an injury yourself?"),
            ("Bob", "A knee injury, years ago, it still aches when it rains.")]),
        (datetime(2023, 6, 1, 20, 0, tzinfo=UTC), [
            ("Bob", "How was your week?"),
            ("Ann", "I sprained my wrist last Friday playing volleyball, it's still blue."),
            ("Bob", "Ouch, get well soon."),
            ("Ann", "Thanks, typing is slow.")]),
        (datetime(2023, 7, 18, 18, 0, tzinfo=UTC), [
            ("Ann", "My team's injury list is long this season."),
            ("Bob", "Injuries happen in every sport, Ann."),
            ("Ann", "Last season we were all fine, now half of us are out."),
            ("Bob", "Hope they heal soon.")]),
    ]
    turns = [Turn(conversation_id="ann-bob", turn_id=f"S{s}:{n}", speaker=speaker, text=text,
                  timestamp=start + timedelta(minutes=n), session_id=str(s))
             for s, (start, lines) in enumerate(sessions, start=1) for n, (speaker, text) in enumerate(lines)]
    question = "What injury did Ann have in May 2023?"
    # The time channel brings the turn in (its "last Friday" is keyed 26 May); its rank is the ranking's.
    from compassmem.text.time_resolution import resolve_time_expressions

    told = sessions[1][1][1][1]  # "I sprained my wrist last Friday ..."
    assert "d:2023-05-26" in turn_time_keys(told, resolve_time_expressions(told, sessions[1][0]))
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)
        request = QueryRequest(conversation_id="ann-bob", question=question, budget_turns=5)
        found = memory.query(request).turn_ids
        # The time the question names does the work: without the time channel and the dated feature the turn is
        # not among the first five.
        undated = Memory(memory.settings, stores=memory.stores, embedder=embedder, engine_config=EngineConfig(
            ranking=RankingConfig(time_candidates=0), model=shipped_model().without("dated")))
        without = undated.query(request).turn_ids
    # Among the first five (Bob's best turn keeps a place there: the speaker hedge).
    assert "S2:1" in found
    assert "S2:1" not in without
