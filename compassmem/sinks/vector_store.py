"""The vector store interface: one API over the embedded Qdrant engine and a Qdrant server.

Events are stored as points: the dense vector is the event embedding, a sparse vector carries its keywords
(scored with Qdrant's IDF modifier, so keyword search behaves the same embedded and on a server), and the
payload is the event without its embedding. Turns are points of their own in the same collection (payload
``kind`` tells them apart), so a query can score single turns as well as whole events; they have their own
sparse vector name, so keyword IDF is computed over turns for turns and over events for events.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from pydantic import BaseModel

from compassmem.models import Event, IndexedTurn


class SparseVector(BaseModel):
    indices: list[int]
    values: list[float]


class ScoredEvent(BaseModel):
    event: Event
    score: float


class ScoredTurn(BaseModel):
    turn: IndexedTurn
    score: float


class VectorStore(ABC):
    """Events of every tenant and conversation; each call is scoped by tenant (and conversation)."""

    @abstractmethod
    def upsert_events(self, events: Sequence[Event], sparse: Sequence[SparseVector]) -> None:
        """Insert or replace events (same event_id = same point); ``sparse[i]`` is the keyword vector of ``events[i]``."""

    @abstractmethod
    def get_events(self, tenant: str, event_ids: Sequence[str]) -> list[Event]:
        """Events by id, with embeddings; unknown ids and other tenants' events are left out."""

    @abstractmethod
    def conversation_events(self, tenant: str, conversation_id: str) -> list[Event]:
        """Every event of one conversation, with embeddings."""

    @abstractmethod
    def search(self, tenant: str, conversation_id: str, vector: Sequence[float], limit: int) -> list[ScoredEvent]:
        """Nearest events by cosine similarity within one conversation."""

    @abstractmethod
    def keyword_search(self, tenant: str, conversation_id: str, query: SparseVector, limit: int) -> list[ScoredEvent]:
        """Best events by sparse keyword score (IDF-weighted) within one conversation."""

    @abstractmethod
    def upsert_turns(self, turns: Sequence[IndexedTurn], sparse: Sequence[SparseVector]) -> None:
        """Insert or replace turns (point id from tenant, conversation and turn id); each needs its embedding."""

    @abstractmethod
    def conversation_turns(self, tenant: str, conversation_id: str) -> list[IndexedTurn]:
        """Every turn of one conversation, with embeddings, in timestamp order."""

    @abstractmethod
    def search_turns(self, tenant: str, conversation_id: str, vector: Sequence[float], limit: int) -> list[ScoredTurn]:
        """Nearest turns by cosine similarity within one conversation."""

    @abstractmethod
    def keyword_search_turns(
        self, tenant: str, conversation_id: str, query: SparseVector, limit: int
    ) -> list[ScoredTurn]:
        """Best turns by sparse keyword score (IDF over turns) within one conversation."""

    @abstractmethod
    def delete_events(self, tenant: str, event_ids: Sequence[str]) -> None:
        """Delete events and the turn points that belong to them."""

    @abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> None: ...

    @abstractmethod
    def delete_tenant(self, tenant: str) -> None: ...

    @abstractmethod
    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        """Number of events (not turns)."""

    @abstractmethod
    def flush(self) -> None:
        """Make every write so far durable."""

    @abstractmethod
    def close(self) -> None: ...
