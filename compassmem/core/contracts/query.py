"""A question and its answer: ``QueryRequest`` and ``QueryResponse`` with its evidence, as ``POST /v1/query``,
``Memory.query``, ``Client.query`` and the MCP server take and give them (and the recall benchmark reads them)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from compassmem.core.contracts.limits import (
    MAX_QUESTION_CHARS,
    MAX_SCOPE_CONVERSATIONS,
    BudgetTurns,
    Hops,
    Question,
    ScopeIds,
)
from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import (
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

_ID_SCHEMA = {"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS}


class QueryRequest(BaseModel):
    """A question and where to look: exactly one of ``conversation_id``, ``conversation_ids``, ``subject_id`` or
    ``all_conversations``, always within one tenant."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str | None = Field(
        default=None, json_schema_extra=_ID_SCHEMA,
        description=f"Search one conversation. {ID_RULE[0].upper()}{ID_RULE[1:]}.")
    conversation_ids: ScopeIds | None = Field(
        default=None, json_schema_extra={"items": _ID_SCHEMA},
        description=f"Search these conversations together (1-{MAX_SCOPE_CONVERSATIONS} ids); results rank across them.")
    subject_id: str | None = Field(
        default=None, json_schema_extra=_ID_SCHEMA,
        description="Search every conversation about this subject (the customer, user or account turns name in "
                    "their subject_id).")
    all_conversations: bool = Field(default=False, description="Search every conversation of the tenant.")
    question: Question = Field(json_schema_extra={"pattern": TEXT_PATTERN},
                               description=f"1-{MAX_QUESTION_CHARS} characters, not blank, no control characters "
                                           "except tab, newline and carriage return.")
    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN, description="The tenant that owns the data.")
    budget_turns: BudgetTurns = Field(default=20, description="How many ranked source turns to return.")
    max_hops: Hops = Field(default=5, description="Graph walk depth from the seed events.")

    @field_validator("conversation_id", "subject_id")
    @classmethod
    def _one_id(cls, value: str | None) -> str | None:
        return value if value is None else check_id(value)

    @field_validator("conversation_ids")
    @classmethod
    def _ids(cls, value: list[str] | None) -> list[str] | None:
        return value if value is None else [check_id(v) for v in value]

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return check_storable(value, multiline=True)

    @model_validator(mode="after")
    def _one_scope(self) -> QueryRequest:
        given = [name for name, value in (("conversation_id", self.conversation_id),
                                          ("conversation_ids", self.conversation_ids),
                                          ("subject_id", self.subject_id),
                                          ("all_conversations", self.all_conversations or None)) if value is not None]
        if len(given) != 1:
            raise ValueError("give exactly one scope: conversation_id, conversation_ids, subject_id or "
                             f"all_conversations=true (got {', '.join(given) if given else 'none'})")
        return self

    @property
    def scope(self) -> SearchScope:
        if self.conversation_id is not None:
            return SearchScope.conversation(self.tenant, self.conversation_id)
        if self.conversation_ids is not None:
            return SearchScope(tenant=self.tenant, conversation_ids=tuple(self.conversation_ids))
        return SearchScope(tenant=self.tenant, subject_id=self.subject_id)

    @property
    def scope_label(self) -> str:
        """The scope in words, for messages and logs."""
        if self.conversation_id is not None:
            return f"conversation {self.conversation_id!r}"
        if self.conversation_ids is not None:
            return f"conversations {', '.join(repr(c) for c in self.conversation_ids)}"
        if self.subject_id is not None:
            return f"subject {self.subject_id!r}"
        return "any conversation"


class TurnRef(BaseModel):
    conversation_id: str
    turn_id: str


class TurnOut(BaseModel):
    conversation_id: str
    turn_id: str
    speaker: str
    text: str = Field(description="What the turn said; for a long turn (a written answer), only its passage that "
                                  "answers, which lies at `span` in the whole text.")
    timestamp: datetime
    span: tuple[int, int] | None = Field(
        default=None, description="[start, end) character offsets of `text` in the turn's whole text, when only a "
                                  "passage of a long turn is shown; null when `text` is the whole turn.")


class PathStep(BaseModel):
    type: str
    subtype: str | None = None
    source: str
    target: str
    confidence: float
    adjacency: bool = Field(default=False, description="True for edges that only link consecutive events.")


class EvidenceItem(BaseModel):
    conversation_id: str
    event_id: str
    score: float
    subgoal: str
    turns: list[TurnOut]
    path: list[PathStep] = Field(description="Relations walked from a seed event to this one (empty for seeds).")
    time_anchors: list[TimeAnchor]
    cluster_id: str | None = None


class QueryResponse(BaseModel):
    turn_ids: list[str] = Field(description="Ranked source turn ids, at most budget_turns (with several "
                                            "conversations in scope, read them with turn_refs).")
    turn_refs: list[TurnRef] = Field(default_factory=list,
                                     description="The same ranking, each turn with its conversation.")
    evidence: list[EvidenceItem]
    subgoals: list[str]
    answer: str | None = None
    timings_ms: dict[str, float]

    def ranked_turns(self) -> list[tuple[TurnOut, EvidenceItem]]:
        """The ranked source turns, best first, each with the evidence event that holds it."""
        by_key = {(item.conversation_id, turn.turn_id): (turn, item) for item in self.evidence for turn in item.turns}
        return [by_key[(ref.conversation_id, ref.turn_id)] for ref in self.turn_refs]
