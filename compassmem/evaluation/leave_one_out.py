"""Leave-one-conversation-out: how much of a recall figure comes from choosing settings on the same conversations.

The ranking's weights were chosen by looking at the development conversations. To see what that choice is worth
on a conversation it never saw, every candidate configuration (the defaults, and each weight switched off or
doubled) answers every question once; then, for each conversation in turn, the configuration that did best on the
*other* conversations is chosen and scored on the held-out one. The mean of those held-out scores is the figure to
expect on new conversations; next to the in-sample figure of the defaults it says how much was fitted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from compassmem.evaluation.locomo_questions import Question

# The weights a person chose on the development split: each is tried off and doubled (RankingConfig fields).
CHOSEN_WEIGHTS: tuple[str, ...] = (
    "window_weight", "context_weight", "time_boost", "date_boost", "speaker_boost", "category_weight",
    "walk_weight", "aggregate_session_diversity", "aggregate_redundancy", "question_penalty", "feedback_weight",
)
DEFAULTS = "defaults"


def candidate_changes(defaults: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Name -> the fields a candidate changes: the defaults, and each chosen weight off and doubled."""
    candidates: dict[str, dict[str, float]] = {DEFAULTS: {}}
    for field in CHOSEN_WEIGHTS:
        value = float(defaults[field])
        if value == 0:
            continue
        candidates[f"{field}=0"] = {field: 0.0}
        candidates[f"{field}={2 * value:g}"] = {field: 2 * value}
    return candidates


class HeldOut(BaseModel):
    conversation_id: str
    questions: int
    chosen: str
    recall_chosen: float
    recall_defaults: float


class LeaveOneOut(BaseModel):
    folds: list[HeldOut]
    in_sample_defaults: float
    in_sample_best: str
    in_sample_best_recall: float
    held_out: float


def _mean(values: Sequence[float]) -> float:
    return 100 * sum(values) / len(values) if values else 0.0


def leave_one_out(questions: Sequence[Question], recall: Mapping[str, Sequence[float]]) -> LeaveOneOut:
    """``recall[candidate][i]`` is the recall of ``questions[i]`` under that candidate (all questions counted
    alike, as the in-sample figure counts them). Ties between candidates go to the defaults, then by name."""
    names = sorted(recall, key=lambda n: (n != DEFAULTS, n))
    conversations = sorted({q.conversation_id for q in questions})

    def score(name: str, keep: set[str]) -> float:
        return _mean([r for q, r in zip(questions, recall[name], strict=True) if q.conversation_id in keep])

    folds = []
    for held in conversations:
        rest = set(conversations) - {held}
        chosen = max(names, key=lambda n: (round(score(n, rest), 9), n == DEFAULTS))
        folds.append(HeldOut(conversation_id=held, questions=sum(q.conversation_id == held for q in questions),
                             chosen=chosen, recall_chosen=score(chosen, {held}),
                             recall_defaults=score(DEFAULTS, {held})))
    everyone = set(conversations)
    best = max(names, key=lambda n: (round(score(n, everyone), 9), n == DEFAULTS))
    held_out = sum(f.recall_chosen * f.questions for f in folds) / max(1, sum(f.questions for f in folds))
    return LeaveOneOut(folds=folds, in_sample_defaults=score(DEFAULTS, everyone), in_sample_best=best,
                       in_sample_best_recall=score(best, everyone), held_out=held_out)
