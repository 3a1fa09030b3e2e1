"""Incremental indexes over one conversation's events, so the write path costs the same at turn 10,000 as at 100.

The events in creation order (the chronology relation extraction relies on), an appended matrix of their
embeddings (grown by doubling, a row rewritten in place when a merge moves an event's embedding), and inverted
indexes from entity, participant set and session to the rows that hold them. Everything here is derived from
the events: it is never stored, and a restored memory rebuilds it.

The searches give exactly what a scan of the events in order gives: the same rows, in the same order, as float32
(a matrix of the searched rows is handed to the same product, so every cosine is bit-identical).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

import numpy as np

from compassmem.models import Event


def _remove(rows: list[int], row: int) -> None:
    at = bisect_left(rows, row)
    if at < len(rows) and rows[at] == row:
        del rows[at]


def _contains(rows: list[int], row: int) -> bool:
    at = bisect_left(rows, row)
    return at < len(rows) and rows[at] == row


class EventIndex:
    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._events: list[Event] = []
        self._rows: dict[str, int] = {}
        self._width: int | None = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        # Rows whose embedding is missing or of another width than the first: the searches then fall back to
        # the plain scans (the matrix cannot hold them), as the code before this index did.
        self._irregular: set[int] = set()
        self._entities: dict[str, list[int]] = {}
        self._participants: dict[tuple[str, ...], list[int]] = {}
        self._sessions: dict[str, list[int]] = {}
        for event in events:
            self.put(event)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def events(self) -> list[Event]:
        """The current version of every event, in creation order (do not modify)."""
        return self._events

    @property
    def regular(self) -> bool:
        """Every event has an embedding, all of one width: the matrix holds them all."""
        return not self._irregular

    def row_of(self, event_id: str) -> int | None:
        return self._rows.get(event_id)

    def last(self) -> Event | None:
        return self._events[-1] if self._events else None

    def put(self, event: Event) -> None:
        """Add a new event at the end, or replace an event's current version in its row."""
        row = self._rows.get(event.event_id)
        if row is None:
            row = len(self._events)
            self._rows[event.event_id] = row
            self._events.append(event)
            old: Event | None = None
        else:
            old = self._events[row]
            self._events[row] = event
        self._put_vector(row, event.embedding)
        self._reindex(self._entities, row, old.entities if old else (), event.entities)
        self._reindex(self._participants, row, [tuple(old.participants)] if old else (), [tuple(event.participants)])
        self._reindex(self._sessions, row, old.session_ids if old else (), event.session_ids)

    @staticmethod
    def _reindex(index: dict, row: int, before: Iterable, after: Iterable) -> None:  # noqa: ANN001 - keys vary
        before, after = set(before), set(after)
        for key in before - after:
            _remove(index[key], row)
        for key in after - before:
            rows = index.setdefault(key, [])
            if not rows or rows[-1] < row:
                rows.append(row)
            else:
                insort(rows, row)

    def _put_vector(self, row: int, embedding: list[float] | None) -> None:
        if embedding and self._width is None:
            self._width = len(embedding)
            self._matrix = np.zeros((max(16, 2 * len(self._events)), self._width), dtype=np.float32)
        if not embedding or len(embedding) != self._width:
            self._irregular.add(row)
            return
        if row >= self._matrix.shape[0]:
            grown = np.zeros((max(16, 2 * self._matrix.shape[0], row + 1), self._width), dtype=np.float32)
            grown[: self._matrix.shape[0]] = self._matrix
            self._matrix = grown
        self._matrix[row] = np.asarray(embedding, dtype=np.float32)
        self._irregular.discard(row)

    # Searches -----------------------------------------------------------------------------------------------

    def scores(self, rows: np.ndarray | slice, vector: np.ndarray) -> np.ndarray:
        """``matrix_of(rows) @ vector``: the product a matrix built from those events' embeddings gives."""
        return self._matrix[rows] @ vector

    def earlier_rows(self, event_id: str) -> tuple[int, int | None]:
        """How many other events the history holds (the "earlier" events), and the event's own row (None if new)."""
        own = self._rows.get(event_id)
        return len(self._events) - (own is not None), own

    def earlier_tail(self, own: int | None, count: int) -> list[Event]:
        """The last ``count`` events other than the one at row ``own``, in creation order."""
        if count <= 0:
            return []
        tail = self._events[-(count + 1):]
        start = len(self._events) - len(tail)
        kept = [event for offset, event in enumerate(tail) if start + offset != own]
        return kept[-count:]

    def rows_naming(self, entity: str) -> list[int]:
        return self._entities.get(entity, [])

    def rows_with_participants(self, participants: list[str]) -> list[int]:
        return self._participants.get(tuple(participants), [])

    def rows_in_session(self, session_id: str) -> list[int]:
        return self._sessions.get(session_id, [])

    @staticmethod
    def count_except(rows: list[int], own: int | None) -> int:
        return len(rows) - (own is not None and _contains(rows, own))

    @staticmethod
    def latest_except(rows: list[int], own: int | None) -> int | None:
        for row in reversed(rows[-2:]):
            if row != own:
                return row
        return None
