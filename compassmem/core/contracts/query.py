"""A question and its answer: ``QueryRequest`` and ``QueryResponse`` with its evidence, as ``POST /v1/query``,
``Memory.query``, ``Client.query`` and the MCP server take and give them (and the recall benchmark reads them)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from compassmem.core.contracts.limits import (
    MAX_FILTER_KEYS,
    MAX_FILTER_VALUE_CHARS,
    MAX_QUESTION_CHARS,
    MAX_SCOPE_CONVERSATIONS,
    BudgetTurns,
    Hops,
    MetadataFilter,
    Question,
    ScopeIds,
    TimeBound,
)
from compassmem.core.contracts.search import SearchScope, TurnFilter
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
# The ``min_relevance`` of the agent-facing surfaces (MCP ``recall``, the LangChain retriever): an agent given no
# turn rather than junk. Chosen from held-out figures (docs/decisions/017-calibrated-relevance.md).
AGENT_MIN_RELEVANCE = 0.05


def check_question(value: str) -> str:
    """A question's rule beyond its length: not blank, no control characters but tab, newline and carriage return
    (``compassmem eval`` holds its question files to it too)."""
    if not value.strip():
        raise ValueError("must not be blank")
    return check_storable(value, multiline=True)


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
    explain: StrictBool = Field(
        default=False, description="Also return `explanation`: for every ranked turn the channels that found it, "
                                   "each ranking feature's value and contribution, its score and its event's path; "
                                   "for the question its subgoals, shape, time spans and what it asks for. Computed "
                                   "from what the ranking already holds (no second search); `true` or `false` only.")

    min_relevance: float = Field(
        default=0.0, ge=0.0, le=1.0, allow_inf_nan=False,
        description="Drop returned turns whose `relevance` (the calibrated probability that the turn is evidence) "
                    "is below this, 0-1; 0 (the default) keeps every ranked turn. An evidence item whose turns are "
                    "all dropped is dropped with them; `answerable` is computed before any is dropped.")
    time_from: TimeBound | None = Field(
        default=None, description="Only turns said at or after this time, or held by an event with a resolved time "
                                  "anchor (\"last week\", \"in May\": whole days, UTC) ending on or after its day: "
                                  "ISO 8601 with a UTC offset, e.g. 2024-06-01T00:00:00Z.")
    time_to: TimeBound | None = Field(
        default=None, description="Only turns said at or before this time, or held by an event with a resolved time "
                                  "anchor starting on or before it: ISO 8601 with a UTC offset; not before "
                                  "time_from.")
    metadata: MetadataFilter | None = Field(
        default=None, description=f"Only turns whose metadata has each of these top-level keys with this value (or, "
                                  f"for a list value, holding it): at most {MAX_FILTER_KEYS} keys of letters, digits, "
                                  f"'_' and '-', each value a string of at most {MAX_FILTER_VALUE_CHARS} characters "
                                  "or an integer.")

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
        return check_question(value)

    @field_validator("time_to")
    @classmethod
    def _not_before_start(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        start = info.data.get("time_from")
        if value is not None and start is not None and value < start:
            raise ValueError(f"must not be before time_from ({start.isoformat()})")
        return value

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
    def search_scope(self) -> SearchScope:
        """``scope`` narrowed by the time range and the metadata filter: what the engine's searches cover."""
        if self.time_from is None and self.time_to is None and not self.metadata:
            return self.scope
        turns = TurnFilter(time_from=self.time_from, time_to=self.time_to,
                           metadata=tuple(sorted((self.metadata or {}).items())))
        return self.scope.model_copy(update={"turns": turns})

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
    relevance: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="The calibrated probability that this turn is evidence for the question (among turns given 0.8, "
                    "about 80% are): an absolute figure to threshold, unlike `score`, which only orders.")


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
    relevance: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="The calibrated probability that this turn is evidence for the question (among turns given 0.8, "
                    "about 80% are): an absolute figure to threshold, unlike `score`, which only orders.")


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
    score: float = Field(description=(
        "The score of the item's place in the ranking: the final score of its best turn (that turn's `score` in "
        "`explanation`), or, where the ranking put that turn above better-scored ones, the best score placed after "
        "it. Items come in the order of their best turns in `turn_ids`, so scores never rise down the list."))
    relevance: float | None = Field(default=None, ge=0.0, le=1.0,
                                    description="The highest `relevance` of its turns.")
    subgoal: str
    turns: list[TurnOut]
    path: list[PathStep] = Field(description="Relations walked from a seed event to this one (empty for seeds).")
    time_anchors: list[TimeAnchor]
    cluster_id: str | None = None


