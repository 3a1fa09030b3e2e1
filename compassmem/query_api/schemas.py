"""Request and response records of the query API (also what the recall benchmark reads)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from compassmem.models import (
    DEFAULT_TENANT,
    ID_PATTERN,
    ID_RULE,
    MAX_ID_CHARS,
    TENANT_PATTERN,
    TEXT_PATTERN,
    TimeAnchor,
    check_id,
    check_storable,
)

# A question is one short sentence or a few; longer ones only cost more (every clause can become a subgoal).
MAX_QUESTION_CHARS = 1000


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(description=f"The conversation to search; queries never cross conversations. "
                                             f"{ID_RULE[0].upper()}{ID_RULE[1:]}.",
                                 json_schema_extra={"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS})
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, json_schema_extra={"pattern": TEXT_PATTERN},
                          description=f"1-{MAX_QUESTION_CHARS} characters, not blank, no control characters except "
                                      "tab, newline and carriage return.")
    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN, description="The tenant that owns the data.")
    budget_turns: int = Field(default=20, ge=1, le=200, description="How many ranked source turns to return.")
    max_hops: int = Field(default=5, ge=0, le=10, description="Graph walk depth from the seed events.")

    @field_validator("conversation_id")
    @classmethod
    def _conversation(cls, value: str) -> str:
        return check_id(value)

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return check_storable(value, multiline=True)


class TurnOut(BaseModel):
    turn_id: str
    speaker: str
    text: str
    timestamp: datetime


class PathStep(BaseModel):
    type: str
    subtype: str | None = None
    source: str
    target: str
    confidence: float
    adjacency: bool = Field(default=False, description="True for edges that only link consecutive events.")


class EvidenceItem(BaseModel):
    event_id: str
    score: float
    subgoal: str
    turns: list[TurnOut]
    path: list[PathStep] = Field(description="Relations walked from a seed event to this one (empty for seeds).")
    time_anchors: list[TimeAnchor]
    cluster_id: str | None = None


class QueryResponse(BaseModel):
    turn_ids: list[str] = Field(description="Ranked distinct source turn ids, at most budget_turns.")
    evidence: list[EvidenceItem]
    subgoals: list[str]
    answer: str | None = None
    timings_ms: dict[str, float]
