"""Memory that says when it knows nothing (issue #58 item 1): every returned turn carries a calibrated ``relevance``,
every answer ``answerable`` with its probability, ``min_relevance`` drops what is below it, and ``compassmem eval``
measures the calibration and the AUROC on a team's own questions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compassmem.cli.main import main
from compassmem.core.config import Settings
from compassmem.core.contracts.query import AGENT_MIN_RELEVANCE, QueryRequest
from compassmem.evaluation.calibration import auroc, calibration
from compassmem.library.memory import Memory
from compassmem.retrieval.relevance import QUESTION_INPUTS, TURN_INPUTS, shipped_relevance_model

REPOSITORY = Path(__file__).resolve().parent.parent
SAMPLE = REPOSITORY / "examples" / "sample_conversation.jsonl"
NEVER_SAID = "What is the capital of France?"
SAID = "Why was the Atlas launch moved?"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Memory]:  # noqa: ANN401
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("relevance"))
    with Memory(settings, embedder=embedder) as opened:
        opened.add([json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()])
        yield opened


def test_a_question_about_something_never_said_is_not_answerable_and_its_turns_are_not_relevant(
        memory: Memory) -> None:
    never = memory.query(NEVER_SAID, conversation_id="priya-tom")
    said = memory.query(SAID, conversation_id="priya-tom")
    assert never.turn_ids, "without min_relevance the ranking is still returned"
    assert never.answerable is False and never.answerable_probability < 0.1
    assert all(ref.relevance is not None and ref.relevance < AGENT_MIN_RELEVANCE for ref in never.turn_refs)
    assert said.answerable_probability > 5 * never.answerable_probability
    assert max(ref.relevance or 0.0 for ref in said.turn_refs) > 5 * max(ref.relevance or 0.0 for ref in never.turn_refs)


def test_relevance_is_a_probability_on_every_turn_and_each_item_holds_its_best(memory: Memory) -> None:
    response = memory.query(SAID, conversation_id="priya-tom")
    relevance = {ref.turn_id: ref.relevance for ref in response.turn_refs}
    assert relevance and all(value is not None and 0.0 <= value <= 1.0 for value in relevance.values())
    for item in response.evidence:
        assert [turn.relevance for turn in item.turns] == [relevance[turn.turn_id] for turn in item.turns]
        assert item.relevance == max(turn.relevance or 0.0 for turn in item.turns)
    assert 0.0 <= response.answerable_probability <= 1.0
    assert response.answerable is (response.answerable_probability >= 0.5)


@pytest.mark.parametrize("question", [SAID, NEVER_SAID, "When did Priya adopt Biscuit?"])
def test_min_relevance_drops_the_turns_below_it_and_nothing_else(memory: Memory, question: str) -> None:
    everything = memory.query(question, conversation_id="priya-tom")
    values = sorted({ref.relevance or 0.0 for ref in everything.turn_refs})
    for threshold in (0.0, values[len(values) // 2], values[-1], 1.0):
        kept = memory.query(QueryRequest(conversation_id="priya-tom", question=question, min_relevance=threshold))
        expected = [ref.turn_id for ref in everything.turn_refs if (ref.relevance or 0.0) >= threshold]
        assert kept.turn_ids == expected
        shown = [turn.turn_id for item in kept.evidence for turn in item.turns]
        assert sorted(shown) == sorted(expected) and all(item.turns for item in kept.evidence)
        # Whether memory holds an answer does not depend on what the caller chose to drop.
        assert kept.answerable_probability == everything.answerable_probability


def test_the_explanation_says_what_relevance_and_answerable_were_computed_from(memory: Memory) -> None:
    explained = memory.query(QueryRequest(conversation_id="priya-tom", question=SAID, explain=True)).explanation
    assert explained is not None
    assert set(explained.answerable_inputs) == set(QUESTION_INPUTS)
    assert all(set(turn.relevance_inputs) == set(TURN_INPUTS) for turn in explained.turns)
    model = shipped_relevance_model()
    response = memory.query(SAID, conversation_id="priya-tom")
    inputs = {name: np.asarray([turn.relevance_inputs[name] for turn in explained.turns]) for name in TURN_INPUTS}
    recomputed = model.calibrated(model.turn_relevance(inputs))
    assert np.allclose(recomputed, [ref.relevance for ref in response.turn_refs], atol=2e-3)


def test_the_shipped_model_records_held_out_figures_that_meet_the_bars() -> None:
    model = shipped_relevance_model()
    assert set(model.turn.weights) == set(TURN_INPUTS) and set(model.question.weights) == set(QUESTION_INPUTS)
    figures = model.validation
    assert figures["turn_relevance_ece"] <= 0.05
    assert figures["answerable_auroc_wrong_conversation"] >= 0.85


def test_reported_relevance_rises_with_the_turn_model_and_stays_a_probability() -> None:
    model = shipped_relevance_model()
    assert model.turn_calibration, "the shipped model reports relevance through its fitted calibration map"
    raw = np.linspace(0.0, 1.0, 201)
    reported = model.calibrated(raw)
    assert np.all(np.diff(reported) >= 0)
    assert reported.min() >= 0.0 and reported.max() <= 1.0


def test_auroc_and_calibration_error_of_known_cases() -> None:
    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auroc([0.1], [0.9]) == 0.0
    assert auroc([0.5, 0.5], [0.5]) == 0.5
    assert auroc([], [0.1]) is None
    perfect = calibration([0.25] * 4 + [0.75] * 4, [True, False, False, False, True, True, True, False])
    assert perfect is not None and perfect.ece == 0.0
    off = calibration([0.9] * 10, [True] * 5 + [False] * 5)
    assert off is not None and off.ece == pytest.approx(0.4) and off.bins[0].observed == 0.5
    assert calibration([], []) is None


def test_eval_reports_calibration_and_answerable_auroc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    turns = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    other = [{**turn, "conversation_id": "ana-ben", "text": text, "speaker": ("Ana", "Ben")[i % 2]}
             for i, (turn, text) in enumerate(zip(turns, [
                 "We moved the Lisbon trip to May because Ben's passport expired.",
                 "I renewed the passport last week, it arrives on Friday.",
                 "My sister adopted a grey kitten called Pebble.",
                 "I started a pottery class on Thursday evenings.",
                 "The bakery offered me the head baker position starting in July.",
                 "I repaired the greenhouse roof with polycarbonate after the storm."], strict=False))]
    data = tmp_path / "data"
    source = tmp_path / "turns.jsonl"
    source.write_text("".join(json.dumps(t) + "\n" for t in turns + other), encoding="utf-8")
    assert main(["--data-dir", str(data), "ingest", str(source)]) == 0
    capsys.readouterr()
    questions = [
        {"question": "Why was the Lisbon trip moved?", "conversation_id": "ana-ben", "evidence": [other[0]["turn_id"]]},
        {"question": "What class did Ana start?", "conversation_id": "ana-ben", "evidence": [other[3]["turn_id"]]},
        {"question": SAID, "conversation_id": "priya-tom", "evidence": [turns[0]["turn_id"]]},
        {"question": NEVER_SAID, "conversation_id": "priya-tom", "evidence": [turns[0]["turn_id"]],
         "category": "never said"},
    ]
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    figures = tmp_path / "figures.json"
    code = main(["eval", str(path), "--data-dir", str(data), "--baselines", "none", "--json", str(figures),
                 "--unanswerable-category", "never said"])
    out = capsys.readouterr().out
    assert code == 0
    assert "says when it knows nothing:" in out and "expected calibration error" in out
    written = json.loads(figures.read_text())["answerability"]
    assert written["answerable_questions"] == 3 and written["unanswerable_questions"] == 1
    # Each answerable question asked of the other conversation of its tenant.
    assert written["wrong_conversation_questions"] == 3
    assert 0.0 <= written["auroc_wrong_conversation"] <= 1.0 and written["auroc_unanswerable"] is not None
    assert 0.0 <= written["relevance"]["ece"] <= 1.0
