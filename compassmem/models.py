"""Pydantic records shared by every part of compassmem.

One message schema serves Kafka, the JSONL import format and ``POST /v1/turns`` (DESIGN.md section 3),
so validation lives here and every boundary reuses it.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DEFAULT_TENANT = "default"
MAX_TEXT_BYTES = 16 * 1024
MAX_SPEAKER_CHARS = 100
MAX_ID_CHARS = 128


def check_id(value: str) -> str:
    """Conversation and turn ids: 1-128 printable characters without '/' (the key separator)."""
    if not 1 <= len(value) <= MAX_ID_CHARS:
        raise ValueError(f"must be 1-{MAX_ID_CHARS} characters, got {len(value)}")
    if "/" in value:
        raise ValueError("must not contain '/' (it separates tenant and conversation in keys)")
    if not value.isprintable():
        raise ValueError("must contain only printable characters")
    return value


def stable_uuid(*parts: str) -> str:
    """A deterministic UUID from its parts, so replays upsert instead of duplicating.

    UUID-shaped because Qdrant point ids must be UUIDs or unsigned integers.
    """
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return str(uuid.UUID(digest[:32]))


def partition_key(tenant: str, conversation_id: str) -> str:
    return f"{tenant}/{conversation_id}"


class Attachment(BaseModel):
    """Something shared with a turn, e.g. an image; only its caption is memory."""

    model_config = ConfigDict(extra="forbid")

    kind: str = "image"
    caption: str
    url: str | None = None


class Turn(BaseModel):
    """One utterance of a conversation: the unit that arrives on the turns topic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN)
    conversation_id: str
    turn_id: str
    speaker: str = Field(min_length=1, max_length=MAX_SPEAKER_CHARS)
    text: str
    timestamp: datetime
    session_id: str | None = None
    attachments: list[Attachment] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("conversation_id", "turn_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return check_id(value)

    @field_validator("speaker")
    @classmethod
    def _speaker(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty after stripping whitespace")
        size = len(value.encode("utf-8"))
        if size > MAX_TEXT_BYTES:
            # Rejected rather than truncated: a silently cut turn would be evidence we cannot trust.
            raise ValueError(f"is {size} bytes; the limit is {MAX_TEXT_BYTES} bytes (16 KiB)")
        return value

    @field_validator("timestamp")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("must carry a UTC offset (ISO 8601 with offset, e.g. 2023-05-08T13:56:00+00:00)")
        return value

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)

    def indexed_text(self) -> str:
        """The utterance plus what it shares: what a turn shows as evidence."""
        shared = " ".join(f"[shares {a.caption}]" for a in self.attachments if a.caption)
        return f"{self.text} {shared}".strip()

    def search_text(self) -> str:
        return search_text(self.speaker, self.indexed_text(), self.timestamp)


def search_text(speaker: str, text: str, timestamp: datetime) -> str:
    """What is embedded and keyword-indexed for a turn: when, who, what.

    Questions name people and dates ("When did Caroline ...?"), so the speaker and the day the turn was said
    belong in its search text; the stored evidence text stays the utterance itself.
    """
    return f"({timestamp.day} {timestamp:%B %Y}) {speaker}: {text}"


class Observation(BaseModel):
    """A source turn as an event keeps it: enough to show evidence without another lookup."""

    turn_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None = None


class Granularity(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    SEASON = "season"
    YEAR = "year"


class TimeAnchor(BaseModel):
    """A time expression resolved against the timestamp of the turn that said it."""

    expression: str
    start: date
    end: date
    granularity: Granularity
    turn_id: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TimeAnchor:
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


class TemporalInfo(BaseModel):
    start: datetime
    end: datetime


class Event(BaseModel):
    """An episodic event frame: a run of turns about one thing, with who, what and when."""

    tenant: str = DEFAULT_TENANT
    event_id: str
    conversation_id: str
    observations: list[Observation]
    summary: str
    participants: list[str]
    actions: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    temporal_info: TemporalInfo
    time_anchors: list[TimeAnchor] = Field(default_factory=list)
    cluster_id: str | None = None
    embedding: list[float] | None = None
    version: int = 1
    merged_from: list[str] = Field(default_factory=list)
    provisional: bool = False

    @property
    def turn_ids(self) -> list[str]:
        return [o.turn_id for o in self.observations]

    @property
    def session_ids(self) -> list[str]:
        return sorted({o.session_id for o in self.observations if o.session_id is not None})


class IndexedTurn(BaseModel):
    """A turn as the vector store keeps it: searchable on its own, and pointing at the event that holds it."""

    tenant: str = DEFAULT_TENANT
    conversation_id: str
    turn_id: str
    event_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None = None
    has_time_expression: bool = False
    embedding: list[float] | None = None


def turn_point_id(tenant: str, conversation_id: str, turn_id: str) -> str:
    return stable_uuid("turn", tenant, conversation_id, turn_id)


def event_id_for(tenant: str, conversation_id: str, first_turn_id: str) -> str:
    return stable_uuid("event", tenant, conversation_id, first_turn_id)


class RelationType(StrEnum):
    CAUSAL = "causal"
    TEMPORAL = "temporal"
    PART_OF = "part_of"
    CONDITIONAL = "conditional"
    MOTIVATIONAL = "motivational"
    SAME_PARTICIPANT = "same_participant"
    SAME_ENTITY = "same_entity"
    FOLLOW_UP = "follow_up"


class AllenRelation(StrEnum):
    """Allen's interval relations; the inverses are expressed by swapping source and target."""

    BEFORE = "before"
    MEETS = "meets"
    OVERLAPS = "overlaps"
    STARTS = "starts"
    DURING = "during"
    FINISHES = "finishes"
    EQUALS = "equals"


class Relation(BaseModel):
    tenant: str = DEFAULT_TENANT
    conversation_id: str
    relation_id: str
    source: str
    target: str
    type: RelationType
    subtype: str | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: str
    created_at: datetime
    superseded_by: str | None = None


def relation_id_for(source: str, target: str, type_: RelationType, subtype: str | None) -> str:
    return stable_uuid("relation", source, target, type_.value, subtype or "")


class Cluster(BaseModel):
    """A topic (super-event): events of one conversation close in meaning."""

    tenant: str = DEFAULT_TENANT
    conversation_id: str
    cluster_id: str
    members: list[str]
    centroid: list[float]
    label: list[str] = Field(default_factory=list)
