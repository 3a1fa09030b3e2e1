"""Retrieval on user <-> assistant chats: requests that tell before they ask, questions in the first and second
person, and memories of one-message events (real embedded stores, built by ``Memory.add``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.write.importers import read_turns
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.text.text_features import question_share, states_standing_wish
from compassmem.retrieval.decomposition import analyse
from compassmem.retrieval.engine import EngineConfig, RankingConfig, asked_speakers

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"

REQUEST = ("I'm planning a two-week trip to Portugal in September with my partner. Our total budget is 4,200 euros "
           "including flights from Berlin, and we want to split the time between Lisbon, Porto and the Algarve. "
           "My partner is vegetarian and I get seasick, so no boat tours. Can you suggest an itinerary?")


def test_a_request_that_tells_before_it_asks_is_not_a_turn_that_asks() -> None:
    # Chit-chat's asking turn keeps most of its weight; a request that first describes its asker's situation
    # carries facts of its own and is not lowered as one that only asks.
    assert question_share("That's lovely! What did you paint?") > 0.5
    assert question_share(REQUEST) < 0.05  # its asking sentence alone is a sixth of it
    assert question_share("We went hiking. Was it the right call?") > question_share(REQUEST)


def test_a_question_in_the_first_person_asks_about_the_users_side() -> None:
    roles = {"user", "assistant"}
    assert asked_speakers("What did I say my budget was?", roles) == {"user"}
    assert asked_speakers("Which restaurant did you recommend in Porto?", roles) == {"assistant"}
    assert asked_speakers("Which restaurant did you recommend for my partner?", roles) == {"user", "assistant"}
    assert asked_speakers("Which city comes last in the itinerary?", roles) == set()
    # Asked to do something now, "you" is nobody whose turns answer; asked about what was said, it is the assistant.
    assert asked_speakers("Can you explain how eccentricity shapes an ellipse?", roles) == set()
    assert asked_speakers("How would you find the derivative of x^3?", roles) == set()
    assert asked_speakers("Could you remind me what budget I set?", roles) == {"user"}
    assert asked_speakers("Can you list the tools you suggested?", roles) == {"assistant"}
    # Named participants are asked about by name only: "I" in a question about Ann and Bob's chat is nobody's.
    assert asked_speakers("What did I say Ann painted?", {"Ann", "Bob"}) == {"Ann"}
    assert asked_speakers("What did I say about painting?", {"Ann", "Bob"}) == set()


def _assistant_chat() -> list[Turn]:
    answers = [
        (REQUEST, "Here is a plan: five days in Lisbon, four in Porto and five in Lagos. A budget of that size "
                  "covers mid-range hotels; trains connect the three cities."),
        ("Which neighbourhood in Lisbon should we stay in?", "Stay in Alfama or Chiado: central, walkable, with "
                                                            "plenty of vegetarian restaurants."),
        ("What is the best way to get from Porto to Lagos?", "Take the train to Lisbon and change to the Algarve "
                                                            "line; it takes about six hours in all."),
    ]
    start = datetime(2024, 5, 2, 18, 0, tzinfo=UTC)
    turns = []
    for n, (ask, answer) in enumerate(answers):
        for offset, (speaker, text) in enumerate((("user", ask), ("assistant", answer))):
            turns.append(Turn(conversation_id="trip", turn_id=f"m{2 * n + offset}", speaker=speaker, text=text,
                              timestamp=start + timedelta(minutes=10 * n + offset), session_id="1"))
    return turns


def test_what_i_said_is_found_in_my_request_not_in_the_answer_that_repeats_it(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_assistant_chat())
        found = memory.query(QueryRequest(conversation_id="trip", question="What did I say our total budget was?",
                                          budget_turns=3)).turn_ids
        recommended = memory.query(QueryRequest(conversation_id="trip", budget_turns=3,
                                                question="Which neighbourhoods did you recommend in Lisbon?"))
    # The user's request holds the budget (4,200 euros); the assistant's plan only mentions "a budget".
    assert found[0] == "m0"
    # What "you" recommended is on the assistant's side: the user's long request (which names Lisbon too) is not
    # among the first two.
    assert set(recommended.turn_ids[:2]) <= {"m1", "m3", "m5"}


def test_candidates_are_counted_in_turns_not_events(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(list(read_turns(SAMPLE)))
        question = analyse("Why was the Atlas launch moved?")
        vectors = memory.embedder.embed([s.text for s in question.subgoals])

        def candidate_turns(**ranking: int) -> int:
            engine = Memory(memory.settings, stores=memory.stores, embedder=memory.embedder,
                            engine_config=EngineConfig(ranking=RankingConfig(**ranking))).engine
            scope = QueryRequest(conversation_id="priya-tom", question=question.question).scope
            return len(engine._candidates(scope, question, np.asarray(vectors), {}).turn_ids)

        one_event = candidate_turns(max_candidate_events=1, max_candidate_turns=1)
        # One event at a time, until the events hold the turn budget: more events are read, not just the first.
        assert candidate_turns(max_candidate_events=1, max_candidate_turns=one_event + 1) > one_event
        # ... and never past the total cap of events.
        assert candidate_turns(max_candidate_events=1, max_candidate_turns=10_000,
                               max_candidate_events_total=1) == one_event


def test_a_standing_wish_is_an_instruction_or_preference_for_later_requests() -> None:
    wishes = ["Always use 24-hour time format when I ask about meeting schedules.",
              "Please always include type hints.", "When I ask about deployments, add a checklist.",
              "I prefer exact fractions over decimals.", "I'd rather keep it in Python.",
              "My preference is dark mode.", "From now on, answer in metric units.",
              "Never\n  suggest paid tools\twhenever I   ask about hosting."]
    passing = ["I always go to the gym on Mondays.", "Never mind, thanks!",
               "I have always wanted a dog when I was a kid.", "You should always check units when you need to.",
               "It's a task I asked about before."]
    assert [states_standing_wish(text) for text in wishes] == [True] * len(wishes)
    assert [states_standing_wish(text) for text in passing] == [False] * len(passing)


_PROJECT_ANSWERS = [
    ("I'm setting up the backend for our booking app with FastAPI and PostgreSQL. The team is three developers, we "
     "deploy to a single container for now, and I want the code to stay easy to navigate as we add payments and "
     "notifications later this year. We already have a users table and a venues table, and the first endpoints are "
     "search and booking creation. What folder layout would you use?",
     "A layout that keeps each concern apart works well. Put the FastAPI application factory in app/main.py, the "
     "routers in app/routers with one module per resource, the SQLAlchemy models in app/models and the Pydantic "
     "schemas in app/schemas. Database sessions belong in app/db.py with a dependency that yields a session per "
     "request and closes it afterwards. Keep settings in one pydantic-settings class read from the environment, "
     "and put Alembic migrations beside the package so that every schema change is reviewed with the code that "
     "needs it. Tests mirror the package: one test module per router, run against a throwaway database."),
    ("Always use 24-hour time format when I ask about meeting schedules.",
     "Understood: I will give meeting times in 24-hour format from now on."),
    ("Our team sync moved, so the sprint review is now the main place where the design team sees our progress. "
     "Last time it ran over by forty minutes because we debated priorities in the room, and two stakeholders left "
     "before the demo. The booking flow and the venue search are done, the payment integration is half finished. "
     "Can you help me plan the agenda for the sprint review with the design team?",
     "For a sprint review, start with the sprint goal and whether it was met, then demonstrate each finished story "
     "with the person who built it, and keep the discussion of unfinished work short and factual. Ask the design "
     "team to bring the updated booking flow mock-ups so that feedback lands before the next planning session. "
     "Reserve the last part for questions from stakeholders and note every decision with its owner. Send the "
     "agenda a day ahead, with links to the board and to the demo environment, and keep the meeting to an hour."),
    ("The bookings table has about two million rows now and grows by fifty thousand a week. The slowest queries "
     "are the availability checks, which filter by venue and by a date range, and the monthly reports, which "
     "filter by date range alone and group by venue. We run PostgreSQL 15 on a managed instance with 8 GB of "
     "memory. How should I index the bookings table?",
     "Create a composite B-tree index on (venue_id, starts_at): queries that filter by venue and a date range use "
     "it for both conditions, and it also serves ordering by start time within a venue. If some queries filter by "
     "date range alone, add a separate index on starts_at. Check the plans with EXPLAIN ANALYZE on realistic data "
     "volumes, since the planner may prefer a sequential scan on small tables, and watch the index size as bookings "
     "accumulate; partitioning by month becomes worthwhile once the table holds tens of millions of rows."),
    ("We agreed the next planning meeting is on Thursday at 3 in the afternoon with the whole team, including "
     "the two designers and the product owner, in the large meeting room. The product owner wants to settle the "
     "order of the payment stories and the notification stories before then, and I need to prepare the velocity "
     "figures of the last three sprints. What should I prepare for it?",
     "Noted: the next planning meeting is on Thursday at 15:00 with the whole team. Before it, groom the backlog so "
     "that the top stories have acceptance criteria and estimates, and ask each developer to flag dependencies on "
     "the design team or on the payment provider. A short written summary of last sprint's velocity helps the team "
     "commit to a realistic amount of work, and the meeting stays focused when the product owner brings the order "
     "of priorities already decided rather than deciding it in the room."),
]


def _project_chat() -> list[Turn]:
    """A chat of an assistant's long answers (each about 300 words: its paragraph said three times, the length a
    written answer has) around a standing instruction."""
    start = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
    turns = []
    for n, (ask, answer) in enumerate(_PROJECT_ANSWERS):
        long_answer = answer if len(answer) < 200 else "\n\n".join([answer] * 3)
        for offset, (speaker, text) in enumerate((("user", ask), ("assistant", long_answer))):
            turns.append(Turn(conversation_id="booking-app", turn_id=f"m{2 * n + offset}", speaker=speaker,
                              text=text, timestamp=start + timedelta(days=n, minutes=offset), session_id=str(n)))
    return turns


def test_a_standing_instruction_answers_a_later_request_on_its_subject(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    request = QueryRequest(conversation_id="booking-app", question="What time is our next meeting scheduled for?",
                           budget_turns=10)
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_project_chat())
        refs, features = memory.engine.candidate_features(request)
        ranked = memory.query(request).turn_ids
        memory.engine.model = memory.engine.model.without("wish")
        unaware = memory.query(request).turn_ids
    # The instruction, and the answer that takes it on ("... from now on"); none of the other turns.
    assert {ref.turn_id for ref, wish in zip(refs, features["wish"], strict=True) if wish} == {"m2", "m3"}
    # The instruction shares little with the question but tells how to answer it: it is among the first three,
    # and it climbs there through the standing-wish weight.
    assert ranked.index("m2") < 3
    assert ranked.index("m2") < unaware.index("m2")
    # ... and a turn that tells when the meeting is (the user's, m8, or the answer restating it, m9) stays there too.
    assert min(ranked.index("m8"), ranked.index("m9")) < 3


def test_a_standing_instruction_is_a_candidate_whatever_words_the_request_uses(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    """The wish search: turns marked, when written, as stating a standing instruction are searched on their own, so
    the instruction is ranked even where the other searches (held here to two hits each) never reach it."""
    request = QueryRequest(conversation_id="booking-app", question="When is the planning session with the whole team?",
                           budget_turns=10)
    narrow = dict(dense_candidates=2, keyword_candidates=2, passage_candidates=0, neighbour_events=0)
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_project_chat())
        candidates = {}
        for wish_candidates in (0, 5):
            memory.engine.config = EngineConfig(ranking=RankingConfig(**narrow, wish_candidates=wish_candidates))
            refs, _ = memory.engine.candidate_features(request)
            candidates[wish_candidates] = [ref.turn_id for ref in refs]
    assert "m2" not in candidates[0]
    # The instruction and the answer that takes it on, beside what the other searches found.
    assert {"m2", "m3"} <= set(candidates[5])
    assert set(candidates[0]) < set(candidates[5])


def test_a_question_naming_nobody_leans_to_what_the_user_said(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    """The user_side feature: the user's own turns (facts of their situation), where the participants are a user and
    an assistant; not for a question about what the assistant said, nor in a chat between named people."""
    rows = QueryRequest(conversation_id="booking-app", question="How many rows does the bookings table hold?",
                        budget_turns=10)
    recommended = QueryRequest(conversation_id="booking-app", budget_turns=10,
                               question="Which index did you recommend for the bookings table?")
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_project_chat())
        memory.add(list(read_turns(SAMPLE)))
        refs, features = memory.engine.candidate_features(rows)
        user_turns = {turn.turn_id for turn in _project_chat() if turn.speaker == "user"}
        assert {ref.turn_id for ref, side in zip(refs, features["user_side"], strict=True) if side} == (
            user_turns & {ref.turn_id for ref in refs})
        assert not memory.engine.candidate_features(recommended)[1]["user_side"].any()
        people = QueryRequest(conversation_id="priya-tom", question="Why was the Atlas launch moved?")
        assert not memory.engine.candidate_features(people)[1]["user_side"].any()
        ranked = memory.query(rows).turn_ids
        found_for_assistant = memory.query(recommended).turn_ids
        memory.engine.model = memory.engine.model.without("user_side")
        unaware = memory.query(rows).turn_ids
    # The user's message holds the figure ("about two million rows"); the assistant's answer on indexing the same
    # table shares more of the question's words, and comes first without the feature.
    assert ranked[0] == "m6"
    assert unaware.index("m7") < unaware.index("m6")
    # Asked what "you" recommended, the assistant's answer comes first.
    assert found_for_assistant[0] == "m7"


def _project_chat_a_month_on() -> list[Turn]:
    """The project chat, and a month later the user describing the backend anew (Django and MySQL, not the FastAPI
    and PostgreSQL of the first request)."""
    turns = _project_chat()
    later = ("Quick update on the booking app backend: the framework is now Django and the database is MySQL, since "
             "the new hires know both better, and the payment stories are done. The notification work starts next "
             "sprint. Can you suggest how to structure the notification module in that framework?")
    answer = "\n\n".join(["For notifications, keep a small app of its own with a model per notification, a service "
                          "that decides who is told, and one sender per channel (email, push, SMS), each behind the "
                          "same interface so that tests can replace it. Queue the sending with Celery so that a "
                          "request never waits for a provider, and record each attempt with its result to retry "
                          "failures and to answer support questions later."] * 3)
    start = turns[-1].timestamp + timedelta(days=30)
    return turns + [Turn(conversation_id="booking-app", turn_id=f"m{10 + n}", speaker=speaker, text=text,
                         timestamp=start + timedelta(minutes=n), session_id="9")
                    for n, (speaker, text) in enumerate((("user", later), ("assistant", answer)))]


def test_a_question_about_how_things_began_leans_to_the_earliest_turns(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    """The early feature: asked what was said "when I first described" something, earlier turns weigh more."""
    first = QueryRequest(conversation_id="booking-app", budget_turns=10,
                         question="Which framework and database did I say the backend used when I first described it?")
    plain = QueryRequest(conversation_id="booking-app", budget_turns=10,
                         question="Which framework and database does the backend use?")
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(_project_chat_a_month_on())
        refs, features = memory.engine.candidate_features(first)
        early = {ref.turn_id: value for ref, value in zip(refs, features["early"], strict=True)}
        assert not memory.engine.candidate_features(plain)[1]["early"].any()
        ranked = memory.query(first).turn_ids
        memory.engine.model = memory.engine.model.without("early")
        unaware = memory.query(first).turn_ids
    # From 1 for the conversation's earliest candidate down to 0 for its latest, in time order.
    order = sorted(early, key=lambda turn_id: int(turn_id[1:]))
    assert early[order[0]] == 1.0 and early[order[-1]] == 0.0
    assert [early[t] for t in order] == sorted(early.values(), reverse=True)
    # The first description (m0) comes first; the later one (m10) is ranked lower than without the feature.
    assert ranked[0] == "m0"
    assert ranked.index("m10") > unaware.index("m10")
