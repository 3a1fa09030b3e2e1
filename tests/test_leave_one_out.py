"""Leave-one-conversation-out: a setting is chosen without the conversation it is scored on."""

from __future__ import annotations

from compassmem.evaluation.leave_one_out import DEFAULTS, candidate_changes, leave_one_out
from compassmem.evaluation.locomo_questions import Question
from compassmem.retrieval.engine import RankingConfig


def question(conversation: str, n: int) -> Question:
    return Question(conversation_id=conversation, question=f"q{n}?", category=1, evidence=["D1:1"])


def test_a_setting_that_only_fits_one_conversation_is_not_credited_to_it() -> None:
    questions = [question("a", 1), question("a", 2), question("b", 3), question("b", 4), question("c", 5),
                 question("c", 6)]
    recall = {
        DEFAULTS: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        # Wins big on conversation a alone: in-sample it is the best setting, held out it never helps a.
        "overfit": [1.0, 1.0, 0.0, 0.5, 0.5, 0.5],
    }
    result = leave_one_out(questions, recall)
    assert result.in_sample_best == "overfit" and result.in_sample_defaults == 50.0
    folds = {f.conversation_id: f for f in result.folds}
    assert folds["a"].chosen == DEFAULTS and folds["a"].recall_chosen == 50.0  # chosen on b and c: defaults
    assert folds["b"].chosen == "overfit" and folds["b"].recall_chosen == 25.0  # and there it costs
    assert folds["c"].chosen == "overfit" and folds["c"].recall_chosen == 50.0
    assert round(result.held_out, 3) == round((50 + 25 + 50) / 3, 3)
    assert result.held_out < result.in_sample_best_recall


def test_ties_go_to_the_defaults_and_every_chosen_weight_is_tried_off_and_doubled() -> None:
    questions = [question("a", 1), question("b", 2)]
    same = {DEFAULTS: [1.0, 0.0], "other": [1.0, 0.0]}
    assert all(f.chosen == DEFAULTS for f in leave_one_out(questions, same).folds)
    candidates = candidate_changes(RankingConfig().model_dump())
    assert candidates[DEFAULTS] == {}
    assert candidates["date_boost=0"] == {"date_boost": 0.0} and candidates["date_boost=0.4"] == {"date_boost": 0.4}
