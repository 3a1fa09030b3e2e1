"""What one query ranks: its candidate events (from one or many conversations), their turns, vectors and relations.

Built per query from the hot tier, so its size follows the candidates (hundreds of turns), not what is stored.
Rows are turns in (conversation, time) order; two rows are neighbours when they are consecutive turns of one
session of one conversation as far as the candidates show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from compassmem.models import Event, IndexedTurn
from compassmem.query_api.bm25_index import window_bm25
from compassmem.query_api.hot_tier import HotEvent

TurnKey = tuple[str, str]
"""(conversation_id, turn_id): a turn id is unique only within its conversation."""

WINDOW_TURNS = 3


class MemoryView:
    def __init__(self, tenant: str, hot: Iterable[HotEvent], clusters: dict[str, list[str]], dim: int) -> None:
        self.tenant = tenant
        entries = sorted(hot, key=lambda h: (h.event.conversation_id, h.event.temporal_info.start, h.event.event_id))
        self.events: dict[str, Event] = {h.event.event_id: h.event for h in entries}
        self.event_ids = list(self.events)
        self.event_row = {event_id: row for row, event_id in enumerate(self.event_ids)}
        self.event_matrix = np.asarray([h.vector for h in entries], dtype=np.float32).reshape(len(entries), dim)
        turns = [t for h in entries for t in h.turns]
        counts = [c for h in entries for c in h.turn_counts]
        matrix = (np.concatenate([h.turn_vectors for h in entries]) if entries
                  else np.zeros((0, dim), dtype=np.float32))
        order = sorted(range(len(turns)), key=lambda i: (turns[i].conversation_id, turns[i].timestamp,
                                                         turns[i].turn_id))
        # A turn reported in two events (it moved between two loads) is kept once.
        kept: dict[TurnKey, int] = {}
        for i in order:
            kept.setdefault((turns[i].conversation_id, turns[i].turn_id), i)
        rows = list(kept.values())
        self.turns: list[IndexedTurn] = [turns[i] for i in rows]
        self.turn_matrix = matrix[rows].reshape(len(rows), dim)
        self._turn_counts: list[Counter[str]] = [counts[i] for i in rows]
        self.turn_row: dict[TurnKey, int] = {(t.conversation_id, t.turn_id): r for r, t in enumerate(self.turns)}
        self.turn_event = np.asarray([self.event_row.get(t.event_id, -1) for t in self.turns], dtype=np.int64)
        self.has_time = np.asarray([t.has_time_expression for t in self.turns], dtype=bool)
        self.turn_speakers = np.asarray([t.speaker for t in self.turns])
        self.speakers = set(self.turn_speakers.tolist())
        self.session_of: list[tuple[str, str | None]] = [(t.conversation_id, t.session_id) for t in self.turns]
        self.same_session_as_previous = np.asarray(
            [self.session_of[i] == self.session_of[i - 1] for i in range(1, len(self.turns))], dtype=bool
        )
        self._links = {h.event.event_id: h.links for h in entries}
        self._clusters = clusters
        # Keyword hits per query text, filled by the engine: the store searches a query makes once.
        self.keyword_hits: dict[str, list[TurnKey]] = {}
        self._build_windows()

    @property
    def empty(self) -> bool:
        return not self.turns

    @property
    def conversations(self) -> list[str]:
        return sorted({t.conversation_id for t in self.turns})

    def _build_windows(self) -> None:
        """Every run of up to WINDOW_TURNS turns of a session: the words of a question are often spread over a
        question turn and its answer."""
        count = len(self.turns)
        self.windows = [[r for r in range(start, min(start + WINDOW_TURNS, count))
                         if self.session_of[r] == self.session_of[start]] for start in range(count)]
        self.window_rows = (np.concatenate([np.asarray(w, dtype=np.int64) for w in self.windows]) if count
                            else np.zeros(0, dtype=np.int64))
        self.window_of_row = np.repeat(np.arange(count), [len(w) for w in self.windows])

    def window_scores(self, text: str) -> np.ndarray:
        """Per turn: the best BM25 score of a window that contains it."""
        scores = np.zeros(len(self.turns), dtype=np.float64)
        if not self.turns:
            return scores
        per_window = window_bm25(text, self._turn_counts, self.window_rows, self.window_of_row, len(self.windows))
        np.maximum.at(scores, self.window_rows, per_window[self.window_of_row])
        return scores

    def neighbours(self, event_id: str) -> tuple[tuple[str, dict], ...]:
        """Active relations touching an event, walked in both directions (a cause explains its effect and back)."""
        return self._links.get(event_id, ())

    def cluster_members(self, event_id: str) -> list[str]:
        cluster_id = self.events[event_id].cluster_id if event_id in self.events else None
        return [m for m in self._clusters.get(cluster_id or "", []) if m != event_id]
