"""An in-memory view of one conversation for navigation: events, turns, their vectors, and the event graph.

Loaded from the stores on first use and cached. The single-process topology invalidates a conversation when
the pipeline writes to it; a separate API process reloads views older than ``max_age_s``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from compassmem.models import Event, IndexedTurn, partition_key, search_text
from compassmem.query_api.bm25_index import Bm25Index
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.vector_store import VectorStore


@dataclass
class ConversationView:
    tenant: str
    conversation_id: str
    events: dict[str, Event]
    turns: list[IndexedTurn]
    graph: nx.MultiDiGraph
    loaded_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.event_ids = list(self.events)
        dim = len(next(iter(self.events.values())).embedding or []) if self.events else 0
        self.event_matrix = np.asarray([self.events[e].embedding for e in self.event_ids], dtype=np.float32).reshape(
            len(self.event_ids), dim
        )
        self.event_row = {event_id: row for row, event_id in enumerate(self.event_ids)}
        self.turn_matrix = np.asarray([t.embedding for t in self.turns], dtype=np.float32).reshape(len(self.turns), dim)
        self.turn_row = {t.turn_id: row for row, t in enumerate(self.turns)}
        self.turn_event = np.asarray([self.event_row.get(t.event_id, -1) for t in self.turns], dtype=np.int64)
        self.has_time = np.asarray([t.has_time_expression for t in self.turns], dtype=bool)
        self.turn_speakers = np.asarray([t.speaker for t in self.turns])
        self.speakers = set(self.turn_speakers.tolist())
        self.session_of = [t.session_id for t in self.turns]
        # Row i-1 and row i are neighbours in the same session (turns are in time order).
        self.same_session_as_previous = np.asarray(
            [self.session_of[i] == self.session_of[i - 1] for i in range(1, len(self.turns))], dtype=bool
        )
        self._build_windows()

    def _build_windows(self, size: int = 3) -> None:
        """Keyword index of every run of ``size`` turns of a session: words of a question are often spread
        over a question turn and its answer."""
        rows = range(len(self.turns))
        self.windows = [
            [r for r in range(start, start + size) if r < len(self.turns) and self.session_of[r] == self.session_of[start]]
            for start in rows
        ]
        turn_texts = [search_text(t.speaker, t.text, t.timestamp) for t in self.turns]
        texts = [" ".join(turn_texts[r] for r in window) for window in self.windows]
        self.window_index = Bm25Index(texts) if texts else None
        self.window_rows = np.concatenate([np.asarray(w, dtype=np.int64) for w in self.windows]) if texts else None
        self.window_of_row = np.repeat(np.arange(len(self.windows)), [len(w) for w in self.windows]) if texts else None

    def window_scores(self, text: str) -> np.ndarray:
        """Per turn: the best BM25 score of a window that contains it."""
        scores = np.zeros(len(self.turns), dtype=np.float64)
        if self.window_index is None:
            return scores
        per_window = self.window_index.scores(text)
        np.maximum.at(scores, self.window_rows, per_window[self.window_of_row])
        return scores

    @property
    def empty(self) -> bool:
        return not self.turns

    def neighbours(self, event_id: str) -> list[tuple[str, dict]]:
        """Active relations touching an event, walked in both directions (a cause explains its effect and back)."""
        if event_id not in self.graph:
            return []
        found = []
        for _, target, data in self.graph.out_edges(event_id, data=True):
            if not data.get("superseded_by"):
                found.append((target, data))
        for source, _, data in self.graph.in_edges(event_id, data=True):
            if not data.get("superseded_by"):
                found.append((source, data))
        return found

    def cluster_members(self, event_id: str) -> list[str]:
        cluster_id = self.events[event_id].cluster_id if event_id in self.events else None
        if not cluster_id or cluster_id not in self.graph:
            return []
        return [m for m in self.graph.nodes[cluster_id].get("members", []) if m != event_id]


class ViewCache:
    """Loaded conversation views, least recently used evicted past ``max_views``: an API that has served 10,000
    conversations must not hold all of them."""

    def __init__(self, vectors: VectorStore, graph: GraphStore, max_age_s: float = 5.0, max_views: int = 64) -> None:
        self._vectors = vectors
        self._graph = graph
        self._max_age_s = max_age_s
        self._max_views = max_views
        self._views: OrderedDict[str, ConversationView] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._views)

    def get(self, tenant: str, conversation_id: str) -> ConversationView:
        key = partition_key(tenant, conversation_id)
        with self._lock:
            view = self._views.get(key)
            if view is not None:
                self._views.move_to_end(key)
        if view is None or time.monotonic() - view.loaded_at > self._max_age_s:
            view = self._load(tenant, conversation_id)
            with self._lock:
                self._views[key] = view
                self._views.move_to_end(key)
                while len(self._views) > self._max_views:
                    self._views.popitem(last=False)
        return view

    def invalidate(self, tenant: str, conversation_id: str | None = None) -> None:
        with self._lock:
            if conversation_id is None:
                for key in [k for k in self._views if k.startswith(f"{tenant}/")]:
                    del self._views[key]
            else:
                self._views.pop(partition_key(tenant, conversation_id), None)

    def _load(self, tenant: str, conversation_id: str) -> ConversationView:
        events = {e.event_id: e for e in self._vectors.conversation_events(tenant, conversation_id)}
        turns = [t for t in self._vectors.conversation_turns(tenant, conversation_id) if t.embedding is not None]
        graph = self._graph.conversation_graph(tenant, conversation_id)
        return ConversationView(tenant, conversation_id, events, turns, graph)
