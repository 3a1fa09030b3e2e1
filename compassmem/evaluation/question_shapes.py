"""The shape of a question, for reporting recall by shape: "When ...?" questions hold up on unseen conversations
while questions that name a date, ask how long, ask which year, list instances or relate two events are where
recall is lost. The rules live beside the question analysis (``retrieval/decomposition.py``), since a query's
explanation names the shape too; the engine does not branch on these labels."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from compassmem.evaluation.harness import MethodResult
from compassmem.evaluation.locomo_questions import Question
from compassmem.evaluation.recall import CategoryRecall, group_recall
from compassmem.retrieval.decomposition import SHAPES, question_shape

__all__ = ["SHAPES", "question_shape", "recall_by_shape"]


def recall_by_shape(questions: Sequence[Question], result: MethodResult,
                    categories: Collection[int | str] | None = None) -> dict[str, CategoryRecall]:
    """A method's mean recall per question shape (in the order of SHAPES), over the questions of ``categories``
    (every question when None); ``result`` is the method's evaluation of exactly ``questions``."""
    labels = [question_shape(q.question) if categories is None or q.category in categories else None
              for q in questions]
    return group_recall(labels, result.per_question, result.summary.budgets, order=SHAPES)
