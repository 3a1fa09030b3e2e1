"""Removing part of a memory from the stores: one turn (a redaction: its point goes, and the event that held it
is rebuilt from its other turns), or a whole tenant.

One implementation for every path that redacts: the HTTP API and ``Memory.redact_turn`` (at once), the worker's
control agent (at once, like a forget's delete) and the worker's turns agent at the redaction marker's position
in the turns log (``streams/processor.py``), which also takes the turn out of the conversation's table state so
that nothing the worker writes later carries it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from compassmem.models import Event
from compassmem.processors.event_frames import without_turn
from compassmem.sinks.batching import event_keyword_vector
from compassmem.sinks.factory import Stores

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class StoredRedaction:
    """What a redaction changed in the stores: the event that held the turn, rebuilt (None: deleted, the turn was
    its last)."""

    event_id: str
    event: Event | None


def redact_stored_turn(stores: Stores, tenant: str, conversation_id: str, turn_id: str) -> StoredRedaction | None:
    """Delete the turn's point and rewrite (or delete) its event in both stores; None when no store holds the turn.

    Idempotent: a second call finds no turn. The event's vector is the mean of its remaining turns' own vectors,
    as a segment's centroid is, so nothing is embedded again and no trace of the redacted text stays in it."""
    turn = stores.vectors.get_turn(tenant, conversation_id, turn_id)
    if turn is None:
        return None
    found = stores.vectors.get_events(tenant, [turn.event_id])
    others = [t for t in stores.vectors.turns_of_events(tenant, [turn.event_id]) if t.turn_id != turn_id]
    event = without_turn(found[0], turn_id, [t.embedding for t in others if t.embedding]) if found else None
    stores.vectors.delete_turn(tenant, conversation_id, turn_id)
    if event is None:
        # Its relations go with it (the graph store detaches them).
        stores.vectors.delete_events(tenant, [turn.event_id])
        stores.graph.delete_events(tenant, conversation_id, [turn.event_id])
    else:
        stores.vectors.upsert_events([event], [event_keyword_vector(event)])
        stores.graph.upsert_events([event])
    stores.vectors.flush()
    log.info("redaction.turn_redacted", tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
             event_id=turn.event_id, event_deleted=event is None)
    return StoredRedaction(event_id=turn.event_id, event=event)


def delete_stored_tenant(stores: Stores, tenant: str) -> int:
    """Delete every conversation of a tenant from both stores; the number of events the vector store held."""
    events = stores.vectors.count(tenant)
    stores.vectors.delete_tenant(tenant)
    stores.graph.delete_tenant(tenant)
    log.info("redaction.tenant_deleted", tenant=tenant, events=events)
    return events
