"""Questions that relate two events in time: each event is searched for on its own and keeps places in the top."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.retrieval.decomposition import analyse, two_events
from compassmem.retrieval.engine import SubgoalScores, _keep_each_events_best


def test_the_two_events_of_a_question_about_their_distance_or_order() -> None:
    assert two_events("How many weeks passed between Maria adopting Coco and Shadow?") == [
        "Maria adopting Coco", "Maria adopting Shadow"]  # the elliptical second event borrows the first's words
    assert two_events("How long before the wedding did Ann buy the dress?") == ["did Ann buy the dress",
                                                                              "Ann the wedding"]
    assert two_events("Which city was John in before traveling to Chicago?") == ["Which city was John in",
                                                                                 "John traveling to Chicago"]
    # A date is no event, a question about one event is not split, and "when ... after" names which one it means.
    assert two_events("What did Tim do before 16 November 2023?") == []
    assert two_events("Where was John between August 11 and August 15 2023?") == []
    assert two_events("How did Melanie feel after the accident?") == []
    assert two_events("When did John meet his teammates after returning from Chicago?") == []
    analysis = analyse("How long before the wedding did Ann buy the dress?")
    assert analysis.events and all(event in [s.text for s in analysis.subgoals] for event in analysis.events)


def test_each_event_keeps_its_best_turns_in_the_top_places() -> None:
    def subgoal(text: str, best: list[int]) -> SubgoalScores:
        turns = np.zeros(20)
        turns[best] = [1.0 - 0.1 * i for i in range(len(best))]
        return SubgoalScores(text=text, turns=turns, events=np.zeros(1), best_similarity=1.0, channels={})

    order = np.arange(10)  # rows 0-9 ranked; the second event's turns (15, 16) are not among them
    scored = [subgoal("whole", [0, 1]), subgoal("A", [0, 1]), subgoal("B", [15, 16])]
    kept = list(_keep_each_events_best(order, scored, ["A", "B"], (5, 10)))
    assert len(kept) == 10
    assert 15 in kept[:5] and 16 in kept[:10]  # B's best within 5, its second within 10
    assert 0 in kept[:5] and 1 in kept[:10]  # A keeps its places too
    assert list(_keep_each_events_best(order, scored, [], (5, 10))) == list(order)


def test_a_question_about_the_time_between_two_events_finds_both(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    def session(day: datetime, number: int, lines: list[tuple[str, str]]) -> list[Turn]:
        return [Turn(conversation_id="pets", turn_id=f"D{number}:{n}", speaker=speaker, text=text,
                     timestamp=day + timedelta(minutes=n), session_id=str(number))
                for n, (speaker, text) in enumerate(lines, start=1)]

    rex = [("Ann", "I adopted Rex from the shelter today, adopting him was the best decision!"),
           ("Bob", "Congrats on adopting Rex, Ann!"),
           ("Ann", "Rex already knows his name, adopting a grown dog is easier than I thought."),
           ("Bob", "Adopting Rex must have been exciting."),
           ("Ann", "Everyone at the shelter said adopting Rex was a match.")]
    turns = [
        *session(datetime(2023, 3, 1, 18, 0, tzinfo=UTC), 1, rex),
        *session(datetime(2023, 3, 8, 18, 0, tzinfo=UTC), 2, [
            ("Ann", "Rex loves the park, adopting him changed my mornings."),
            ("Bob", "Adopting Rex made you a morning person!")]),
        *session(datetime(2023, 3, 22, 18, 0, tzinfo=UTC), 3, [
            ("Ann", "Big news: Bella joined the family today, a tiny kitten from the neighbours."),
            ("Bob", "Aww, welcome Bella!")]),
    ]
    question = "How many weeks passed between Ann adopting Rex and Bella?"
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)

        def top(text: str) -> list[str]:
            return memory.query(QueryRequest(conversation_id="pets", question=text, budget_turns=5)).turn_ids

        found = top(question)
    # Seven turns are about adopting Rex; the answer needs the first of them and the one that says when Bella came.
    assert "D1:1" in found and "D3:1" in found
