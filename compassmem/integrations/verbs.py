"""The verbs the framework adapters use, which ``Memory`` and ``Client`` both have, and the turn reads built on them.

A turn is read back through its conversation's events (``events`` lists them with their turn ids, ``event`` gives
one with its observations): neither surface has a verb for one turn, and these two answer the same in-process and
over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel

from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.contracts.records import (
    ConversationPage,
    DeleteResult,
    EventOut,
    EventPage,
    GraphNode,
    RedactResult,
)
from compassmem.core.errors import NotFound
from compassmem.core.models import Turn

# Events and conversations asked for per page while walking a listing.
PAGE = 100


class MemoryVerbs(Protocol):
    """What ``compassmem.Memory`` and ``compassmem.Client`` share, as the adapters call it."""

    def add(self, turns: Sequence[Turn]) -> object: ...

    def query(self, request: QueryRequest) -> QueryResponse: ...

    def conversations(self, *, tenant: str, limit: int, cursor: str | None) -> ConversationPage: ...

    def events(self, conversation_id: str, *, tenant: str, limit: int, cursor: str | None) -> EventPage: ...

    def event(self, event_id: str, *, tenant: str) -> EventOut: ...

    def forget(self, conversation_id: str, *, tenant: str) -> DeleteResult: ...

    def redact_turn(self, conversation_id: str, turn_id: str, *, tenant: str) -> RedactResult: ...


class StoredTurn(BaseModel):
    """A turn as memory holds it, with the event it belongs to."""

    tenant: str
    conversation_id: str
    subject_id: str | None
    event_id: str
    turn_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None = None


def conversation_ids(memory: MemoryVerbs, tenant: str) -> Iterator[tuple[str, list[str]]]:
    """Every conversation of the tenant with its subject ids, page by page."""
    cursor: str | None = None
    while True:
        page = memory.conversations(tenant=tenant, limit=PAGE, cursor=cursor)
        for summary in page.conversations:
            yield summary.conversation_id, summary.subject_ids
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def event_nodes(memory: MemoryVerbs, tenant: str, conversation_id: str) -> Iterator[GraphNode]:
    """The conversation's events in time order; none when it has no memory."""
    cursor: str | None = None
    while True:
        try:
            page = memory.events(conversation_id, tenant=tenant, limit=PAGE, cursor=cursor)
        except NotFound:
            return
        yield from page.events
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def event_turns(memory: MemoryVerbs, tenant: str, event_id: str) -> list[StoredTurn]:
    """The turns of one event; none when it is gone (deleted between the listing and this read)."""
    try:
        event = memory.event(event_id, tenant=tenant)
    except NotFound:
        return []
    return [StoredTurn(tenant=tenant, conversation_id=event.conversation_id, subject_id=event.subject_id,
                       event_id=event.event_id, turn_id=o.turn_id, speaker=o.speaker, text=o.text,
                       timestamp=o.timestamp, session_id=o.session_id) for o in event.observations]


def conversation_turns(memory: MemoryVerbs, tenant: str, conversation_id: str) -> list[StoredTurn]:
    """The conversation's turns in the order they were said (by timestamp; ties keep the events' order)."""
    seen: set[str] = set()
    turns = []
    for node in event_nodes(memory, tenant, conversation_id):
        for turn in event_turns(memory, tenant, node.id):
            if turn.turn_id not in seen:
                seen.add(turn.turn_id)
                turns.append(turn)
    return sorted(turns, key=lambda turn: turn.timestamp)


def find_turn(memory: MemoryVerbs, tenant: str, conversation_id: str, turn_id: str) -> StoredTurn | None:
    """One turn of the conversation by its id, or None."""
    for node in event_nodes(memory, tenant, conversation_id):
        if turn_id in node.turn_ids:
            return next((turn for turn in event_turns(memory, tenant, node.id) if turn.turn_id == turn_id), None)
    return None


def stored_turn_ids(memory: MemoryVerbs, tenant: str, conversation_id: str) -> set[str]:
    """The ids of the turns the conversation holds."""
    return {turn_id for node in event_nodes(memory, tenant, conversation_id) for turn_id in node.turn_ids}
