"""The export file: JSON Lines, one record per line, told apart by ``kind``.

    header          first line: format version, tenant, the conversation when only one was exported, and the
                    embedder (``Settings.vector_space``) and dimension of the vectors, which an import must match
    event, turn     a conversation's events, each followed by its turns, with their embeddings (so an import needs no
                    embedding model run)
    cluster         its topic clusters, with members and centroid
    relation        its relations, superseded ones included (``superseded_by`` set)
    conversation    closes a conversation with the number of records of each kind written for it
    end             last line: how many conversations the file holds

Records of one conversation are contiguous and closed by their ``conversation`` line, so a reader can check and
write a conversation as a whole; the trailer counts and the ``end`` line tell a cut-off file from a complete one.
The records inside are the stores' own models (``Event``, ``IndexedTurn``, ``Relation``, ``Cluster``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from compassmem.errors import CompassmemError
from compassmem.models import TENANT_PATTERN, Cluster, Event, IndexedTurn, Relation, check_id

FORMAT = "compassmem-export"
VERSION = 1
ConversationId = Annotated[str, AfterValidator(check_id)]


class ExportFormatError(CompassmemError, ValueError):
    """A line of an export file that cannot be imported; the message names the line."""


class ImportRefused(CompassmemError):
    """The file is valid but does not fit the target: another embedder, or memory already there."""


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Header(_Line):
    kind: Literal["header"] = "header"
    format: Literal["compassmem-export"] = FORMAT
    version: Literal[1] = VERSION
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: ConversationId | None = Field(default=None,
                                                   description="Set when the file holds this conversation only.")
    vector_space: str = Field(description="The embedder that made the vectors (Settings.vector_space).")
    dim: int = Field(gt=0)
    exported_at: datetime


class EventLine(_Line):
    kind: Literal["event"] = "event"
    event: Event

    @property
    def record(self) -> Event:
        return self.event

    def vectors(self) -> dict[str, list[float] | None]:
        return {"embedding": self.event.embedding}


class TurnLine(_Line):
    kind: Literal["turn"] = "turn"
    turn: IndexedTurn

    @property
    def record(self) -> IndexedTurn:
        return self.turn

    def vectors(self) -> dict[str, list[float] | None]:
        return {"embedding": self.turn.embedding}


class ClusterLine(_Line):
    kind: Literal["cluster"] = "cluster"
    cluster: Cluster

    @property
    def record(self) -> Cluster:
        return self.cluster

    def vectors(self) -> dict[str, list[float] | None]:
        return {"centroid": self.cluster.centroid}


class RelationLine(_Line):
    kind: Literal["relation"] = "relation"
    relation: Relation

    @property
    def record(self) -> Relation:
        return self.relation

    def vectors(self) -> dict[str, list[float] | None]:
        return {}


RecordLine = EventLine | TurnLine | ClusterLine | RelationLine


class Counts(BaseModel):
    """Records of each kind: of one conversation (its trailer), or of a whole export or import."""

    turns: int = Field(default=0, ge=0)
    events: int = Field(default=0, ge=0)
    relations: int = Field(default=0, ge=0)
    clusters: int = Field(default=0, ge=0)

    def __str__(self) -> str:
        return ", ".join(f"{value} {name}" for name, value in self.model_dump().items())

    def __add__(self, other: Counts) -> Counts:
        return Counts(turns=self.turns + other.turns, events=self.events + other.events,
                      relations=self.relations + other.relations, clusters=self.clusters + other.clusters)


class ConversationEnd(_Line):
    kind: Literal["conversation"] = "conversation"
    conversation_id: ConversationId
    counts: Counts


class End(_Line):
    kind: Literal["end"] = "end"
    conversations: int = Field(ge=0)


Line = Annotated[Header | RecordLine | ConversationEnd | End,
                 Field(discriminator="kind")]
LINE = TypeAdapter(Line)


class TransferSummary(BaseModel):
    """What an export wrote or an import restored."""

    tenant: str
    conversations: int
    counts: Counts


def dump(line: _Line) -> str:
    return line.model_dump_json() + "\n"
