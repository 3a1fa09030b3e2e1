"""Does memory say when it knows nothing? ``compassmem eval``'s figures of the calibrated ``relevance`` and
``answerable`` (compassmem/retrieval/relevance.py) on a team's own questions:

- the expected calibration error of turn ``relevance``: over the returned turns of every answerable question, how
  far the relevance given is from the share of turns at that relevance that are evidence;
- the AUROC of ``answerable_probability`` between the answerable questions and (a) the file's unanswerable category
  (LoCoMo's category 5, questions about what was never said), (b) each answerable question asked of another
  conversation of the file (the next one of the same tenant, in file order), which holds no evidence for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from compassmem.core.contracts.query import QueryRequest
from compassmem.evaluation.calibration import Calibration, auroc, calibration
from compassmem.evaluation.locomo_questions import Question, split_conversation_key
from compassmem.evaluation.memory_recall import MemoryRetriever, MemorySource

# LoCoMo's category of questions whose answer was never said.
UNANSWERABLE_CATEGORY = 5


class Answerability(BaseModel):
    relevance: Calibration | None = Field(description="Turn relevance of the answerable questions' returned turns.")
    answerable_questions: int
    unanswerable_questions: int
    wrong_conversation_questions: int
    auroc_unanswerable: float | None = Field(description="answerable against the unanswerable category")
    auroc_wrong_conversation: float | None = Field(description="answerable against questions of another conversation")
    answerable_true: dict[str, float] = Field(description="Per kind of question, the share answered answerable=true.")


def is_answerable(question: Question, unanswerable_category: int | str | None) -> bool:
    # A JSONL file's categories are whatever it wrote (5 or "5"); the option is text.
    return unanswerable_category is None or str(question.category) != str(unanswerable_category)


def wrong_conversations(questions: Sequence[Question]) -> dict[str, str]:
    """Each conversation key -> the next conversation of the same tenant in file order (none for a tenant of one)."""
    by_tenant: dict[str, list[str]] = {}
    for question in questions:
        keys = by_tenant.setdefault(question.tenant, [])
        if question.conversation_key not in keys:
            keys.append(question.conversation_key)
    return {key: keys[(i + 1) % len(keys)] for keys in by_tenant.values() if len(keys) > 1
            for i, key in enumerate(keys)}


def measure_answerability(memory: MemorySource, retriever: MemoryRetriever, questions: Sequence[Question],
                          unanswerable_category: int | str | None) -> Answerability:
    """The figures from the answers ``retriever`` already holds, plus one query per answerable question asked of
    another conversation."""
    relevance: list[float] = []
    evidence: list[bool] = []
    answerable: list[float] = []
    unanswerable: list[float] = []
    for question in questions:
        answer = retriever.answers.get((question.conversation_key, question.question))
        if answer is None:
            continue
        if is_answerable(question, unanswerable_category):
            answerable.append(answer.answerable_probability)
            relevance += [ref.relevance or 0.0 for ref in answer.turn_refs]
            evidence += [ref.turn_id in question.evidence for ref in answer.turn_refs]
        else:
            unanswerable.append(answer.answerable_probability)
    other = wrong_conversations(questions)
    wrong: list[float] = []
    for question in questions:
        target = other.get(question.conversation_key)
        if target is None or not is_answerable(question, unanswerable_category):
            continue
        tenant, conversation = split_conversation_key(target)
        wrong.append(memory.query(QueryRequest(conversation_id=conversation, tenant=tenant, question=question.question,
                                               budget_turns=retriever.budget)).answerable_probability)
    shares = {name: round(sum(p >= 0.5 for p in values) / len(values), 4)
              for name, values in (("answerable", answerable), ("unanswerable", unanswerable),
                                   ("wrong conversation", wrong)) if values}
    return Answerability(relevance=calibration(relevance, evidence), answerable_questions=len(answerable),
                         unanswerable_questions=len(unanswerable), wrong_conversation_questions=len(wrong),
                         auroc_unanswerable=_rounded(auroc(answerable, unanswerable)),
                         auroc_wrong_conversation=_rounded(auroc(answerable, wrong)), answerable_true=shares)


def answerability_lines(figures: Answerability) -> list[str]:
    """The figures as the lines ``compassmem eval`` prints."""
    lines = ["", "says when it knows nothing:"]
    if figures.relevance is not None:
        lines.append(f"  turn relevance: expected calibration error {figures.relevance.ece:.3f} over "
                     f"{figures.relevance.count} returned turns (0 is perfectly calibrated)")
    for label, value, count in (("an unanswerable category", figures.auroc_unanswerable,
                                 figures.unanswerable_questions),
                                ("questions asked of another conversation", figures.auroc_wrong_conversation,
                                 figures.wrong_conversation_questions)):
        if value is not None:
            lines.append(f"  answerable: AUROC {value:.3f} against {label} ({count} questions; 0.5 is chance)")
    for kind, share in figures.answerable_true.items():
        lines.append(f"  answerable=true for {100 * share:.0f}% of the {kind} questions")
    return lines


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
