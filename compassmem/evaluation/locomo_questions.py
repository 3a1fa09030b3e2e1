"""LoCoMo questions with their gold evidence turns, normalised.

This is the only module that reads LoCoMo's ``qa`` field. It exists to *judge* retrieval; nothing that
builds memory may import it.

Evidence defects of the LoCoMo annotations and what we do with them:

- several ids in one entry (``"D8:6; D9:17"``, ``"D9:1 D4:4"``): split on ``;``, ``,`` and whitespace;
- a well-formed id that is not spelled like the turn (``"D30:05"``): rewritten to ``"D30:5"`` *only if*
  that turn exists in the conversation, otherwise dropped;
- malformed ids (``"D:11:26"``, ``"D"``): dropped (we do not guess what was meant);
- ids of turns the conversation does not have (``"D10:19"`` when session 10 has 18 turns): dropped;
- repeated ids within one question: kept once.

A question left with no evidence is skipped and counted per category.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, Field

from compassmem.core.models import DEFAULT_TENANT, partition_key
from compassmem.write.importers import ImportFormatError, read_locomo_turns

log = structlog.get_logger(__name__)

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SEPARATORS = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")


def conversation_key(tenant: str, conversation_id: str) -> str:
    """How the evaluation names a conversation to a retriever: its id in the default tenant (LoCoMo's, so the
    benchmarks' keys are the sample ids), ``tenant/conversation_id`` in any other (ids and tenants hold no '/')."""
    return conversation_id if tenant == DEFAULT_TENANT else partition_key(tenant, conversation_id)


def split_conversation_key(key: str) -> tuple[str, str]:
    """``(tenant, conversation_id)`` of a :func:`conversation_key`."""
    tenant, _, conversation_id = key.rpartition("/")
    return (tenant or DEFAULT_TENANT), conversation_id


class Question(BaseModel):
    """One labelled question with normalised gold evidence (distinct turn ids of its own conversation).

    LoCoMo's category is a number 1-5 (:data:`CATEGORY_NAMES`); a team's own questions may label theirs with any
    number or word (``compassmem eval``)."""

    conversation_id: str
    question: str
    category: int | str
    tenant: str = DEFAULT_TENANT
    evidence: list[str] = Field(min_length=1)
    answer: str | None = None
    adversarial_answer: str | None = None
    ability: str | None = Field(None, description="the benchmark's own name for what the question tests, where it "
                                                  "has one (BEAM's abilities); LoCoMo gives only the category")

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.tenant, self.conversation_id)


class QuestionReport(BaseModel):
    """What evidence normalisation did to a file."""

    questions_read: int = 0
    questions_kept: int = 0
    entries_split: int = Field(0, description="evidence entries that held several ids")
    ids_fixed: int = Field(0, description="ids rewritten to an existing turn id, e.g. D30:05 -> D30:5")
    ids_dropped_malformed: int = Field(0, description="ids that do not parse as D<session>:<turn>")
    ids_dropped_missing: int = Field(0, description="well-formed ids of turns the conversation lacks")
    ids_duplicate: int = Field(0, description="repeated ids within one question, kept once")
    skipped_without_evidence: dict[int, int] = Field(default_factory=dict, description="per category")
    kept_per_category: dict[int, int] = Field(default_factory=dict)
    examples: dict[str, list[str]] = Field(
        default_factory=dict, description="a few raw entries per kind of change, for the log"
    )

    @property
    def skipped(self) -> int:
        return sum(self.skipped_without_evidence.values())

    @property
    def ids_dropped(self) -> int:
        return self.ids_dropped_malformed + self.ids_dropped_missing


def _note(report: QuestionReport, kind: str, raw: str, limit: int = 5) -> None:
    samples = report.examples.setdefault(kind, [])
    if len(samples) < limit and raw not in samples:
        samples.append(raw)


def normalise_evidence(
    entries: Iterable[Any], turn_ids: set[str], report: QuestionReport | None = None
) -> list[str]:
    """Distinct, existing turn ids from raw evidence entries, in their first-seen order.

    ``report`` (if given) is updated with what was split, fixed and dropped.
    """
    report = report if report is not None else QuestionReport()
    result: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        raw = str(entry)
        pieces = [p for p in _SEPARATORS.split(raw.strip()) if p]
        if len(pieces) > 1:
            report.entries_split += 1
            _note(report, "split", raw)
        for piece in pieces:
            turn_id = _resolve(piece, turn_ids, report)
            if turn_id is None:
                continue
            if turn_id in seen:
                report.ids_duplicate += 1
                continue
            seen.add(turn_id)
            result.append(turn_id)
    return result


def _resolve(piece: str, turn_ids: set[str], report: QuestionReport) -> str | None:
    if piece in turn_ids:
        return piece
    match = _DIA_ID.match(piece)
    if match is None:
        report.ids_dropped_malformed += 1
        _note(report, "malformed", piece)
        return None
    canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
    if canonical != piece and canonical in turn_ids:
        report.ids_fixed += 1
        _note(report, "fixed", f"{piece} -> {canonical}")
        return canonical
    report.ids_dropped_missing += 1
    _note(report, "missing", piece)
    return None


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def questions_from_samples(
    samples: list[dict[str, Any]], turn_ids: Mapping[str, set[str]]
) -> tuple[list[Question], QuestionReport]:
    """Questions of already-parsed LoCoMo samples; ``turn_ids`` maps conversation id -> its turn ids."""
    report = QuestionReport()
    questions: list[Question] = []
    skipped: Counter[int] = Counter()
    kept: Counter[int] = Counter()
    for sample in samples:
        conversation_id = str(sample.get("sample_id"))
        known = turn_ids.get(conversation_id, set())
        for item in sample.get("qa") or []:
            report.questions_read += 1
            category = int(item["category"])
            evidence = normalise_evidence(item.get("evidence") or [], known, report)
            if not evidence:
                skipped[category] += 1
                continue
            kept[category] += 1
            questions.append(
                Question(
                    conversation_id=conversation_id,
                    question=str(item["question"]),
                    category=category,
                    evidence=evidence,
                    answer=_text_or_none(item.get("answer")),
                    adversarial_answer=_text_or_none(item.get("adversarial_answer")),
                    ability=_text_or_none(item.get("ability")),
                )
            )
    report.questions_kept = len(questions)
    report.skipped_without_evidence = dict(sorted(skipped.items()))
    report.kept_per_category = dict(sorted(kept.items()))
    return questions, report


def load_locomo_questions(path: Path) -> tuple[list[Question], QuestionReport]:
    """Questions of a LoCoMo file with normalised evidence, and a report of the normalisation.

    Turn ids come from :func:`compassmem.write.importers.read_locomo_turns`, so "a turn exists" means exactly
    "memory can hold it".
    """
    turn_ids: dict[str, set[str]] = {}
    for turn in read_locomo_turns(path):
        turn_ids.setdefault(turn.conversation_id, set()).add(turn.turn_id)
    samples = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    if not isinstance(samples, list):
        raise ImportFormatError(f"{path}: expected a list of LoCoMo samples")
    questions, report = questions_from_samples(samples, turn_ids)
    log.info(
        "locomo_questions_loaded",
        path=str(path),
        read=report.questions_read,
        kept=report.questions_kept,
        split=report.entries_split,
        fixed=report.ids_fixed,
        dropped_malformed=report.ids_dropped_malformed,
        dropped_missing=report.ids_dropped_missing,
        skipped=report.skipped_without_evidence,
    )
    return questions, report
