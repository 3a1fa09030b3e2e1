"""Offline evaluation: LoCoMo evidence recall at a turn budget.

- :mod:`compassmem.evaluation.locomo_questions` loads the questions and normalises their evidence ids
  (the only place that reads LoCoMo's ``qa``; it is for judging, never for building memory);
- :mod:`compassmem.evaluation.recall` defines recall@B and its per-category macro means;
- :mod:`compassmem.evaluation.harness` is the loop any :class:`Retriever` plugs into;
- :mod:`compassmem.evaluation.baselines` holds the BM25, dense, RRF and 3-turn-window baselines.
"""

from compassmem.evaluation.harness import MethodResult, Retriever, evaluate_retriever
from compassmem.evaluation.locomo_questions import Question, QuestionReport, load_locomo_questions, normalise_evidence
from compassmem.evaluation.recall import BUDGETS, CategoryRecall, RecallSummary, recall_at, summarise_recall

__all__ = [
    "BUDGETS",
    "CategoryRecall",
    "MethodResult",
    "Question",
    "QuestionReport",
    "RecallSummary",
    "Retriever",
    "evaluate_retriever",
    "load_locomo_questions",
    "normalise_evidence",
    "recall_at",
    "summarise_recall",
]
