"""The evaluation loop that every retriever, baseline or system under test, plugs into."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import structlog
from pydantic import BaseModel

from compassmem.evaluation.locomo_questions import Question
from compassmem.evaluation.recall import BUDGETS, RecallSummary, context_tokens, recall_at, summarise_recall

log = structlog.get_logger(__name__)


@runtime_checkable
class Retriever(Protocol):
    """Ranks the turns of one conversation for a question.

    Returns turn ids of ``conversation_id`` only, best first; repeats are allowed and ignored (a system that
    returns events flattens them in rank order). Only the first B distinct ids count at budget B.
    """

    def rank(self, conversation_id: str, question: str) -> list[str]: ...


@runtime_checkable
class BatchPreparable(Protocol):
    """Optional: a retriever that can prepare all questions at once (e.g. embed them in one batch)."""

    def prepare(self, questions: Sequence[Question]) -> None: ...


class MethodResult(BaseModel):
    method: str
    summary: RecallSummary
    mean_context_tokens: dict[int, float] | None = None
    seconds: float


def evaluate_retriever(
    method: str,
    retriever: Retriever,
    questions: Sequence[Question],
    budgets: Sequence[int] = BUDGETS,
    text_of: Callable[[str, str], str] | None = None,
) -> MethodResult:
    """Recall@B of ``retriever`` over ``questions``; ``text_of(conversation_id, turn_id)`` enables token counts."""
    started = time.perf_counter()
    if isinstance(retriever, BatchPreparable):
        retriever.prepare(questions)
    outcomes: list[tuple[int, dict[int, float]]] = []
    tokens: dict[int, int] = {b: 0 for b in budgets}
    for question in questions:
        ranked = retriever.rank(question.conversation_id, question.question)
        outcomes.append((question.category, {b: recall_at(ranked, question.evidence, b) for b in budgets}))
        if text_of is not None:
            conversation_id = question.conversation_id
            for b in budgets:
                tokens[b] += context_tokens(ranked, b, lambda t: text_of(conversation_id, t))
    seconds = time.perf_counter() - started
    mean_tokens = {b: tokens[b] / len(questions) for b in budgets} if text_of is not None and questions else None
    summary = summarise_recall(outcomes, budgets)
    log.info("retriever_evaluated", method=method, questions=len(questions), seconds=round(seconds, 2))
    return MethodResult(method=method, summary=summary, mean_context_tokens=mean_tokens, seconds=seconds)
