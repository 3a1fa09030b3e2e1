"""Incremental indexes over a conversation's hot window of events, so the write path costs the same at turn 10,000
as at 100.

The events in creation order (the chronology relation extraction relies on), an appended matrix of their
embeddings (grown by doubling, a row rewritten in place when a merge moves an event's embedding), and inverted
indexes from entity, participant set and session to the rows that hold them. The oldest event leaves with
``evict_oldest``: its slots are only marked dead, and the storage is compacted once the dead rows are as many
as the live ones, so an eviction costs O(1) amortised instead of a copy of the matrix. Rows are numbered from
the oldest live event (row 0), whatever has been evicted before it. Everything here is derived from the events:
it is never stored, and a restored memory rebuilds it.

The searches give exactly what a scan of the events in order gives: the same rows, in the same order, as float32
(a matrix of the searched rows is handed to the same product, so every cosine is bit-identical).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable

import numpy as np

from compassmem.core.models import Event


def _remove(rows: list[int], row: int) -> None:
    at = bisect_left(rows, row)
    if at < len(rows) and rows[at] == row:
        del rows[at]


def _contains(rows: list[int], row: int) -> bool:
    at = bisect_left(rows, row)
    return at < len(rows) and rows[at] == row


class EventIndex:
    def __init__(self, events: Iterable[Event] = ()) -> None:
        # Storage slots: ``_events``, the matrix rows, ``_rows`` and the inverted indexes are numbered by slot.
        # Slots before ``_start`` belong to evicted events (None); slot ``_start + r`` holds row r.
        self._events: list[Event | None] = []
        self._start = 0
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
        return len(self._events) - self._start

    @property
    def events(self) -> list[Event]:
        """The current version of every event in the index, in creation order (do not modify)."""
        return self._events[self._start:] if self._start else self._events  # type: ignore[return-value]

    @property
    def regular(self) -> bool:
        """Every event has an embedding, all of one width: the matrix holds them all."""
        return not self._irregular

    def row_of(self, event_id: str) -> int | None:
        slot = self._rows.get(event_id)
        return None if slot is None else slot - self._start

    def event_at(self, row: int) -> Event:
        return self._events[self._start + row]  # type: ignore[return-value]

    def last(self) -> Event | None:
        return self._events[-1] if len(self) else None

    def put(self, event: Event) -> None:
        """Add a new event at the end, or replace an event's current version in its row."""
        slot = self._rows.get(event.event_id)
        if slot is None:
            slot = len(self._events)
            self._rows[event.event_id] = slot
            self._events.append(event)
            old: Event | None = None
        else:
            old = self._events[slot]
            self._events[slot] = event
        self._put_vector(slot, event.embedding)
        self._reindex(self._entities, slot, old.entities if old else (), event.entities)
        self._reindex(self._participants, slot, [tuple(old.participants)] if old else (), [tuple(event.participants)])
        self._reindex(self._sessions, slot, old.session_ids if old else (), event.session_ids)

    def evict_oldest(self) -> Event:
        """Take the oldest event out of the index (the hot window moved past it) and return it."""
        slot = self._start
        event = self._events[slot]
        if event is None:
            raise IndexError("evict_oldest on an empty index")
        self._events[slot] = None
        del self._rows[event.event_id]
        self._irregular.discard(slot)
        for index, keys in ((self._entities, event.entities), (self._participants, [tuple(event.participants)]),
                            (self._sessions, event.session_ids)):
            for key in set(keys):
                _remove(index[key], slot)  # the first entry: the oldest live slot
                if not index[key]:  # keys of evicted events only would otherwise pile up
                    del index[key]
        self._start += 1
        if self._start >= max(16, len(self)):
            self._compact()
        return event

    def _compact(self) -> None:
        """Drop the dead slots: every slot number moves down by ``_start`` (O(live), once per as many evictions)."""
        shift, live = self._start, len(self)
        self._events = self._events[shift:]
        if self._width is not None:
            self._matrix[:live] = self._matrix[shift : shift + live]
        self._rows = {event_id: slot - shift for event_id, slot in self._rows.items()}
        self._irregular = {slot - shift for slot in self._irregular}
        for index in (self._entities, self._participants, self._sessions):
            for key, rows in index.items():
                index[key] = [slot - shift for slot in rows]
        self._start = 0

    def _rows_of(self, slots: list[int]) -> list[int]:
        return [slot - self._start for slot in slots] if self._start else slots

    @staticmethod
    def _reindex(index: dict, slot: int, before: Iterable, after: Iterable) -> None:  # noqa: ANN001 - keys vary
        before, after = set(before), set(after)
        for key in before - after:
            _remove(index[key], slot)
            if not index[key]:
                del index[key]
        for key in after - before:
            rows = index.setdefault(key, [])
            if not rows or rows[-1] < slot:
                rows.append(slot)
            else:
                insort(rows, slot)

    def _put_vector(self, slot: int, embedding: list[float] | None) -> None:
        if embedding and self._width is None:
            self._width = len(embedding)
            self._matrix = np.zeros((max(16, 2 * len(self._events)), self._width), dtype=np.float32)
        if not embedding or len(embedding) != self._width:
            self._irregular.add(slot)
            return
        if slot >= self._matrix.shape[0]:
            grown = np.zeros((max(16, 2 * self._matrix.shape[0], slot + 1), self._width), dtype=np.float32)
            grown[: self._matrix.shape[0]] = self._matrix
            self._matrix = grown
        self._matrix[slot] = np.asarray(embedding, dtype=np.float32)
        self._irregular.discard(slot)

    # Searches (rows: 0 is the oldest event in the index) --------------------------------------------------------

    def scores(self, rows: np.ndarray | slice, vector: np.ndarray) -> np.ndarray:
        """``matrix_of(rows) @ vector``: the product a matrix built from those events' embeddings gives."""
        return self._matrix[self._start : len(self._events)][rows] @ vector

    def earlier_rows(self, event_id: str) -> tuple[int, int | None]:
        """How many other events the history holds (the "earlier" events), and the event's own row (None if new)."""
        own = self.row_of(event_id)
        return len(self) - (own is not None), own

    def earlier_tail(self, own: int | None, count: int) -> list[Event]:
        """The last ``count`` events other than the one at row ``own``, in creation order."""
        if count <= 0:
            return []
        first = max(0, len(self) - count - 1)
        tail = self._events[self._start + first:]
        kept = [event for offset, event in enumerate(tail) if first + offset != own]
        return kept[-count:]  # type: ignore[return-value]

    def rows_naming(self, entity: str) -> list[int]:
        return self._rows_of(self._entities.get(entity, []))

    def rows_with_participants(self, participants: list[str]) -> list[int]:
        return self._rows_of(self._participants.get(tuple(participants), []))

    def rows_in_session(self, session_id: str) -> list[int]:
        return self._rows_of(self._sessions.get(session_id, []))

    @staticmethod
    def count_except(rows: list[int], own: int | None) -> int:
        return len(rows) - (own is not None and _contains(rows, own))

    @staticmethod
    def latest_except(rows: list[int], own: int | None) -> int | None:
        for row in reversed(rows[-2:]):
            if row != own:
                return row
        return None
