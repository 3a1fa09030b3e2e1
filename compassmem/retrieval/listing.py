"""What the memory explorer lists and draws: a tenant's conversations, a conversation's events, its graph.

Plain functions over the stores (no HTTP), so that the explorer's router and a Python facade share them. A
conversation being streamed has one provisional event (its open segment) that only the vector store holds; every
function here merges it with the graph store's events, so a listing shows what memory holds now.

Pages are cursor-paginated by keyset: a cursor holds the sort key of the last item returned (and what was listed, so a
cursor of one listing is refused by another), and the next page starts right after it, whatever was written between
the two calls: nothing is skipped or shown twice, as an offset would. Cursors are signed (HMAC-SHA256) and their key
checked against the listing's types, so a cursor the client wrote or changed is a CursorError, never a store query
over what it made up.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import secrets
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

import networkx as nx

from compassmem.core.contracts.records import (
    ConversationPage,
    ConversationSummary,
    EventPage,
    FieldError,
    GraphCounts,
    GraphEdge,
    GraphLimits,
    GraphNode,
    LimitedConversationGraph,
)
from compassmem.core.errors import BadRequest
from compassmem.core.models import Event, Relation
from compassmem.sinks.factory import Stores
from compassmem.sinks.graph_store import ConversationStats, EventPosition

ConversationOrder = Literal["recent", "id"]
# 2: signed. An unsigned cursor of version 1 is refused like any other made-up one.
_CURSOR_VERSION = 2
_SIGNATURE_BYTES = 16
# Without a configured secret: one made when the process started, so a cursor is good only in this process.
_PROCESS_SECRET = secrets.token_bytes(32)
CursorKey = tuple[float | str, ...]


class CursorError(BadRequest):
    """A cursor this API did not hand out for this listing. ``reason`` is what HTTP reports for the field."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cursor {reason}", errors=[FieldError(field="cursor", message=reason)])
        self.reason = reason


class CursorSigner:
    """Makes the listings' cursors and reads them back: base64url JSON of the listing and the last key, then '.' and
    an HMAC-SHA256 of it. ``secret`` is ``COMPASSMEM_CURSOR_SECRET``: processes that share it (API replicas, a
    restart) read each other's cursors; without one, the process's own random secret."""

    def __init__(self, secret: str | None = None) -> None:
        self._key = hashlib.sha256(secret.encode("utf-8")).digest() if secret else _PROCESS_SECRET
        self._shared = secret is not None

    def encode(self, listing: str, key: CursorKey) -> str:
        raw = json.dumps({"v": _CURSOR_VERSION, "l": listing, "k": list(key)}, separators=(",", ":"))
        payload = base64.urlsafe_b64encode(raw.encode("utf-8")).decode().rstrip("=")
        return f"{payload}.{self._signature(payload)}"

    def decode(self, listing: str, cursor: str, shape: tuple[type[float] | type[str], ...]) -> CursorKey:
        """The key a cursor of ``listing`` holds, of the types of ``shape``; CursorError for anything else."""
        payload, dot, signature = cursor.rpartition(".")
        if not dot or not hmac.compare_digest(signature, self._signature(payload)):
            raise CursorError(self._unsigned_reason())
        try:
            raw = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (binascii.Error, ValueError) as error:  # signed, so only a change of secret format could get here
            raise CursorError("cannot be read: pass the next_cursor of the previous page unchanged") from error
        if not isinstance(raw, dict) or raw.get("v") != _CURSOR_VERSION or raw.get("l") != listing:
            raise CursorError("belongs to another listing (another order, search, tenant or conversation): pass the "
                              "next_cursor of the previous page of this one")
        return _typed_key(raw.get("k"), shape)

    def _signature(self, payload: str) -> str:
        digest = hmac.new(self._key, payload.encode("utf-8"), hashlib.sha256).digest()[:_SIGNATURE_BYTES]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def _unsigned_reason(self) -> str:
        where = ("the servers share COMPASSMEM_CURSOR_SECRET, so it was changed or made up" if self._shared else
                 "without COMPASSMEM_CURSOR_SECRET a cursor is good only in the process that made it, not after a "
                 "restart or on another API replica")
        return f"is not one this server handed out: pass the next_cursor of the previous page unchanged ({where})"