Channel = Literal["dense", "passage", "keyword", "time", "category", "wish", "window", "walk"]
QuestionShape = Literal["when", "names-a-date", "how-long", "which-year", "list", "two-event", "other"]


class ChannelHit(BaseModel):
    """One channel that found or ranked a turn, with its place and score there."""

    channel: Channel = Field(description=(
        "Which list. Store searches over the whole scope (stage `search`; a turn they return is a candidate): "
        "`dense` (nearest turns by meaning, per subgoal), `passage` (nearest passage of a long turn, per subgoal), "
        "`keyword` (sparse keyword search of a subgoal's content words), `time` (turns said at or naming the time "
        "the question names), `category` (turns labelled with the category an aggregating question asks for), "
        "`wish` (turns stating a standing instruction or preference). Lists among the candidates (stage `ranking`): "
        "`window` (BM25 over 3-turn session windows, fused into the turn's score), `walk` (the graph walk reached "
        "the turn's event through relations)."))
    stage: Literal["search", "ranking"] = Field(description=(
        "`search`: a store search returned the turn itself, which made it a candidate; `ranking`: a list over the "
        "candidates that raised its score."))
    rank: int = Field(ge=1, description=(
        "1-based place in that list (the best over the subgoals searched); for `walk`, the place of the turn's event "
        "among the events the walk reached, by walk score."))
    score: float = Field(description=(
        "The channel's own score: cosine similarity (dense, passage, time, wish), the store's keyword score "
        "(keyword), the label score (category), the best window's BM25 (window), the walk's score of the event "
        "(walk)."))
    subgoal: str | None = Field(default=None, description=(
        "The subgoal whose search or list gave that place; null for the searches made once per question (time, "
        "category, wish)."))


class TurnExplanation(BaseModel):
    """Why one ranked turn is where it is."""

    conversation_id: str
    turn_id: str
    rank: int = Field(ge=1, description="1-based place in `turn_ids`.")
    score: float = Field(description=(
        "The ranking model's final score of the turn: the sum of `contributions` (within floating-point rounding)."))
    score_rank: int = Field(ge=1, description=(
        "1-based place among all candidates by `score` alone. It differs from `rank` where the final order moved "
        "the turn: an aggregating question's diversity (a repeat of a turn already taken is lowered), a named "
        "participant's hedge (the other participant's best turn keeps a top place) or the places kept for each of "
        "two related events."))
    candidates: int = Field(ge=1, description="How many candidate turns were ranked.")
    channels: list[ChannelHit] = Field(description="Every channel that found or ranked the turn, searches first.")
    found_with_event: bool = Field(description=(
        "True when no store search returned the turn itself: it was a candidate because its event was (another of "
        "its turns was found, or the event was one relation away from a candidate)."))
    features: dict[str, float] = Field(description=(
        "The ranking features of the turn with a value other than 0 (compassmem/retrieval/ranking_model.py "
        "describes each: fused, context, event, walk, dense, *_rank, asks, wish, temporal_time, dated, speaker, "
        "length, user_side, early, rerank (the relevance reranker's verdict, where one runs), and NAME*long, the "
        "feature times the conversation's shape); a feature left out "
        "is 0."))
    contributions: dict[str, float] = Field(description=(
        "weight x value of every feature that adds something to `score`, largest magnitude first; they sum to "
        "`score`."))
    subgoal: str = Field(description="The subgoal that gave the turn its best fused score.")
    relevance_inputs: dict[str, float] = Field(default_factory=dict, description=(
        "What the turn's `relevance` was computed from (compassmem/retrieval/relevance.py describes each): cosine, "
        "overlap, coverage, place, margin."))
    event_id: str = Field(description="The event holding the turn (its evidence item).")
    event_score: float = Field(description=(
        "The event's own score: how well its search and the graph walk matched the question, before the turns are "
        "ranked (its evidence item's `score` is the ranking's)."))
    path: list[PathStep] = Field(description=(
        "Relations walked from a seed event to the turn's event (empty when search found the event directly); the "
        "same path as its evidence item's."))


class SubgoalExplanation(BaseModel):
    text: str = Field(description="The text searched.")
    keywords: list[str] = Field(description="Its keyword stems.")
    best_similarity: float = Field(description=(
        "Cosine similarity of its nearest candidate event; below the engine's threshold (0.45 by default) the "
        "subgoal was rewritten to its content words and searched again."))


