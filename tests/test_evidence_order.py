"""Evidence comes in the order of the ranked turns and its scores agree with that order: `compassmem ask` showed an
event scored 1.00 below one scored 0.98. An item's score is the score of its best turn's place in the ranking."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from compassmem import Memory
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryResponse
from compassmem.retrieval.engine import placing_scores

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
QUESTIONS = [
    "When did Priya adopt Biscuit?",
    "Why was the Atlas launch moved, and when did it finally launch?",
    "What did Tom and Priya talk about?",  # aggregating: the ranking spreads its turns over sessions
    "What did Tom say about crate training?",  # names a participant: the other one's best turn keeps a place
    "Where did Priya go hiking, and what happened to Biscuit meanwhile?",
]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Iterator[Memory]:
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("evidence-order"))  # type: ignore[call-arg]
    with Memory(settings, embedder=embedder) as opened:  # type: ignore[arg-type]
        opened.add([json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()], warm=False)
        yield opened


def _asked(memory: Memory, question: str) -> QueryResponse:
    return memory.query(question, conversation_id="priya-tom", budget_turns=10, explain=True)


@pytest.mark.parametrize("question", QUESTIONS)
def test_evidence_follows_the_ranked_turns_and_its_scores_never_rise(memory: Memory, question: str) -> None:
    response = _asked(memory, question)
    assert response.explanation is not None
    ranked = [item.event_id for _, item in response.ranked_turns()]
    assert [item.event_id for item in response.evidence] == list(dict.fromkeys(ranked))
    scores = [item.score for item in response.evidence]
    assert scores == sorted(scores, reverse=True), scores
    # The score of the item's place: its best turn's, or the best placed after it where the ranking moved it.
    final = [turn.score for turn in response.explanation.turns]
    for item in response.evidence:
        first = ranked.index(item.event_id)
        assert item.score == pytest.approx(max(final[first:]), abs=1e-4)


def test_placing_scores_follow_the_order_and_lift_only_a_moved_turn() -> None:
    final = np.array([0.2, 0.9, 0.5, 0.7])
    # Ranked by score: each place keeps its turn's score.
    assert placing_scores(np.array([1, 3, 2, 0]), final).tolist() == [0.9, 0.7, 0.5, 0.2]
    # Turn 2 (0.5) moved above turn 3 (0.7): its place is scored 0.7, nothing rises down the list.
    assert placing_scores(np.array([1, 2, 3, 0]), final).tolist() == [0.9, 0.7, 0.7, 0.2]
