"""How an Event is laid out as a Qdrant point; both vector backends use this one mapping.

The payload is the event without its embedding (datetimes and dates as ISO strings), plus a few derived,
filterable fields. Tenant and conversation_id stay top-level keyword fields: every query filters on them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from compassmem.models import Event
from compassmem.sinks.vector_store import SparseVector

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "keywords"
TENANT_FIELD = "tenant"
CONVERSATION_FIELD = "conversation_id"

# Derived from the event for filtering (e.g. "which event holds turn D3:5", time ranges); dropped on the way back.
DERIVED_FIELDS = ("turn_ids", "session_ids", "start_ts", "end_ts")

_POINT_NAMESPACE = uuid.UUID("3f0c2a9e-6a53-4d0f-9a51-6c1d3b1f7e42")


def point_id(event_id: str) -> str:
    """The Qdrant point id of an event: the event id itself when it is a UUID (the pipeline's ids are).

    Any other string maps to a stable UUID, because Qdrant accepts only UUIDs and unsigned integers.
    """
    try:
        return str(uuid.UUID(event_id))
    except ValueError:
        return str(uuid.uuid5(_POINT_NAMESPACE, event_id))


def event_to_payload(event: Event) -> dict[str, Any]:
    payload = event.model_dump(mode="json", exclude={"embedding"})
    payload["turn_ids"] = event.turn_ids
    payload["session_ids"] = event.session_ids
    payload["start_ts"] = event.temporal_info.start.timestamp()
    payload["end_ts"] = event.temporal_info.end.timestamp()
    return payload


def event_from_payload(payload: dict[str, Any], embedding: list[float] | None = None) -> Event:
    fields = {key: value for key, value in payload.items() if key not in DERIVED_FIELDS}
    fields["embedding"] = embedding
    return Event.model_validate(fields)


def dense_of(vector: Any) -> list[float] | None:
    """The dense part of a returned point's vectors (named-vector dict), if it was requested."""
    if isinstance(vector, dict):
        dense = vector.get(DENSE_VECTOR)
        return [float(x) for x in dense] if dense is not None else None
    return None


def check_upsert_batch(events: Sequence[Event], sparse: Sequence[SparseVector], dim: int) -> None:
    """Reject a malformed batch before any of it is written, with a message naming the event."""
    if len(events) != len(sparse):
        raise ValueError(f"got {len(events)} events but {len(sparse)} sparse vectors; they pair up by position")
    for event in events:
        if event.embedding is None:
            raise ValueError(f"event {event.event_id} has no embedding; embed it before storing it")
        if len(event.embedding) != dim:
            raise ValueError(
                f"event {event.event_id} has a {len(event.embedding)}-d embedding; the store holds {dim}-d vectors"
            )
    for vector in sparse:
        if len(vector.indices) != len(vector.values):
            raise ValueError("a sparse vector needs as many values as indices")


def in_requested_order(events: Sequence[Event], event_ids: Sequence[str]) -> list[Event]:
    """Events in the order their ids were asked for (engines return them in id order)."""
    by_id = {event.event_id: event for event in events}
    seen: set[str] = set()
    ordered: list[Event] = []
    for event_id in event_ids:
        if event_id in by_id and event_id not in seen:
            seen.add(event_id)
            ordered.append(by_id[event_id])
    return ordered


def in_time_order(events: Sequence[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (e.temporal_info.start, e.temporal_info.end, e.event_id))
