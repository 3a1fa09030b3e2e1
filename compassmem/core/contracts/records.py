"""The records the HTTP API answers with and the library, the HTTP client and the MCP server share (the question and
its answer are in ``query.py``): errors, events, acknowledgements, deletion results, listings and graphs.

``Memory`` returns them in process, ``Client`` parses them from the API's JSON, so the two give the same objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from compassmem.core.models import Event, Observation, TemporalInfo, TimeAnchor

_LABEL_CHARS = 80


class FieldError(BaseModel):
    field: str = Field(description="Where the problem is: a body field ('question', '[2].timestamp'), "
                                   "or a query/path parameter ('tenant').")
    message: str = Field(description="The rule that was broken.")


class ValidationErrorResponse(BaseModel):
    detail: list[FieldError]


class ErrorResponse(BaseModel):
    detail: str


class TurnsAccepted(BaseModel):
    accepted: int = Field(description="Turns appended to the turns topic; they become queryable once processed.")


class EventOut(BaseModel):
    """An event as stored, without its embedding."""

    tenant: str
    event_id: str
    conversation_id: str
    subject_id: str | None = Field(default=None, description="The subject (customer, user, account) its turns name.")
    summary: str
    observations: list[Observation]
    participants: list[str]
    actions: list[str]
    entities: list[str]
    keywords: list[str]
    temporal_info: TemporalInfo
    time_anchors: list[TimeAnchor]
    cluster_id: str | None
    version: int
    merged_from: list[str]
    provisional: bool

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls.model_validate(event.model_dump(exclude={"embedding"}))


class GraphNode(BaseModel):
    id: str
    kind: Literal["event", "cluster"]
    label: str = Field(description="Short text to draw: the event summary, or the cluster's keywords.")
    stub: bool = Field(default=False, description="An endpoint of a relation whose event has not arrived yet.")
    summary: str | None = None
    participants: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    time_anchors: list[TimeAnchor] = Field(default_factory=list)
    cluster_id: str | None = None
    provisional: bool = False
    members: list[str] = Field(default_factory=list, description="Clusters only: the member event ids.")

    @classmethod
    def of(cls, node_id: str, data: dict[str, Any]) -> GraphNode:
        if data.get("kind") == "cluster":
            keywords = [str(k) for k in data.get("label") or []]
            return cls(id=node_id, kind="cluster", label=", ".join(keywords) or node_id,
                       members=list(data.get("members", [])))
        summary = data.get("summary")
        text = summary or node_id
        label = text if len(text) <= _LABEL_CHARS else f"{text[:_LABEL_CHARS]}..."
        return cls(
            id=node_id, kind="event", label=label, stub=bool(data.get("stub")),
            summary=summary, participants=data.get("participants") or [], turn_ids=data.get("turn_ids") or [],
            session_ids=data.get("session_ids") or [], start=data.get("start"), end=data.get("end"),
            time_anchors=data.get("time_anchors") or [], cluster_id=data.get("cluster_id"),
            provisional=bool(data.get("provisional")),
        )


class GraphEdge(BaseModel):
    id: str = Field(description="The relation id.")
    source: str
    target: str
    type: str
    subtype: str | None = Field(default=None, description="The Allen relation of a temporal edge.")
    confidence: float
    evidence: str
    created_at: datetime
    superseded: bool = Field(description="Replaced by a stronger contradicting relation; kept as history.")
    superseded_by: str | None = None


class GraphCounts(BaseModel):
    events: int
    stubs: int
    clusters: int
    relations: int
    superseded_relations: int


class ConversationGraph(BaseModel):
    tenant: str
    conversation_id: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    counts: GraphCounts


def markers_placed_field() -> Any:  # noqa: ANN401 - a pydantic FieldInfo
    """The field both deletion results carry: whether the forget is in the stream where later turns come after it."""
    return Field(
        default=False,
        description="Whether a worker placed the forget's markers in every turns partition before this answer: turns "
                    "sent from now on start a new memory. False without a stream, or when no worker answered within "
                    "COMPASSMEM_FORGET_WAIT_S; then turns for what it covers are refused (503) until one does.")


class DeleteResult(BaseModel):
    tenant: str
    conversation_id: str
    events_deleted: int = Field(description="Events the vector store held for the conversation (0: nothing there).")
    forget_published: bool = Field(description="Whether a forget command went to the control topic, so that a "
                                               "replay of the turns topic does not bring the conversation back.")
    markers_placed: bool = markers_placed_field()


class RedactResult(BaseModel):
    tenant: str
    conversation_id: str
    turn_id: str
    event_id: str = Field(description="The event that held the turn.")
    event_deleted: bool = Field(description="The turn was the event's last: the event and its relations are gone; "
                                            "otherwise the event was rebuilt from its other turns and re-embedded.")
    redaction_published: bool = Field(description="Whether a redaction command went to the control topic, so that "
                                                  "a replay of the turns topic does not bring the turn back.")


class TenantDeleteResult(BaseModel):
    tenant: str
    events_deleted: int = Field(description="Events the vector store held for the tenant (0: nothing there).")
    forget_published: bool = Field(description="Whether a forget command for the whole tenant went to the control "
                                               "topic, so that a replay of the turns topic does not restore it.")
    markers_placed: bool = markers_placed_field()


# -- Listings and a limited graph (compassmem/retrieval/listing.py makes them) ------------------------------------


class ConversationSummary(BaseModel):
    conversation_id: str
    events: int = Field(description="Events, provisional ones (an open segment being streamed) included.")
    provisional_events: int
    turns: int = Field(description="Turns in those events.")
    first_at: datetime | None = Field(description="Timestamp of its earliest turn.")
    last_at: datetime | None = Field(description="Timestamp of its latest turn (when it was last updated, in the "
                                                 "conversation's own time).")
    subject_ids: list[str]
    participants: list[str]


class ConversationPage(BaseModel):
    tenant: str
    conversations: list[ConversationSummary]
    total: int = Field(description="Conversations of the tenant that match the search, over all pages.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class EventPage(BaseModel):
    tenant: str
    conversation_id: str
    events: list[GraphNode] = Field(description="Events in time order (start, then id), provisional ones included.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class GraphLimits(BaseModel):
    max_nodes: int | None = Field(description="The limit asked for: at most this many events, the most recent.")
    since: datetime | None = Field(description="The limit asked for: only events that end at or after it.")
    events_total: int = Field(description="Events the conversation holds, provisional ones included.")
    events_omitted: int = Field(description="Events left out by the limits.")


class LimitedConversationGraph(ConversationGraph):
    """A conversation's graph within the limits asked for; ``counts`` describe what is returned."""

    limits: GraphLimits