def _typed_key(key: object, shape: tuple[type[float] | type[str], ...]) -> CursorKey:
    """A signed key is the server's own; checked all the same, so that a leaked secret or a bug cannot send the
    stores a value of another type."""
    if not isinstance(key, list) or len(key) != len(shape):
        raise CursorError("does not hold a position of this listing")
    typed: list[float | str] = []
    for value, kind in zip(key, shape, strict=True):
        if kind is str and isinstance(value, str):
            typed.append(value)
        elif kind is float and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            typed.append(float(value))
        else:
            raise CursorError("does not hold a position of this listing")
    return tuple(typed)


PROCESS_CURSORS = CursorSigner()


# -- conversions to the HTTP records ---------------------------------------------------------------------------


def node_of_event(event: Event) -> GraphNode:
    """An event (from the vector store or the change feed) as the graph store's node of it reads."""
    return GraphNode.of(event.event_id, _event_attributes(event))


def _event_attributes(event: Event) -> dict[str, Any]:
    """The node attributes ``GraphStore.conversation_graph`` gives an event, for one it does not hold."""
    return {"kind": "event", "stub": False, "summary": event.summary, "participants": event.participants,
            "turn_ids": event.turn_ids, "session_ids": event.session_ids, "start": event.temporal_info.start,
            "end": event.temporal_info.end, "time_anchors": event.time_anchors, "cluster_id": event.cluster_id,
            "provisional": event.provisional}


def edge_of_relation(relation: Relation) -> GraphEdge:
    return GraphEdge(id=relation.relation_id, source=relation.source, target=relation.target,
                     type=relation.type.value, subtype=relation.subtype, confidence=relation.confidence,
                     evidence=relation.evidence, created_at=relation.created_at,
                     superseded=relation.superseded_by is not None, superseded_by=relation.superseded_by)


# -- conversations -----------------------------------------------------------------------------------------------


def list_conversations(stores: Stores, tenant: str, *, query: str | None = None, limit: int = 50,
                       cursor: str | None = None, order: ConversationOrder = "recent",
                       cursors: CursorSigner = PROCESS_CURSORS) -> ConversationPage:
    """One page of the tenant's conversations, most recently updated first (``order="recent"``) or by id; with
    ``query``, those with an event whose conversation id, subject, summary or a participant contains it
    (case-insensitive). CursorError for a cursor that is not this listing's."""
    listing = f"conversations:{tenant}:{order}:{query or ''}"
    after = cursors.decode(listing, cursor, _ORDER_SHAPES[order]) if cursor else None
    open_events = stores.open_events(tenant)
    summaries = _summaries(stores.graph.conversation_stats(tenant, query or None), open_events, query)
    key = _ORDER_KEYS[order]
    ranked = sorted(summaries, key=key)
    remaining = [s for s in ranked if after is None or key(s) > after]
    page = remaining[:limit]
    more = len(remaining) > limit
    return ConversationPage(tenant=tenant, conversations=page, total=len(ranked),
                            next_cursor=cursors.encode(listing, key(page[-1])) if more else None)


def _recent_first(summary: ConversationSummary) -> tuple[float, str]:
    return (-summary.last_at.timestamp() if summary.last_at else 0.0, summary.conversation_id)


def _by_id(summary: ConversationSummary) -> tuple[str]:
    return (summary.conversation_id,)


_ORDER_KEYS: dict[str, Callable[[ConversationSummary], CursorKey]] = {"recent": _recent_first, "id": _by_id}
_ORDER_SHAPES: dict[str, tuple[type[float] | type[str], ...]] = {"recent": (float, str), "id": (str,)}


def _summaries(stats: list[ConversationStats], open_events: list[Event],
               query: str | None) -> list[ConversationSummary]:
    """The graph store's closed events per conversation plus its open segments; a conversation that has only an open
    segment so far is listed too (when it matches the search)."""
    opened: dict[str, list[Event]] = defaultdict(list)
    for event in open_events:
        opened[event.conversation_id].append(event)
    found = {s.conversation_id: s for s in stats}
    for conversation_id, events in opened.items():
        if conversation_id not in found and (not query or any(_matches(e, query) for e in events)):
            found[conversation_id] = ConversationStats(conversation_id, 0, 0, None, None, (), ())
    return [_summary(found[c], opened.get(c, [])) for c in found]


def _matches(event: Event, query: str) -> bool:
    """The graph store's search (``GraphStore.conversation_stats``) applied to an open segment."""
    needle = query.lower()
    fields = [event.conversation_id, event.subject_id or "", event.summary, *event.participants]
    return any(needle in field.lower() for field in fields)


