"""Batching sinks in the shape of quix-streams' BaseSink: ``add()`` per record, ``flush()`` with their group.

A sink keeps only the latest version of each record id, so a batch that saw an event three times (created,
merged into, reclustered) writes it once. When a sink flushes is not its own business: ``sink_group.SinkGroup``
flushes every sink of a writer together, in one order, as the first step of the batch's commit.

Besides the memory's records a sink may be handed two kinds of instruction, in the order they happened:
``ConversationForgotten`` (drop what was added for the conversation so far and delete it from the store before the
records added after it are written), ``TurnRedacted`` (a redaction changed the stores), ``Retraction`` (delete an
earlier run's records before the records added after it are written) and the provisional records of
``ProvisionalSink``. A sink ignores the kinds it has nothing to do with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from compassmem.core.contracts.search import SparseVector
from compassmem.core.models import (
    Cluster,
    Event,
    IndexedTurn,
    Relation,
    TurnPassage,
    passage_point_id,
    search_text,
    turn_point_id,
)
from compassmem.processors.conversation_memory import Retraction
from compassmem.text.categories import category_terms
from compassmem.text.text_features import keyword_stems, sparse_keyword_vector, tie_break
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.vector_store import VectorStore


@dataclass(frozen=True, slots=True)
class ConversationForgotten:
    """A forget reached this conversation: what was added for it before is void, and the store forgets it."""

    tenant: str
    conversation_id: str


@dataclass(frozen=True, slots=True)
class ProvisionalEvent:
    """A conversation's open segment as the event it will become (``provisional=True``), with its open turns:
    a query returns turn ids, so a turn is queryable only once its own point exists."""

    event: Event
    turns: tuple[IndexedTurn, ...]


@dataclass(frozen=True, slots=True)
class ProvisionalRetired:
    """A provisional event whose segment closed into an older event: its point must go."""

    tenant: str
    conversation_id: str
    event_id: str


@dataclass(frozen=True, slots=True)
class TurnRedacted:
    """A redaction took a turn out of the stores (the worker, at the redaction's marker in the turns log)."""

    tenant: str
    conversation_id: str
    turn_id: str


Record = (Event | IndexedTurn | TurnPassage | Relation | Cluster | ConversationForgotten | ProvisionalEvent
          | ProvisionalRetired | TurnRedacted | Retraction)


class Sink(ABC):
    @abstractmethod
    def add(self, record: Record) -> None: ...

    @abstractmethod
    def flush(self) -> None:
        """Write everything added so far. The writes are durable once ``settle`` has returned as well."""

    def settle(self) -> None:
        """Wait until what ``flush`` wrote is durable; raises what making it durable raised. Most sinks' writes
        are durable when ``flush`` returns: nothing to wait for."""

    def discard(self) -> None:
        """Drop what was added and not flushed (after a failed flush, before the batch is redone)."""


def event_keyword_vector(event: Event) -> SparseVector:
    return sparse_keyword_vector((stem for o in event.observations for stem in keyword_stems(o.text)),
                                 scale=tie_break(event.event_id))


def turn_keyword_vector(turn: IndexedTurn) -> SparseVector:
    """The turn's keyword stems (with who said it and when) and the categories its nouns and its labels (the
    optional LLM labeller's) belong to."""
    return sparse_keyword_vector([*keyword_stems(search_text(turn.speaker, turn.text, turn.timestamp)),
                                  *category_terms(turn.text, turn.category_labels)],
                                 scale=tie_break(f"{turn.conversation_id}/{turn.turn_id}"))


def _of(record: Event | IndexedTurn | TurnPassage | Relation | Cluster, forgotten: ConversationForgotten) -> bool:
    return record.tenant == forgotten.tenant and record.conversation_id == forgotten.conversation_id


class VectorSink(Sink):
    """Events and turns into the vector store (dense embedding + sparse keywords + payload)."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store
        self._events: dict[str, Event] = {}
        self._turns: dict[str, IndexedTurn] = {}
        self._passages: dict[str, TurnPassage] = {}
        self._forgotten: dict[tuple[str, str], None] = {}
        self._retracted: list[Retraction] = []
        self._syncing: Future[None] | None = None
        self._syncer: ThreadPoolExecutor | None = None

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self._events[record.event_id] = record
        elif isinstance(record, IndexedTurn):
            self._turns[turn_point_id(record.tenant, record.conversation_id, record.turn_id)] = record
        elif isinstance(record, TurnPassage):
            self._passages[passage_point_id(record.tenant, record.conversation_id, record.turn_id,
                                            record.index)] = record
        elif isinstance(record, ConversationForgotten):
            # Whatever is still here was added after the forget: writing it after the delete keeps the log's order.
            self._events = {k: e for k, e in self._events.items() if not _of(e, record)}
            self._turns = {k: t for k, t in self._turns.items() if not _of(t, record)}
            self._passages = {k: p for k, p in self._passages.items() if not _of(p, record)}
            self._forgotten[(record.tenant, record.conversation_id)] = None
        elif isinstance(record, Retraction):
            for event_id in record.event_ids:
                self._events.pop(event_id, None)
            self._retracted.append(record)

    def flush(self) -> None:
        if not self._events and not self._turns and not self._passages and not self._forgotten \
                and not self._retracted:
            return
        for tenant, conversation_id in self._forgotten:
            self._store.delete_conversation(tenant, conversation_id)
        for retraction in self._retracted:
            self._store.delete_events(retraction.tenant, retraction.event_ids)
        if self._events:
            events = list(self._events.values())
            self._store.upsert_events(events, [event_keyword_vector(e) for e in events])
        if self._turns:
            turns = list(self._turns.values())
            self._store.upsert_turns(turns, [turn_keyword_vector(t) for t in turns])
        if self._passages:
            self._store.upsert_passages(list(self._passages.values()))
        self.settle()  # the previous batch's flush, if nobody waited for it
        # The store's flush waits on the disk (25-100 ms a batch on qdrant-edge, which lets go of the GIL meanwhile):
        # it runs while the sinks after this one write, and the checkpoint settles it before the batch counts as
        # stored. Writes made meanwhile (the provisional sink's) are made durable by this flush or by the next.
        if self._syncer is None:
            self._syncer = ThreadPoolExecutor(1, thread_name_prefix="compassmem-vector-flush")
        self._syncing = self._syncer.submit(self._store.flush)
        self._clear()

    def settle(self) -> None:
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            syncing.result()

    def discard(self) -> None:
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            # The batch is dropped and will be written again; its store flush ends first, whatever it raised (the
            # redo's flush meets a store that still fails).
            wait([syncing])
        self._clear()

    def _clear(self) -> None:
        self._events.clear()
        self._turns.clear()
        self._passages.clear()
        self._forgotten.clear()
        self._retracted.clear()


class GraphSink(Sink):
    """Events, relations and clusters into the graph store; nodes before the edges that need them."""

    def __init__(self, store: GraphStore) -> None:
        self._store = store
        self._events: dict[str, Event] = {}
        self._relations: dict[str, Relation] = {}
        self._clusters: dict[str, Cluster] = {}
        self._forgotten: dict[tuple[str, str], None] = {}
        self._retracted: list[Retraction] = []

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self._events[record.event_id] = record
        elif isinstance(record, Relation):
            self._relations[record.relation_id] = record
        elif isinstance(record, Cluster):
            self._clusters[record.cluster_id] = record
        elif isinstance(record, ConversationForgotten):
            self._events = {k: e for k, e in self._events.items() if not _of(e, record)}
            self._relations = {k: r for k, r in self._relations.items() if not _of(r, record)}
            self._clusters = {k: c for k, c in self._clusters.items() if not _of(c, record)}
            self._forgotten[(record.tenant, record.conversation_id)] = None
        elif isinstance(record, Retraction):
            for event_id in record.event_ids:
                self._events.pop(event_id, None)
            for relation_id in record.relation_ids:
                self._relations.pop(relation_id, None)
            self._retracted.append(record)

    def flush(self) -> None:
        for tenant, conversation_id in self._forgotten:
            self._store.delete_conversation(tenant, conversation_id)
        for retraction in self._retracted:
            self._store.delete_relations(retraction.tenant, retraction.relation_ids)
            self._store.delete_events(retraction.tenant, retraction.conversation_id, retraction.event_ids)
        if self._events:
            self._store.upsert_events(list(self._events.values()))
        if self._clusters:
            self._store.upsert_clusters(list(self._clusters.values()))
        if self._relations:
            self._store.upsert_relations(list(self._relations.values()))
        self.discard()

    def discard(self) -> None:
        self._events.clear()
        self._relations.clear()
        self._clusters.clear()
        self._forgotten.clear()
        self._retracted.clear()


class ProvisionalSink(Sink):
    """Provisional events and their open turns into the vector store, and retired ones out of it.

    Flushed after ``VectorSink`` (the checkpoint keeps that order): a retired provisional event's turns were just
    rewritten under the event they closed into, so deleting it then removes its own point only; a forgotten
    conversation is deleted by the vector sink, and what is still here was added after the forget.

    Not made durable by a store flush of its own (that costs ~12 ms on qdrant-edge, and this sink writes every
    batch): the store's write-ahead log holds the writes when the calls return, and the next flush of the vector
    sink makes them durable with everything else. A provisional event is derived from the conversation's state and
    rewritten by its next batch or by its close, so it never carries anything the state does not.
    """

    def __init__(self, store: VectorStore) -> None:
        self._store = store
        self._events: dict[str, ProvisionalEvent] = {}
        self._retired: dict[str, ProvisionalRetired] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, ProvisionalEvent):
            self._events[record.event.event_id] = record
        elif isinstance(record, ProvisionalRetired):
            self._retired[record.event_id] = record
        elif isinstance(record, ConversationForgotten):
            self._events = {k: p for k, p in self._events.items() if not _of(p.event, record)}
            self._retired = {k: r for k, r in self._retired.items()
                             if (r.tenant, r.conversation_id) != (record.tenant, record.conversation_id)}

    def flush(self) -> None:
        if self._events:
            events = [p.event for p in self._events.values()]
            turns = [turn for p in self._events.values() for turn in p.turns]
            self._store.upsert_events(events, [event_keyword_vector(event) for event in events])
            self._store.upsert_turns(turns, [turn_keyword_vector(turn) for turn in turns])
        for retired in self._retired.values():
            self._store.delete_events(retired.tenant, [retired.event_id])
        self.discard()

    def discard(self) -> None:
        self._events.clear()
        self._retired.clear()


class CompactingSink(Sink):
    """Rewrites the stores' files (``Stores.compact``) when a batch that erased something, a forget or a redaction,
    is flushed: the deleted words leave the disk before the batch counts as committed, and a batch redone after a
    crash compacts again. After the store sinks, so it finds their writes done."""

    def __init__(self, compact: Callable[[], None]) -> None:
        self._compact = compact
        self._due = False

    def add(self, record: Record) -> None:
        if isinstance(record, ConversationForgotten | TurnRedacted):
            self._due = True

    def flush(self) -> None:
        if self._due:
            self._compact()
            self._due = False

    def discard(self) -> None:
        self._due = False


@dataclass(frozen=True, slots=True)
class WrittenEvent:
    tenant: str
    conversation_id: str
    event_id: str
    turns: int


class WrittenEvents(Sink):
    """Which events its group wrote (flushed), the latest write last, until ``take``: what ``Memory.add`` loads
    into the query's hot tier. Holds ids only; a forgotten conversation's or a retired event's are dropped."""

    def __init__(self) -> None:
        self._added: dict[tuple[str, str], WrittenEvent] = {}
        self._written: dict[tuple[str, str], WrittenEvent] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, Event) and not record.provisional:
            key = (record.tenant, record.event_id)
            self._added.pop(key, None)
            self._added[key] = WrittenEvent(record.tenant, record.conversation_id, record.event_id,
                                            len(record.observations))
        elif isinstance(record, ProvisionalRetired | Retraction):
            for event_id in [record.event_id] if isinstance(record, ProvisionalRetired) else record.event_ids:
                self._added.pop((record.tenant, event_id), None)
                self._written.pop((record.tenant, event_id), None)
        elif isinstance(record, ConversationForgotten):
            for held in (self._added, self._written):
                for key in [k for k, e in held.items() if (e.tenant, e.conversation_id) == (
                        record.tenant, record.conversation_id)]:
                    del held[key]

    def flush(self) -> None:
        for key, event in self._added.items():
            self._written.pop(key, None)
            self._written[key] = event
        self._added.clear()

    def discard(self) -> None:
        self._added.clear()

    def take(self) -> list[WrittenEvent]:
        taken = list(self._written.values())
        self._written.clear()
        return taken

