"""The evaluation loop that every retriever, baseline or system under test, plugs into."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import structlog
from pydantic import BaseModel, Field

from compassmem.evaluation.locomo_questions import Question
from compassmem.evaluation.recall import BUDGETS, RecallSummary, context_tokens, recall_at, summarise_recall

log = structlog.get_logger(__name__)


@runtime_checkable
class Retriever(Protocol):
    """Ranks the turns of one conversation for a question.

    ``conversation_id`` is the question's ``conversation_key``: the conversation id in the default tenant (every
    benchmark's), ``tenant/conversation_id`` in another (``locomo_questions.split_conversation_key``).
    Returns turn ids of that conversation only, best first; repeats are allowed and ignored (a system that
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
    # Mean recall per budget of the questions of each ability, for benchmarks that name one (BEAM's); with the
    # number of such questions under "questions".
    by_ability: dict[str, dict[str, float]] = Field(default_factory=dict)
    seconds: float
    # Each question's recall per budget, in the order of the questions given: for breakdowns by any grouping
    # (``recall.group_recall``). Not part of the dumped result: the summaries are.
    per_question: list[dict[int, float]] = Field(default_factory=list, exclude=True)


def evaluate_retriever(
    method: str,
    retriever: Retriever,
    questions: Sequence[Question],
    budgets: Sequence[int] = BUDGETS,
    text_of: Callable[[str, str], str] | None = None,
    overall: str | None = None,
    together: bool = True,
) -> MethodResult:
    """Recall@B of ``retriever`` over ``questions``; ``text_of(conversation_key, turn_id)`` enables token counts;
    ``overall`` and ``together`` as for :func:`summarise_recall`."""
    started = time.perf_counter()
    if isinstance(retriever, BatchPreparable):
        retriever.prepare(questions)
    outcomes: list[tuple[int, dict[int, float]]] = []
    per_ability: dict[str, list[dict[int, float]]] = {}
    tokens: dict[int, int] = {b: 0 for b in budgets}
    for question in questions:
        ranked = retriever.rank(question.conversation_key, question.question)
        outcomes.append((question.category, {b: recall_at(ranked, question.evidence, b) for b in budgets}))
        if question.ability is not None:
            per_ability.setdefault(question.ability, []).append(outcomes[-1][1])
        if text_of is not None:
            key = question.conversation_key
            for b in budgets:
                tokens[b] += context_tokens(ranked, b, lambda t: text_of(key, t))
    seconds = time.perf_counter() - started
    mean_tokens = {b: tokens[b] / len(questions) for b in budgets} if text_of is not None and questions else None
    summary = summarise_recall(outcomes, budgets, overall=overall, together=together)
    log.info("retriever_evaluated", method=method, questions=len(questions), seconds=round(seconds, 2))
    by_ability = {ability: {"questions": float(len(recalls)),
                            **{str(b): sum(r[b] for r in recalls) / len(recalls) for b in budgets}}
                  for ability, recalls in sorted(per_ability.items())}
    return MethodResult(method=method, summary=summary, mean_context_tokens=mean_tokens, by_ability=by_ability,
                        seconds=seconds, per_question=[recalls for _, recalls in outcomes])