def _summary(stats: ConversationStats, open_events: list[Event]) -> ConversationSummary:
    starts = [t for t in (stats.first_at, *(e.temporal_info.start for e in open_events)) if t is not None]
    ends = [t for t in (stats.last_at, *(e.temporal_info.end for e in open_events)) if t is not None]
    return ConversationSummary(
        conversation_id=stats.conversation_id, events=stats.events + len(open_events),
        provisional_events=len(open_events), turns=stats.turns + sum(len(e.observations) for e in open_events),
        first_at=min(starts, default=None), last_at=max(ends, default=None),
        subject_ids=sorted({*stats.subject_ids, *(e.subject_id for e in open_events if e.subject_id)}),
        participants=sorted({*stats.participants, *(p for e in open_events for p in e.participants)}),
    )


# -- events of a conversation ----------------------------------------------------------------------------------


def list_events(stores: Stores, tenant: str, conversation_id: str, *, limit: int = 50, cursor: str | None = None,
                cursors: CursorSigner = PROCESS_CURSORS) -> EventPage:
    """One page of a conversation's events in time order (start, then id), its open segment included."""
    listing = f"events:{tenant}/{conversation_id}"
    after = EventPosition(*cursors.decode(listing, cursor, (float, str))) if cursor else None
    # One more than a page from the graph store tells whether another page follows.
    stored = [GraphNode.of(props["event_id"], props)
              for props in stores.graph.event_page(tenant, conversation_id, after, limit + 1)]
    opened = [node_of_event(e) for e in stores.open_events(tenant, conversation_id)]
    merged = sorted([*stored, *(n for n in opened if after is None or _position(n) > after)], key=_position)
    page = merged[:limit]
    more = len(merged) > limit
    return EventPage(tenant=tenant, conversation_id=conversation_id, events=page,
                     next_cursor=cursors.encode(listing, _position(page[-1])) if more else None)


def _position(node: GraphNode) -> EventPosition:
    return EventPosition(node.start.timestamp() if node.start else 0.0, node.id)


# -- the graph of a conversation -------------------------------------------------------------------------------


def conversation_graph(stores: Stores, tenant: str, conversation_id: str, *, max_nodes: int | None = None,
                       since: datetime | None = None) -> LimitedConversationGraph | None:
    """The conversation's events (its open segment included), topics and relations, superseded ones too; with
    ``max_nodes`` only the most recent events, with ``since`` only those that end at or after it (relations and
    topics then only between and of the events kept). None when the conversation has no memory at all."""
    graph = stores.graph.conversation_graph(tenant, conversation_id, since=since, max_events=max_nodes)
    opened = stores.open_events(tenant, conversation_id)
    total = int(graph.graph["events_total"]) + len(opened)
    if total == 0 and graph.number_of_nodes() == 0:
        return None
    for event in opened:
        if since is None or event.temporal_info.end >= since:
            graph.add_node(event.event_id, **_event_attributes(event))
    if max_nodes is not None:
        _keep_most_recent(graph, max_nodes)
    nodes = [GraphNode.of(node_id, data) for node_id, data in graph.nodes(data=True)]
    edges = [edge_of_relation(Relation.model_validate(data)) for _, _, data in graph.edges(data=True)]
    events = sum(1 for n in nodes if n.kind == "event" and not n.stub)
    counts = GraphCounts(events=events, stubs=sum(1 for n in nodes if n.stub),
                         clusters=sum(1 for n in nodes if n.kind == "cluster"), relations=len(edges),
                         superseded_relations=sum(1 for e in edges if e.superseded))
    limits = GraphLimits(max_nodes=max_nodes, since=since, events_total=total, events_omitted=max(0, total - events))
    return LimitedConversationGraph(tenant=tenant, conversation_id=conversation_id, nodes=nodes, edges=edges,
                                    counts=counts, limits=limits)


def _keep_most_recent(graph: nx.MultiDiGraph, max_nodes: int) -> None:
    """The graph store kept ``max_nodes`` events; with the open segments added there may be more: drop the oldest,
    and topics left without a member."""
    events = sorted((n for n, d in graph.nodes(data=True) if d["kind"] == "event"),
                    key=lambda n: (graph.nodes[n]["start"].timestamp(), n), reverse=True)
    dropped = set(events[max_nodes:])
    graph.remove_nodes_from(dropped)
    for node_id, data in list(graph.nodes(data=True)):
        if data["kind"] == "cluster":
            data["members"] = [m for m in data["members"] if m not in dropped]
            if not data["members"]:
                graph.remove_node(node_id)
