"""The API's hot tier: recently used events with their turns, turn vectors, BM25 token counts and graph edges,
bounded by turns.

A query finds its candidates with store searches (always fresh), then needs the candidates' events in full: their
turns for context and windows, vectors for local scoring, relations for the walk. Those come from here, and from the
stores on a miss (three store calls for all the misses of a query). An entry is dropped when the worker's change
feed names its event or one of its relations (``compassmem/query_api/change_listener.py``), and reloaded when a
search returned a turn of its event that the entry does not hold (new turns are answerable at once). It is also
reloaded once it is older than ``max_age_s``, or ``followed_max_age_s`` while a change feed is followed and the entry
was loaded since: the feed invalidates what changes, so only a feed that stops needs the short limit (a 30 s limit
reloaded most of a busy conversation's candidates on every query). Least recently used events go first past
``max_turns``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import numpy as np

from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import TimeAnchor, passage_point_key, search_text, turn_point_key
from compassmem.text.passages import Span, passage_spans
from compassmem.text.text_features import question_share, states_standing_wish
from compassmem.retrieval.bm25_index import token_counts, token_lengths
from compassmem.sinks.graph_store import EdgeFields, WalkEdge, GraphStore
from compassmem.sinks.vector_store import HotEventRow, HotTurnRow, TurnLocation, TurnLocator, VectorStore

T = TypeVar("T")

# Graph reads of hot-tier loads, run beside their vector-store reads; shared by every hot tier of the process. Sized
# for the queries that miss at the same time (the API serves queries on many threads), so that one query's graph
# read never waits behind another's; threads start only when that many loads overlap.
_GRAPH_READS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="compassmem-hot-graph")

# Events per load when the tier is filled ahead of queries (``preload``; one load is three store calls).
PRELOAD_PAGE_EVENTS = 256

# Invalidation marks kept (each kind): only loads running when a mark was made consult it, and a query's loads take
# milliseconds, so this is far more than enough.
INVALIDATION_MARKS = 10_000

# A scope where the tier did not hold this share of a query's hits is searched with payloads for the next
# COLD_SCOPE_QUERIES queries before its hits are located again; scopes remembered so (least recently marked go first
# past the bound).
LOCATED_SHARE = 0.9
COLD_SCOPE_QUERIES = 16
COLD_SCOPES = 1_024


@dataclass(frozen=True)
class HotEvent:
    """An event as a query ranks it: what its view, walk and evidence read, nothing more.

    Python's full garbage collection walks every object the hot tier holds, and its pauses were the tail of
    tenant-wide latency (121 ms each, 14 in 200 questions, with the pydantic event and one object per turn). So the
    turns are kept column by column, as tuples of strings, datetimes and booleans, which the collector stops tracking,
    and the event as the few fields a query reads."""

    event_id: str
    conversation_id: str
    cluster_id: str | None
    start: datetime
    time_anchors: tuple[TimeAnchor, ...]
    vector: np.ndarray
    turn_ids: tuple[str, ...]
    speakers: tuple[str, ...]
    texts: tuple[str, ...]
    timestamps: tuple[datetime, ...]
    session_ids: tuple[str | None, ...]
    has_time: tuple[bool, ...]
    turn_vectors: np.ndarray
    turn_counts: tuple[dict[str, int], ...]
    # Every active relation with this event at one end, as (the other end, the edge's WalkEdge.fields()): what a
    # walk from here can take, ready to use.
    links: tuple[tuple[str, EdgeFields], ...]
    # False for an event loaded without its turns (a neighbour the walk passes through): never a candidate's entry.
    turns_loaded: bool = True
    loaded_at: float = field(default_factory=time.monotonic)
    # The turn ids as a set: a search hit of a turn the entry does not hold makes the entry reload.
    held: frozenset[str] = field(init=False)
    # Tokens per turn (BM25 window lengths), summed once per load rather than once per query.
    turn_lengths: np.ndarray = field(init=False)
    # The share of each turn's text that asks something (text_features.question_share), once per load.
    question_shares: np.ndarray = field(init=False)
    # 1 for each turn that states a standing instruction or preference (text_features.states_standing_wish).
    standing_wishes: np.ndarray = field(init=False)
    # Each turn's passages (text/passages.py), once per load: the evidence of a long turn shows one of them, and
    # the tier locates the passage points a search finds.
    passage_spans: tuple[tuple[Span, ...], ...] = field(init=False)
    # Sort keys a query's view orders events and turns by, computed once per load rather than once per query.
    order: tuple[str, datetime, str] = field(init=False)
    turn_order: tuple[tuple[str, datetime, str], ...] = field(init=False)
    # The entry as a neighbour enters a view (without_turns), made on first use: a query takes a score of
    # neighbours, and copying one cost 30 us.
    _turnless: HotEvent | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "held", frozenset(self.turn_ids))
        object.__setattr__(self, "_turnless", None)
        object.__setattr__(self, "turn_lengths", token_lengths(self.turn_counts))
        object.__setattr__(self, "question_shares", np.asarray([question_share(t) for t in self.texts],
                                                                dtype=np.float64))
        object.__setattr__(self, "standing_wishes", np.asarray([states_standing_wish(t) for t in self.texts],
                                                                dtype=np.float64))
        object.__setattr__(self, "passage_spans", tuple(tuple(passage_spans(text)) for text in self.texts))
        object.__setattr__(self, "order", (self.conversation_id, self.start, self.event_id))
        object.__setattr__(self, "turn_order", tuple((self.conversation_id, timestamp, turn_id)
                                                     for timestamp, turn_id in zip(self.timestamps, self.turn_ids,
                                                                                   strict=True)))

    @property
    def turn_count(self) -> int:
        return len(self.turn_ids)

    @property
    def weight(self) -> int:
        """What the entry counts for against ``max_turns``: its turns, and at least one for an event without."""
        return max(1, self.turn_count)

    def without_turns(self) -> HotEvent:
        """The event as a neighbour enters a view: its vector, cluster and relations, no turns."""
        if not self.turns_loaded:
            return self
        turnless = self._turnless
        if turnless is None:
            turnless = dataclasses.replace(self, turn_ids=(), speakers=(), texts=(), timestamps=(), session_ids=(),
                                           has_time=(), turn_vectors=self.turn_vectors[:0], turn_counts=(),
                                           turns_loaded=False)
            object.__setattr__(self, "_turnless", turnless)
        return turnless

    def only(self, turn_ids: Collection[str]) -> HotEvent:
        """The event with only these of its turns (a filtered query's view of it, never held by the tier): the
        entry itself when it keeps them all, without turns when it keeps none."""
        rows = [row for row, turn_id in enumerate(self.turn_ids) if turn_id in turn_ids]
        if len(rows) == self.turn_count:
            return self
        if not rows:
            return self.without_turns()

        def kept(column: Sequence[T]) -> tuple[T, ...]:
            return tuple(column[row] for row in rows)

        return dataclasses.replace(self, turn_ids=kept(self.turn_ids), speakers=kept(self.speakers),
                                   texts=kept(self.texts), timestamps=kept(self.timestamps),
                                   session_ids=kept(self.session_ids), has_time=kept(self.has_time),
                                   turn_vectors=self.turn_vectors[rows], turn_counts=kept(self.turn_counts))

    @classmethod
    def of(cls, event: HotEventRow, vector: np.ndarray, turns: Sequence[HotTurnRow], turn_vectors: np.ndarray,
           turn_counts: Sequence[dict[str, int]], links: Sequence[tuple[str, EdgeFields]],
           turns_loaded: bool = True) -> HotEvent:
        """``event`` with its embedding ``vector``, and ``turns`` (in time order) with theirs, row by row."""
        return cls(
            event_id=event.event_id, conversation_id=event.conversation_id, cluster_id=event.cluster_id,
            start=event.start, time_anchors=event.time_anchors, vector=vector,
            turn_ids=tuple(t.turn_id for t in turns), speakers=tuple(t.speaker for t in turns),
            texts=tuple(t.text for t in turns), timestamps=tuple(t.timestamp for t in turns),
            session_ids=tuple(t.session_id for t in turns), has_time=tuple(t.has_time_expression for t in turns),
            turn_vectors=turn_vectors, turn_counts=tuple(turn_counts),
            # In a fixed order: the walk breaks ties by the order it meets edges, and the graph store returns them
            # in whatever order it stored them (it differed between two builds of the same memory).
            links=tuple(sorted(links, key=lambda link: (link[0], WalkEdge._make(link[1]).relation_id))),
            turns_loaded=turns_loaded,
        )


class HotTier:
    def __init__(self, vectors: VectorStore, graph: GraphStore, max_turns: int = 50_000,
                 max_age_s: float = 5.0, followed_max_age_s: float = 600.0) -> None:
        self._vectors = vectors
        self._graph = graph
        self.max_turns = max_turns
        self._max_age_s = max_age_s
        self._followed_max_age_s = max(max_age_s, followed_max_age_s)
        # Since when a change feed has been followed without a break (None: not followed now).
        self._followed_since: float | None = None
        self._entries: OrderedDict[tuple[str, str], HotEvent] = OrderedDict()
        # Each held turn's point key (models.turn_point_key), and the key of each of its passages after the first
        # (models.passage_point_key) -> (tenant, event id, conversation id, turn id, speaker, passage index): search
        # hits name points by key, and ``locate`` answers where they are without reading their payloads from the
        # store. Plain tuples, which the garbage collector stops tracking (see HotEvent).
        self._turn_points: dict[int, tuple[str, str, str, str, str, int]] = {}
        # The point keys of each entry's turns and passages, to forget them with the entry.
        self._point_keys: dict[tuple[str, str], tuple[int, ...]] = {}
        # When each recently invalidated event was invalidated: a load that started before then read what the
        # change replaced, so it is served once but not kept. Bounded: older marks cannot matter to a load.
        self._invalidated: OrderedDict[tuple[str, str | None], float] = OrderedDict()
        self._invalidated_scopes: OrderedDict[tuple[str, str | None], float] = OrderedDict()
        self._cold_scopes: OrderedDict[SearchScope, int] = OrderedDict()
        self._turns = 0
        self._lock = threading.Lock()

    @property
    def graph(self) -> GraphStore:
        """The graph store the tier reads relations from."""
        return self._graph

    @property
    def turns(self) -> int:
        """Turns held now, an event held without its turns counting as one (at most ``max_turns``, plus one
        event's worth while a larger event is being served)."""
        return self._turns

    def __len__(self) -> int:
        return len(self._entries)

    def events(self, tenant: str, event_ids: Sequence[str], must_hold: Mapping[str, set[str]] | None = None,
               with_turns: bool = True) -> dict[str, HotEvent]:
        """The events that exist, by id; ``must_hold[event_id]`` are turn ids the entry must contain to be used.
        Without ``with_turns`` each comes without its turns (``HotEvent.without_turns``), and a miss reads only
        the event."""
        must_hold = must_hold or {}
        found: dict[str, HotEvent] = {}
        now = time.monotonic()
        with self._lock:
            for event_id in dict.fromkeys(event_ids):
                entry = self._entries.get((tenant, event_id))
                if (entry is not None and self._fresh(entry, now)
                        and (entry.turns_loaded or not with_turns)
                        and must_hold.get(event_id, set()) <= entry.held):
                    self._entries.move_to_end((tenant, event_id))
                    found[event_id] = entry if with_turns else entry.without_turns()
        missing = [event_id for event_id in dict.fromkeys(event_ids) if event_id not in found]
        if missing:
            started = time.monotonic()
            loaded = self._load(tenant, missing, with_turns)
            with self._lock:
                for event_id, entry in loaded.items():
                    if not self._changed_since(tenant, entry, started):
                        self._put((tenant, event_id), entry)
            found.update(loaded)
        return found

    def preload(self, tenant: str, event_ids: Sequence[str]) -> int:
        """Read these events into the tier ahead of the queries that will want them (after a write), a page of
        ``PRELOAD_PAGE_EVENTS`` per load; returns how many exist."""
        found = 0
        for start in range(0, len(event_ids), PRELOAD_PAGE_EVENTS):
            found += len(self.events(tenant, event_ids[start: start + PRELOAD_PAGE_EVENTS]))
        return found

    def locate(self, tenant: str, keys: Collection[int]) -> dict[int, TurnLocation]:
        """Where the held turns (and passages of them) among these point keys are (``VectorStore.hits``' locator):
        only from entries ``events`` would serve as they are, so a turn the change feed moved, or one of an entry
        past its age, is read from the store instead."""
        now = time.monotonic()
        found: dict[int, TurnLocation] = {}
        fresh: dict[str, bool] = {}
        with self._lock:
            for key in keys:
                held = self._turn_points.get(key)
                if held is None or held[0] != tenant:
                    continue
                _, event_id, conversation_id, turn_id, speaker, passage = held
                usable = fresh.get(event_id)
                if usable is None:
                    entry = self._entries[(tenant, event_id)]
                    usable = fresh[event_id] = self._fresh(entry, now)
                if usable:
                    found[key] = TurnLocation(conversation_id, turn_id, event_id, speaker, passage)
        return found

    def locator(self, scope: SearchScope) -> TurnLocator | None:
        """``locate`` for the searches of one query in ``scope``, or None while the scope is cold.

        Hits the tier does not hold are read by id after the search, which costs more than reading them with the
        search (0.1-0.3 ms more per 100 hits on a small qdrant-edge shard; on a 170k-turn tenant, where the tier held
        half of the hits or more, load_search took 1.2-1.5 ms longer at the median): a scope where a query located
        less than LOCATED_SHARE of its hits is searched with payloads for the next COLD_SCOPE_QUERIES queries, then
        tried again. Either way the hits are the same."""
        with self._lock:
            remaining = self._cold_scopes.get(scope)
            if remaining:
                self._cold_scopes[scope] = remaining - 1
                return None

        went_cold = False

        def locate(keys: Collection[int]) -> dict[int, TurnLocation]:
            nonlocal went_cold
            found = self.locate(scope.tenant, keys)
            with self._lock:
                if len(found) < LOCATED_SHARE * len(keys):
                    went_cold = True
                    self._cold_scopes[scope] = COLD_SCOPE_QUERIES
                    self._cold_scopes.move_to_end(scope)
                    while len(self._cold_scopes) > COLD_SCOPES:
                        self._cold_scopes.popitem(last=False)
                elif not went_cold:  # one search of the query that missed is enough to stay cold
                    self._cold_scopes.pop(scope, None)
            return found

        return locate

    @property
    def following_feed(self) -> bool:
        """Whether a change feed is followed now (entries loaded meanwhile keep ``followed_max_age_s``)."""
        return self._followed_since is not None

    def feed_followed(self, followed: bool) -> None:
        """Told by the change-feed listener whether it follows the feed now (each poll that succeeds or fails)."""
        with self._lock:
            if not followed:
                self._followed_since = None
            elif self._followed_since is None:
                self._followed_since = time.monotonic()

    def _fresh(self, entry: HotEvent, now: float) -> bool:
        """Whether an entry is young enough to serve as it is (else ``events`` loads it again): within
        ``followed_max_age_s`` if loaded while the feed has been followed, else ``max_age_s``."""
        followed = self._followed_since is not None and entry.loaded_at >= self._followed_since
        return now - entry.loaded_at <= (self._followed_max_age_s if followed else self._max_age_s)

    def invalidate_event(self, tenant: str, event_id: str) -> bool:
        """Drop an event's entry; whether it was held (the change feed reads those again)."""
        with self._lock:
            held = (tenant, event_id) in self._entries
            self._drop((tenant, event_id))
            self._mark_invalidated((tenant, event_id))
            return held

    def invalidate(self, tenant: str, conversation_id: str | None = None) -> None:
        """Drop a conversation's events (all of the tenant's without one): a forget, a delete."""
        with self._lock:
            for key in [k for k, entry in self._entries.items() if k[0] == tenant
                        and (conversation_id is None or entry.conversation_id == conversation_id)]:
                self._drop(key)
            # A load of this conversation's events that is under way must not be kept either.
            self._mark_invalidated((tenant, conversation_id), scope=True)

    def _mark_invalidated(self, key: tuple[str, str | None], scope: bool = False) -> None:
        marks = self._invalidated_scopes if scope else self._invalidated
        marks[key] = time.monotonic()
        marks.move_to_end(key)
        while len(marks) > INVALIDATION_MARKS:
            marks.popitem(last=False)

    def _changed_since(self, tenant: str, entry: HotEvent, started: float) -> bool:
        """Whether the feed invalidated this event (or its conversation, or its tenant) after ``started``."""
        return (self._invalidated.get((tenant, entry.event_id), -1.0) >= started
                or self._invalidated_scopes.get((tenant, entry.conversation_id), -1.0) >= started
                or self._invalidated_scopes.get((tenant, None), -1.0) >= started)

    def resize(self, max_turns: int) -> None:
        """Hold at most ``max_turns`` from now on (a runtime setting changed); least recently used go first."""
        with self._lock:
            self.max_turns = max_turns
            self._evict()

    def _evict(self) -> None:
        while self._turns > self.max_turns and len(self._entries) > 1:
            self._drop(next(iter(self._entries)))

    def _put(self, key: tuple[str, str], entry: HotEvent) -> None:
        self._drop(key)
        self._entries[key] = entry
        self._turns += entry.weight
        if entry.turns_loaded:
            tenant, conversation_id = key[0], entry.conversation_id
            located = {
                turn_point_key(tenant, conversation_id, turn_id) if index == 0
                else passage_point_key(tenant, conversation_id, turn_id, index):
                (tenant, key[1], conversation_id, turn_id, speaker, index)
                for turn_id, speaker, spans in zip(entry.turn_ids, entry.speakers, entry.passage_spans, strict=True)
                for index in range(len(spans))}
            self._point_keys[key] = tuple(located)
            # A turn another entry still holds moved here: this is the later load, so it wins.
            self._turn_points.update(located)
        self._evict()

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._turns -= entry.weight
        for point in self._point_keys.pop(key, ()):
            held = self._turn_points.get(point)
            if held is not None and (held[0], held[1]) == key:
                del self._turn_points[point]

    def _load(self, tenant: str, event_ids: list[str], with_turns: bool = True) -> dict[str, HotEvent]:
        # The graph server works out the relations while this thread reads the vector store.
        edges = _GRAPH_READS.submit(self._graph.edges_touching, tenant, event_ids)
        records = self._vectors.hot_records(tenant, event_ids, with_turns=with_turns)
        rows_of: dict[str, list[int]] = {}
        for row, turn in enumerate(records.turns):
            rows_of.setdefault(turn.event_id, []).append(row)
        links: dict[str, list[tuple[str, EdgeFields]]] = {}
        for edge in edges.result():
            fields = edge.fields()
            links.setdefault(edge.source, []).append((edge.target, fields))
            if edge.target != edge.source:
                links.setdefault(edge.target, []).append((edge.source, fields))
        # Every loaded turn tokenised in one call: once per event cost three times as much on a cold load.
        counts = token_counts([search_text(t.speaker, t.text, t.timestamp) for t in records.turns])
        loaded = {}
        for event, vector in zip(records.events, records.event_vectors, strict=True):
            rows = rows_of.get(event.event_id, [])
            loaded[event.event_id] = HotEvent.of(event, vector, [records.turns[r] for r in rows],
                                                 records.turn_vectors[rows], [counts[r] for r in rows],
                                                 links.get(event.event_id, ()), turns_loaded=with_turns)
        return loaded
