"""A team's own labelled questions, for ``compassmem eval``: a LoCoMo file, or one JSON object per line.

JSONL, one question per line (blank lines skipped)::

    {"question": "Why was the launch moved?", "conversation_id": "priya-tom", "evidence": ["S2:2", "S3:1"],
     "category": "why", "tenant": "default"}

``evidence`` is the turn ids that answer the question (at least one, of that conversation); ``category`` (a word
or a number) and ``tenant`` (the default tenant, or ``--tenant``) are optional. A line that breaks a rule is
refused with its number and field, as the import files are, and so is evidence that names a turn the memory does
not hold (:func:`check_evidence`): recall against a turn that cannot be found would be capped without a word. Lines
are read as ``compassmem import`` reads its files (UTF-8, at most 16 Mi characters, JSON nested no deeper than the
parser's stack).
A LoCoMo file's questions are read as the benchmarks read them (``locomo_questions.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from compassmem.core.contracts.limits import Question as QuestionText
from compassmem.core.contracts.query import check_question
from compassmem.core.models import DEFAULT_TENANT, TENANT_PATTERN, check_id
from compassmem.evaluation.baselines import TurnCorpus, locomo_session_dates
from compassmem.evaluation.locomo_questions import CATEGORY_NAMES, Question, QuestionReport, load_locomo_questions
from compassmem.evaluation.recall import TOGETHER
from compassmem.write.importers import ImportFormatError, numbered_jsonl_records

JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})
# A question without a category is counted in this group of the category table.
UNLABELLED = "(none)"
_Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
_Id = Annotated[str, AfterValidator(check_id)]


class QuestionFileError(ImportFormatError):
    """A question file that cannot be used; the message names the file, the line and the field."""


class Layout(StrEnum):
    LOCOMO = "locomo"
    JSONL = "jsonl"


class LabelledQuestion(BaseModel):
    """One line of a JSONL question file: the question, conversation and tenant by the rules ``POST /v1/query``
    holds them to, the evidence by the turn id rule."""

    model_config = ConfigDict(extra="forbid")

    question: Annotated[QuestionText, AfterValidator(check_question)]
    conversation_id: _Id
    evidence: list[_Id] = Field(min_length=1, description="the turn ids that answer the question")
    category: int | _Label | None = None
    tenant: Annotated[str, StringConstraints(pattern=TENANT_PATTERN)] | None = None


@dataclass
class QuestionSet:
    """The questions of a file, where each came from (a JSONL line number, else None) and how it was read."""

    path: Path
    layout: Layout
    questions: list[Question]
    places: list[str]
    report: QuestionReport | None = None
    session_dates: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def conversations(self) -> int:
        return len({(q.tenant, q.conversation_id) for q in self.questions})


def load_questions(path: Path, tenant: str | None = None) -> QuestionSet:
    """The questions of a JSONL (``.jsonl``/``.ndjson``) or LoCoMo file; ``tenant``: the tenant of the questions
    that name none (the default tenant when None). QuestionFileError when the file cannot be used."""
    if not path.is_file():
        raise QuestionFileError(f"{path}: no such file")
    if path.suffix.lower() in JSONL_SUFFIXES:
        questions, places = _jsonl_questions(path, tenant)
        return QuestionSet(path, Layout.JSONL, questions, places)
    try:
        questions, report = load_locomo_questions(path)
        dates = locomo_session_dates(path)
    except ImportFormatError as error:
        raise QuestionFileError(f"{error} (a question file is LoCoMo JSON, or JSONL named .jsonl)") from error
    except (KeyError, TypeError, ValueError) as error:
        raise QuestionFileError(f"{path}: not a LoCoMo file ({type(error).__name__}: {error}); a question file is "
                                "LoCoMo JSON, or JSONL named .jsonl") from error
    if not questions:
        raise QuestionFileError(f"{path}: holds no question with evidence (LoCoMo's 'qa' of each sample)")
    if tenant is not None:
        questions = [q.model_copy(update={"tenant": tenant}) for q in questions]
    places = [f"question {index} ({q.conversation_id})" for index, q in enumerate(questions, start=1)]
    return QuestionSet(path, Layout.LOCOMO, questions, places, report, dates)


def _jsonl_questions(path: Path, tenant: str | None) -> tuple[list[Question], list[str]]:
    questions: list[Question] = []
    places: list[str] = []
    try:
        for number, labelled in numbered_jsonl_records(path, LabelledQuestion):
            questions.append(Question(
                conversation_id=labelled.conversation_id, question=labelled.question,
                category=UNLABELLED if labelled.category is None else labelled.category,
                evidence=list(dict.fromkeys(labelled.evidence)), tenant=labelled.tenant or tenant or DEFAULT_TENANT))
            places.append(f"line {number}")
    except ImportFormatError as error:
        raise QuestionFileError(str(error)) from error
    if not questions:
        raise QuestionFileError(f"{path}: holds no question")
    return questions, places


def check_evidence(questions: QuestionSet, corpus: TurnCorpus) -> None:
    """QuestionFileError naming the first question whose evidence names a turn the memory does not hold."""
    for question, place in zip(questions.questions, questions.places, strict=True):
        held = {turn.turn_id for turn in corpus.turns(question.conversation_key)}
        missing = [turn_id for turn_id in question.evidence if turn_id not in held]
        if missing:
            raise QuestionFileError(
                f"{questions.path}: {place}: field 'evidence': turn {missing[0]!r} is not a turn of conversation "
                f"{question.conversation_id!r} (tenant {question.tenant!r}) in memory")


def category_names(questions: Sequence[Question], layout: Layout) -> dict[str, str]:
    """How the tables name each category group: LoCoMo's numbers with their names, a team's labels as given."""
    if layout is Layout.LOCOMO:
        return {**{str(number): f"{number} {name}" for number, name in CATEGORY_NAMES.items()},
                TOGETHER: "1-4 together"}
    return {str(q.category): str(q.category) for q in questions}
