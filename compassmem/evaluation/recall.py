"""Evidence recall at a turn budget, as defined below (the figure every LoCoMo benchmark here reports).

recall@B of one question = |gold ∩ first B distinct ranked turns| / |gold|. Recall is computed per question
and averaged over questions (macro) within each category 1-5; "1-4" is the mean over all questions of
categories 1-4 together (so larger categories weigh more; it is *not* the mean of the four category means).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from pydantic import BaseModel, Field

BUDGETS: tuple[int, ...] = (5, 10, 20)
CATEGORIES: tuple[int, ...] = (1, 2, 3, 4, 5)
TOGETHER = "1-4"
TOGETHER_CATEGORIES: frozenset[int] = frozenset({1, 2, 3, 4})


def first_distinct(ranked_turn_ids: Iterable[str], budget: int) -> list[str]:
    """The first ``budget`` distinct turn ids, in rank order (repeats are skipped, not counted)."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    chosen: list[str] = []
    seen: set[str] = set()
    for turn_id in ranked_turn_ids:
        if len(chosen) >= budget:
            break
        if turn_id in seen:
            continue
        seen.add(turn_id)
        chosen.append(turn_id)
    return chosen


def recall_at(ranked_turn_ids: Sequence[str], gold: Sequence[str], budget: int) -> float:
    """Share of the distinct gold turns found among the first ``budget`` distinct ranked turns."""
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("recall is undefined without gold evidence (skip such questions)")
    hits = gold_set.intersection(first_distinct(ranked_turn_ids, budget))
    return len(hits) / len(gold_set)


def context_tokens(
    ranked_turn_ids: Sequence[str], budget: int, text_of: Callable[[str], str]
) -> int:
    """Whitespace tokens of the first ``budget`` distinct turns' texts: the context a reader would get."""
    return sum(len(text_of(turn_id).split()) for turn_id in first_distinct(ranked_turn_ids, budget))


class CategoryRecall(BaseModel):
    """Macro mean recall per budget over the questions of one category (or of 1-4 together)."""

    questions: int
    recall: dict[int, float] = Field(description="budget -> mean recall")


class RecallSummary(BaseModel):
    """Per-category ('1'..'5') and '1-4' macro means; categories without questions are absent."""

    budgets: list[int]
    categories: dict[str, CategoryRecall]

    def value(self, category: str | int, budget: int) -> float | None:
        entry = self.categories.get(str(category))
        return None if entry is None else entry.recall.get(budget)


def summarise_recall(
    outcomes: Iterable[tuple[int | str, Mapping[int, float]]], budgets: Sequence[int] = BUDGETS,
    overall: str | None = None, together: bool = True,
) -> RecallSummary:
    """Aggregate per-question ``(category, {budget: recall})`` into per-category and 1-4 macro means.

    ``together=False`` leaves out the 1-4 group (LoCoMo's; a team's own categories are other things);
    ``overall`` names a last group of every question."""
    groups: dict[str, list[Mapping[int, float]]] = {}
    for category, recalls in outcomes:
        groups.setdefault(str(category), []).append(recalls)
        if together and category in TOGETHER_CATEGORIES:
            groups.setdefault(TOGETHER, []).append(recalls)
        if overall is not None:
            groups.setdefault(overall, []).append(recalls)
    order = [str(c) for c in CATEGORIES] + [TOGETHER]
    last = [overall] if overall is not None and overall in groups else []
    keys = [k for k in order if k in groups] + sorted(k for k in groups if k not in order and k not in last) + last
    return RecallSummary(budgets=list(budgets), categories={key: mean_recall(groups[key], budgets) for key in keys})


def mean_recall(recalls: Sequence[Mapping[int, float]], budgets: Sequence[int]) -> CategoryRecall:
    """The macro mean per budget of some questions' recalls."""
    return CategoryRecall(questions=len(recalls),
                          recall={b: sum(r[b] for r in recalls) / len(recalls) for b in budgets})


def group_recall(labels: Sequence[str | None], recalls: Sequence[Mapping[int, float]],
                 budgets: Sequence[int], order: Sequence[str] = ()) -> dict[str, CategoryRecall]:
    """Mean recall per label: ``labels[i]`` is the group of the question whose recalls are ``recalls[i]`` (None: in
    no group). Groups come in ``order``, then the others by name."""
    groups: dict[str, list[Mapping[int, float]]] = {}
    for label, question_recalls in zip(labels, recalls, strict=True):
        if label is not None:
            groups.setdefault(label, []).append(question_recalls)
    keys = [k for k in order if k in groups] + sorted(k for k in groups if k not in order)
    return {key: mean_recall(groups[key], budgets) for key in keys}
