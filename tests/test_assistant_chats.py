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
from compassmem.text.text_features import question_share
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
