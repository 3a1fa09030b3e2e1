"""Removing part of a memory from the stores: one turn (a redaction: its point goes, and the event that held it
is rebuilt from its other turns), or a whole tenant.

One implementation for every path that redacts: the HTTP API and ``Memory.redact_turn`` (at once), the worker's
control agent (at once, like a forget's delete) and the worker's turns agent at the redaction marker's position
in the turns log (``streams/processor.py``), which also takes the turn out of the conversation's table state so
that nothing the worker writes later carries it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import structlog

from compassmem.core.models import Cluster, Event, Relation
from compassmem.processors.clustering import cluster_label
from compassmem.processors.event_frames import without_turn
from compassmem.processors.relations import rests_on_turn
from compassmem.sinks.batching import event_keyword_vector
from compassmem.sinks.factory import Stores

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class StoredRedaction:
    """What a redaction changed in the stores: the event that held the turn (``before``), rebuilt (``event``;
    None: deleted, the turn was its last), the relations deleted with the turn (every relation of a deleted event;
    of a rebuilt one, those that rest on the turn: ``rests_on_turn``) and the topic clusters relabelled."""

    event_id: str
    before: Event | None
    event: Event | None
    relations: list[Relation]
    clusters: list[Cluster]


def redact_stored_turn(stores: Stores, tenant: str, conversation_id: str, turn_id: str,
                       held: Event | None = None) -> StoredRedaction | None:
    """Delete the turn's point, rewrite (or delete) its event in both stores, and take every copy of the turn's
    words out of the graph: the relations that quote it and its keywords in its topic's label. None when no store
    holds the turn (and ``held`` is None).

    ``held``: the event that has the turn as a conversation memory holds it (the worker at a redaction marker). The
    stores may be redacted already by then (the control agent or the API does it at once) and a batch since may
    have written the event back with the turn from that memory, so the event is rebuilt from this copy whether
    the turn's point is there or not.

    Idempotent: a second call finds no turn. The event's vector is the mean of its remaining turns' own vectors,
    as a segment's centroid is, so nothing is embedded again and no trace of the redacted text stays in it."""
    turn = stores.vectors.get_turn(tenant, conversation_id, turn_id)
    if turn is None and held is None:
        return None
    event_id = held.event_id if held is not None else turn.event_id
    before = held if held is not None else next(iter(stores.vectors.get_events(tenant, [event_id])), None)
    others = [t for t in stores.vectors.turns_of_events(tenant, [event_id]) if t.turn_id != turn_id]
    event = without_turn(before, turn_id, [t.embedding for t in others if t.embedding]) if before else None
    removed = next((o for o in before.observations if o.turn_id == turn_id), None) if before else None
    graph = stores.graph.conversation_graph(tenant, conversation_id)
    # Superseded relations too: they are history, but their evidence is as much a copy of the turn's words.
    touching = [Relation.model_validate(data) for _, _, data in graph.edges(data=True)
                if event_id in (data["source"], data["target"])]
    relations = touching if event is None else [r for r in touching
                                                if removed is not None and rests_on_turn(r, removed, event)]
    stores.vectors.delete_turn(tenant, conversation_id, turn_id)
    if event is None:
        # Its relations go with it (the graph store detaches them).
        stores.vectors.delete_events(tenant, [event_id])
        stores.graph.delete_events(tenant, conversation_id, [event_id])
    else:
        stores.vectors.upsert_events([event], [event_keyword_vector(event)])
        if not event.provisional:
            # An open segment lives in the vector store alone until it closes: a graph node of it would be listed
            # beside the provisional event (twice, and its turns counted twice).
            stores.graph.upsert_events([event])
        stores.graph.delete_relations(tenant, [r.relation_id for r in relations])
    clusters = _relabelled(graph, before, event) if before is not None else []
    stores.graph.upsert_clusters(clusters)
    stores.vectors.flush()
    log.info("redaction.turn_redacted", tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
             event_id=event_id, event_deleted=event is None, relations_deleted=len(relations))
    return StoredRedaction(event_id=event_id, before=before, event=event, relations=relations, clusters=clusters)


def _relabelled(graph: nx.MultiDiGraph, before: Event, event: Event | None) -> list[Cluster]:
    """The event's topic cluster with its label taken anew from its members' keywords as they are now (the event
    rebuilt, or gone): a label is made of member keywords, and some may have been the redacted turn's words."""
    node = graph.nodes.get(before.cluster_id) if before.cluster_id is not None else None
    if node is None or node.get("kind") != "cluster" or node.get("centroid") is None:
        return []
    members = [m for m in node["members"] if m != before.event_id or event is not None]
    # The conversation's events as they are now (the label weighs the members' terms against theirs).
    events = {n: data for n, data in graph.nodes(data=True) if data.get("kind") == "event" and not data.get("stub")}
    events.pop(before.event_id, None)
    if event is not None:
        events[event.event_id] = {"keywords": event.keywords, "participants": event.participants}
    label = cluster_label([events.get(m, {}).get("keywords") or [] for m in members],
                          [e.get("keywords") or [] for e in events.values()],
                          {p for e in events.values() for p in e.get("participants") or []})
    return [Cluster(tenant=before.tenant, conversation_id=before.conversation_id, cluster_id=before.cluster_id,
                    members=members, centroid=node["centroid"], label=label)]