class AskedCategory(BaseModel):
    synset: int = Field(description="WordNet synset offset of a sense of the category noun.")
    name: str = Field(description="The synset's first lemma, e.g. 'activity'.")


class DateSpan(BaseModel):
    start: date
    end: date = Field(description="Inclusive.")


class QuestionExplanation(BaseModel):
    """What the question was taken to ask (the engine's question analysis)."""

    subgoals: list[SubgoalExplanation] = Field(description=(
        "The subgoals searched, in order: the whole question first, then the two events it relates, its clauses, "
        "each also without the times it names, and an LLM's when one is configured."))
    shape: QuestionShape = Field(description=(
        "The question's shape, as the recall benchmark groups questions: two-event, how-long, which-year, "
        "names-a-date, when, list (gathers instances) or other."))
    temporal: bool = Field(description="Asks when or how long: turns carrying a time expression are lifted.")
    causal: bool = Field(description="Asks why or what caused.")
    aggregate: bool = Field(description=(
        "Gathers several instances (\"What books has ...\", \"How many ...\"): the order favours distinct turns "
        "and sessions, and an asked category is searched by label."))
    categories: list[AskedCategory] = Field(description=(
        "The senses of the category the question asks for (\"What activities ...\"), most frequent first; empty "
        "when it names none."))
    asked_speakers: list[str] = Field(description=(
        "The participants the question names (or means by \"I\" and \"you\" in a user-assistant chat), whose "
        "turns are lifted."))
    entities: list[str] = Field(description="Names the question mentions.")
    events: list[str] = Field(description="The two events a question relates in time, each also a subgoal; else empty.")
    time_spans: list[DateSpan] = Field(description=(
        "The days and periods the question names, resolved against `time_reference`; turns said then or naming a "
        "day in them get the `dated` feature."))
    time_reference: datetime | None = Field(description=(
        "The latest candidate turn's time, against which relative times (\"last month\") are resolved."))


class QueryExplanation(BaseModel):
    """Why the answer holds these turns in this order (``explain: true``)."""

    question: QuestionExplanation
    model: str = Field(description="Where the ranking model's weights came from.")
    weights: dict[str, float] = Field(description="The ranking model's weight of each feature it weighs (not 0).")
    conversation_shape: float = Field(description=(
        "0 for candidates as short as chat lines, 1 for written answers: the factor of every NAME*long feature."))
    turns: list[TurnExplanation] = Field(description="One per ranked turn, in the order of `turn_ids`.")
    answerable_inputs: dict[str, float] = Field(default_factory=dict, description=(
        "What `answerable_probability` was computed from (compassmem/retrieval/relevance.py): best_logit, top3, "
        "coverage, top_cosine."))


class QueryResponse(BaseModel):
    turn_ids: list[str] = Field(description="Ranked source turn ids, at most budget_turns (with several "
                                            "conversations in scope, read them with turn_refs).")
    turn_refs: list[TurnRef] = Field(default_factory=list,
                                     description="The same ranking, each turn with its conversation.")
    evidence: list[EvidenceItem]
    subgoals: list[str]
    answer: str | None = None
    answerable: bool = Field(default=False, description=(
        "Whether the memory likely holds evidence for the question: `answerable_probability` is at least 0.5. "
        "False for a question about something never said; the turns are still returned (ranked, with low "
        "`relevance`) unless `min_relevance` drops them."))
    answerable_probability: float = Field(default=0.0, ge=0.0, le=1.0, description=(
        "The calibrated probability that the memory holds evidence for the question, to threshold at your own "
        "cost of a wrong answer against none."))
    timings_ms: dict[str, float]
    # Absent from the JSON unless asked for: a response without it is byte for byte what it was before the field.
    explanation: QueryExplanation | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="Present only when the request set `explain: true` (see QueryExplanation).")
    reranked: int | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="How many turns the relevance reranker read (COMPASSMEM_RERANKER); absent when no reranker "
                    "ran. 0: its time (runtime setting ranking.rerank_budget_ms, at most what the query deadline "
                    "leaves) ran out first, and the ranking is the one without it.")

    def ranked_turns(self) -> list[tuple[TurnOut, EvidenceItem]]:
        """The ranked source turns, best first, each with the evidence event that holds it."""
        by_key = {(item.conversation_id, turn.turn_id): (turn, item) for item in self.evidence for turn in item.turns}
        return [by_key[(ref.conversation_id, ref.turn_id)] for ref in self.turn_refs]
