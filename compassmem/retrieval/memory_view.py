"""What one query ranks: its candidate events (from one or many conversations), their turns, vectors and relations.

Built per query from the hot tier, so its size follows the candidates (hundreds of turns), not what is stored.
Rows are turns in (conversation, time) order; two rows are neighbours when they are consecutive turns of one
session of one conversation as far as the candidates show.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import TypeVar

import numpy as np

from compassmem.core.contracts.search import TurnFilter
from compassmem.retrieval.bm25_index import bm25_tokens, window_bm25
from compassmem.retrieval.hot_tier import HotEvent
from compassmem.sinks.graph_store import EdgeFields
from compassmem.sinks.vector_store import HotTurnRow, TurnHit

T = TypeVar("T")

TurnKey = tuple[str, str]
"""(conversation_id, turn_id): a turn id is unique only within its conversation."""

WINDOW_TURNS = 3


class MemoryView:
    def __init__(self, tenant: str, hot: Iterable[HotEvent], dim: int, turn_filter: TurnFilter | None = None) -> None:
        self.tenant = tenant
        # The query's turn filter, which the hot events already obey: a search made for the view obeys it too.
        self.turn_filter = turn_filter
        entries = sorted(hot, key=lambda h: h.order)
        self.events: dict[str, HotEvent] = {h.event_id: h for h in entries}
        self.event_ids = list(self.events)
        self.event_row = {event_id: row for row, event_id in enumerate(self.event_ids)}
        self.event_matrix = np.asarray([h.vector for h in entries], dtype=np.float32).reshape(len(entries), dim)
        keys = [k for h in entries for k in h.turn_order]
        counts = [c for h in entries for c in h.turn_counts]
        lengths = np.concatenate([h.turn_lengths for h in entries]) if entries else np.zeros(0)
        shares = np.concatenate([h.question_shares for h in entries]) if entries else np.zeros(0)
        wishes = np.concatenate([h.standing_wishes for h in entries]) if entries else np.zeros(0)
        matrix = (np.concatenate([h.turn_vectors for h in entries]) if entries
                  else np.zeros((0, dim), dtype=np.float32))
        # A turn reported in two events (it moved between two loads) is kept once.
        kept: dict[TurnKey, int] = {}
        for i in sorted(range(len(keys)), key=keys.__getitem__):
            kept.setdefault((keys[i][0], keys[i][2]), i)
        rows = list(kept.values())
        # Events in time order mostly hold their turns in time order too: then every column is taken as it is.
        in_order = rows == list(range(len(keys)))

        def column(parts: Iterable[Sequence[T]]) -> list[T]:
            flat = [value for part in parts for value in part]
            return flat if in_order else [flat[i] for i in rows]

        # The turns column by column (rows in (conversation, time) order); ``turn(row)`` builds one whole.
        self.turn_conversations = column((h.conversation_id,) * h.turn_count for h in entries)
        self.turn_ids = column(h.turn_ids for h in entries)
        self.turn_event_ids = column((h.event_id,) * h.turn_count for h in entries)
        self.turn_texts = column(h.texts for h in entries)
        self.turn_passage_spans = column(h.passage_spans for h in entries)
        self.turn_timestamps = column(h.timestamps for h in entries)
        self.turn_session_ids = column(h.session_ids for h in entries)
        self.turn_matrix = (matrix if in_order else matrix[rows]).reshape(len(rows), dim)
        self.turn_token_counts: list[Mapping[str, int]] = counts if in_order else [counts[i] for i in rows]
        self._turn_lengths = lengths if in_order else lengths[rows]
        self.question_share = shares if in_order else shares[rows]
        self.standing_wish = wishes if in_order else wishes[rows]
        # Length as a ranking feature (ranking_model.py): log of the turn's keyword tokens over log of 4,096 (a turn
        # at the 16 KiB limit holds about 3,000), so a one-line turn is near 0.2 and a long answer near 1.
        self.length_feature = np.log1p(self._turn_lengths) / np.log1p(4096.0)
        self.turn_row: dict[TurnKey, int] = dict(zip(kept, range(len(rows)), strict=True))
        self.turn_event = np.asarray([self.event_row.get(e, -1) for e in self.turn_event_ids], dtype=np.int64)
        self.has_time = np.asarray(column(h.has_time for h in entries), dtype=bool)
        self.turn_speakers = np.asarray(column(h.speakers for h in entries))
        self.speakers = set(self.turn_speakers.tolist())
        # A window is indexed with who said each of its turns: the participants' names match every window alike
        # (engine._search_stems leaves them out of the keyword search for the same reason).
        self.speaker_tokens = frozenset(token for tokens in bm25_tokens(sorted(self.speakers)) for token in tokens)
        # Each row's session as a small integer: a session id is unique only within its conversation.
        session_ids: dict[tuple[str, str | None], int] = {}
        self.session_code = np.asarray([session_ids.setdefault(s, len(session_ids)) for s in zip(
            self.turn_conversations, self.turn_session_ids, strict=True)], dtype=np.int64)
        self.same_session_as_previous = self.session_code[1:] == self.session_code[:-1]
        self._links = {h.event_id: h.links for h in entries}
        # Topic clusters among the candidates, from the events' own cluster_id: the worker re-writes an event
        # whenever reclustering moves it, and the change feed drops the stale entry. A walk can only reach events
        # the view holds, so members outside it do not matter.
        self._clusters: dict[str, list[str]] = {}
        for event_id in sorted(self.events):
            cluster_id = self.events[event_id].cluster_id
            if cluster_id is not None:
                self._clusters.setdefault(cluster_id, []).append(event_id)
        # Keyword hits per query text, filled by the engine: the store searches a query makes once.
        self.keyword_hits: dict[str, list[TurnKey]] = {}
        # The time channel's turns (engine._time_channel), nearest to the question first: one more ranked list.
        self.time_hits: list[TurnKey] = []
        self._window_scores: dict[str, np.ndarray] = {}
        # What each store search of the query returned, per channel (dense, passage, keyword, time, category, wish):
        # (the subgoal searched, or None for a search made once per question; its hits, best first), as they came.
        # Kept by reference for a query's explanation (retrieval/explanation.py); ranking does not read them.
        self.search_hits: dict[str, list[tuple[str | None, Sequence[object]]]] = {}
        # Per query text, the rows found by a later passage of theirs (text/passages.py): rows, the passages'
        # similarities and indexes; and per row the passage closer than the turn's opening to any subgoal, with its
        # similarity: the passage its evidence shows.
        self._passage_rows: dict[str, tuple[np.ndarray, np.ndarray, list[int]]] = {}
        self.closest_passage: dict[int, tuple[float, int]] = {}
        # Rows of the turns labelled with the category a question asks for, and their label score relative to the
        # best one (``label``).
        self.labelled_rows = np.zeros(0, dtype=np.int64)
        self.label_strength = np.zeros(0, dtype=np.float64)
        self._build_windows()

    @property
    def turn_count(self) -> int:
        return len(self.turn_ids)

    @property
    def empty(self) -> bool:
        return not self.turn_ids

    @property
    def conversations(self) -> list[str]:
        return sorted(set(self.turn_conversations))

    def turn(self, row: int) -> HotTurnRow:
        return HotTurnRow(conversation_id=self.turn_conversations[row], turn_id=self.turn_ids[row],
                          event_id=self.turn_event_ids[row], speaker=str(self.turn_speakers[row]),
                          text=self.turn_texts[row], timestamp=self.turn_timestamps[row],
                          session_id=self.turn_session_ids[row], has_time_expression=bool(self.has_time[row]))

    def take_passage_hits(self, text: str, hits: Sequence[TurnHit]) -> None:
        """The passage search's hits for a query text (best first; each turn once, by its best passage)."""
        found = [(self.turn_row[key], hit.score, hit.passage) for hit in hits
                 if (key := (hit.conversation_id, hit.turn_id)) in self.turn_row]
        self._passage_rows[text] = (np.asarray([row for row, _, _ in found], dtype=np.int64),
                                    np.asarray([score for _, score, _ in found], dtype=np.float32),
                                    [index for _, _, index in found])

    def dense_scores(self, text: str, vector: np.ndarray) -> np.ndarray:
        """Every turn's similarity to ``vector`` (a subgoal's, searched for ``text``): its own vector's, or its best
        passage's when the passage search found a closer one."""
        own = self.turn_matrix @ vector
        rows, similarities, indexes = self._passage_rows.get(text, (None, None, []))
        if rows is None or not len(rows):
            return own
        scores = own.copy()
        np.maximum.at(scores, rows, similarities)
        for row, similarity, index in zip(rows.tolist(), similarities.tolist(), indexes, strict=True):
            if similarity > own[row] and similarity > self.closest_passage.get(row, (-np.inf, 0))[0]:
                self.closest_passage[row] = (similarity, index)
        return scores

    def _build_windows(self) -> None:
        """Every run of up to WINDOW_TURNS turns of a session, one starting at each turn: the words of a question
        are often spread over a question turn and its answer."""
        count = self.turn_count
        self.window_count = count
        members = np.minimum(np.arange(count)[:, None] + np.arange(WINDOW_TURNS)[None, :], max(count - 1, 0))
        inside = ((np.arange(count)[:, None] + np.arange(WINDOW_TURNS)[None, :]) < count) & (
            self.session_code[members] == self.session_code[:, None])
        self.window_rows = members[inside]
        self.window_of_row = np.repeat(np.arange(count), inside.sum(axis=1))
        # Per offset k: the windows (by their first row w) that hold row w + k, for window_scores' scatter.
        self._window_starts = [np.nonzero(inside[:, offset])[0] for offset in range(WINDOW_TURNS)]

    def window_scores(self, text: str) -> np.ndarray:
        """Per turn: the best BM25 score of a window that contains it (once per text: a subgoal is scored again
        with its feedback vector)."""
        if text in self._window_scores:
            return self._window_scores[text]
        scores = np.zeros(self.turn_count, dtype=np.float64)
        if not self.empty:
            per_window = window_bm25(text, self.turn_token_counts, self._turn_lengths, self.window_rows,
                                     self.window_of_row, self.window_count, unsearched=self.speaker_tokens)
            # Row r is held by the windows starting at r, r - 1, ...: one column each, then the best (np.maximum.at
            # did the same scatter a few times slower).
            held = np.zeros((self.turn_count, WINDOW_TURNS), dtype=np.float64)
            for offset, starts in enumerate(self._window_starts):
                held[starts + offset, offset] = per_window[starts]
            scores = held.max(axis=1)
        self._window_scores[text] = scores
        return scores

    def scored_windows(self, text: str) -> np.ndarray | None:
        """``window_scores`` of a text already scored, else None (computes nothing)."""
        return self._window_scores.get(text)

    def label(self, scores: Mapping[TurnKey, float]) -> None:
        """Keep the rows of the turns in ``scores`` that the view holds, with their scores."""
        found = [(row, score) for key, score in scores.items() if (row := self.turn_row.get(key)) is not None]
        self.labelled_rows = np.asarray([r for r, _ in found], dtype=np.int64)
        self.label_strength = np.asarray([s for _, s in found], dtype=np.float64)

    def latest_time(self) -> datetime | None:
        return max(self.turn_timestamps, default=None)

    def dated_within(self, spans: Sequence[tuple[date, date]]) -> np.ndarray:
        """Per turn: was it said on a day of ``spans``, or does it name such a day (its resolved time anchors: a
        "yesterday" told a day later counts for the day it names)?"""
        said = np.asarray([t.date().toordinal() for t in self.turn_timestamps], dtype=np.int64)
        hit = np.zeros(self.turn_count, dtype=bool)
        for start, end in spans:
            hit |= (said >= start.toordinal()) & (said <= end.toordinal())
        for event in self.events.values():
            for anchor in event.time_anchors:
                row = self.turn_row.get((event.conversation_id, anchor.turn_id or ""))
                if row is not None and any(anchor.start <= end and start <= anchor.end for start, end in spans):
                    hit[row] = True
        return hit

    def neighbours(self, event_id: str) -> tuple[tuple[str, EdgeFields], ...]:
        """Active relations touching an event, walked in both directions (a cause explains its effect and back)."""
        return self._links.get(event_id, ())

    def cluster_members(self, event_id: str) -> list[str]:
        cluster_id = self.events[event_id].cluster_id if event_id in self.events else None
        return [m for m in self._clusters.get(cluster_id or "", []) if m != event_id]