class TopicSummary(BaseModel):
    id: str | None = Field(description="The topic (cluster) id; null for the events without a topic yet (the most "
                                       "recent ones, before the next reclustering, and an open segment).")
    label: str = Field(description="Its keywords, joined: what to draw.")
    keywords: list[str]
    events: int
    turns: int
    first_at: datetime | None
    last_at: datetime | None


class TopicLink(BaseModel):
    """Active relations of one type between the events of two topics (an event's part-of relation to a topic
    counts for that topic); source or target null: the events without a topic."""

    source: str | None
    target: str | None
    type: str
    relations: int
    max_confidence: float
    mean_confidence: float


class RelationTypeSummary(BaseModel):
    type: str
    relations: int = Field(description="Active relations of this type.")
    passing: int = Field(description="Of those, the ones the filters keep (type chosen, confidence at least "
                                     "min_confidence).")


class OverviewFilters(BaseModel):
    types: list[str] = Field(description="The relation types asked for (all when none was named).")
    min_confidence: float
    links: int = Field(description="At most this many links between different topics, the strongest first.")


class OverviewCounts(BaseModel):
    events: int = Field(description="Events, provisional ones included.")
    turns: int
    topics: int
    unclustered_events: int = Field(description="Events without a topic yet, provisional ones included.")
    relations: int = Field(description="Active relations.")
    superseded_relations: int
    passing_relations: int = Field(description="Active relations the filters keep.")
    links_total: int = Field(description="Links between different topics the filters keep, before the limit.")


class ConversationOverview(BaseModel):
    """What the explorer opens a conversation on: its topics with their counts and the strongest links between
    them, never its thousands of relations."""

    tenant: str
    conversation_id: str
    filters: OverviewFilters
    counts: OverviewCounts
    relation_types: list[RelationTypeSummary]
    topics: list[TopicSummary] = Field(description="In the order of their first event; the events without a topic "
                                                   "(id null) last.")
    links: list[TopicLink] = Field(description="Between different topics, the strongest first (highest confidence, "
                                               "then most relations).")
    within: list[TopicLink] = Field(description="Relations the filters keep inside each topic, per type.")
