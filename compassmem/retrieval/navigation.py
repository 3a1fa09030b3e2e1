"""Subgoal-guided navigation of the event graph: a priority-queue walk from the seed events.

A neighbour's priority mixes its semantic similarity to the subgoal (0.6) with the logical strength of the
edge that reaches it (edge-type weight x confidence, 0.4), discounted per hop. The walk stops at the hop
limit, at the node budget, or early once the subgoal has strong evidence and nothing better is queued.
"""

from __future__ import annotations

import heapq

import numpy as np
from pydantic import BaseModel, Field

from compassmem.core.contracts.query import PathStep
from compassmem.core.models import RelationType
from compassmem.retrieval.memory_view import MemoryView
from compassmem.sinks.graph_store import EdgeFields, WalkEdge

CLUSTER_HOP = "cluster"
# Edges that only say two events were told one after the other; neighbouring turns already score context.
ADJACENT_HOP = "adjacent"

DEFAULT_TYPE_WEIGHTS: dict[str, float] = {
    RelationType.CAUSAL.value: 1.0,
    RelationType.MOTIVATIONAL.value: 0.9,
    RelationType.CONDITIONAL.value: 0.9,
    RelationType.PART_OF.value: 0.8,
    RelationType.SAME_ENTITY.value: 0.7,
    RelationType.TEMPORAL.value: 0.6,
    RelationType.FOLLOW_UP.value: 0.5,
    RelationType.SAME_PARTICIPANT.value: 0.3,
    CLUSTER_HOP: 0.4,
    ADJACENT_HOP: 0.2,
}


class NavigationConfig(BaseModel):
    semantic_weight: float = Field(default=0.6, ge=0.0, le=1.0)
    hop_decay: float = Field(default=0.85, gt=0.0, le=1.0)
    node_budget: int = Field(default=48, ge=1)
    strong_evidence: float = Field(default=0.62, ge=0.0, le=1.0)
    type_weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TYPE_WEIGHTS))
    # When the question asks about time, temporal edges are the logical ones to follow.
    temporal_weight_when_asked: float = 0.9
    # Kinds of step (relation types, "cluster", "adjacent") the walk does not take: for ablations.
    skipped_steps: frozenset[str] = frozenset()


class Reached:
    """An event a walk reached: its score, its hops from a seed, and the step that reached it. The path is built
    when read: a walk reaches dozens of events per subgoal and only the evidence's few report theirs (with a
    pydantic model and a path per reached event, conv-26's walks took 1.1 ms per question; 0.6 ms this way, with
    the similarities read as Python floats)."""

    __slots__ = ("_via", "hops", "score")

    def __init__(self, score: float, hops: int,
                 via: tuple[Reached, EdgeFields, str, str] | None = None) -> None:
        self.score = score
        self.hops = hops
        # (the event it was reached from, the edge, that event's id, this event's id); None for a seed.
        self._via = via

    @property
    def path(self) -> list[PathStep]:
        steps: list[PathStep] = []
        node: Reached = self
        while node._via is not None:
            parent, edge, parent_id, event_id = node._via
            steps.append(_path_step(edge, parent_id, event_id))
            node = parent
        return steps[::-1]


def walk(view: MemoryView, query: np.ndarray, seeds: dict[str, float], max_hops: int,
         config: NavigationConfig, temporal: bool = False) -> dict[str, Reached]:
    """Events reached from ``seeds`` (event id -> seed score in [0, 1]) with their best score and path."""
    weights = dict(config.type_weights)
    if temporal:
        weights[RelationType.TEMPORAL.value] = config.temporal_weight_when_asked
    # As Python floats: the loop below reads one per way out of every event it visits.
    similarity: list[float] = (view.event_matrix @ query).tolist() if len(view.event_ids) else []
    event_row = view.event_row
    semantic_weight, logical_weight = config.semantic_weight, 1 - config.semantic_weight
    reached: dict[str, Reached] = {}
    # Heap entries carry the edge that reached them as plain data; PathStep models are built only for the paths
    # read (Reached.path), and most pushed neighbours are never popped.
    heap: list[tuple[float, int, str, int, str | None, EdgeFields | None]] = []
    counter = 0
    for event_id, score in seeds.items():
        heapq.heappush(heap, (-score, counter, event_id, 0, None, None))
        counter += 1
    # Hops at which each topic cluster was entered. Every member of a cluster reaches the others with the same
    # logical weight, so entering it again from a later member, at as many hops or more, queues each member again
    # with a priority no higher than (and behind) its first entry, which is popped first, provided that priority
    # is not negative (a hop's decay raises a negative one): skipping it then changes nothing reached (the early
    # stop below looks past stale entries), and a long conversation's view holds clusters of dozens of members.
    entered: dict[str, int] = {}
    while heap and len(reached) < config.node_budget:
        negative, _, event_id, hops, parent, edge = heapq.heappop(heap)
        if event_id in reached:
            continue
        score = -negative
        reached[event_id] = Reached(score, hops, (reached[parent], edge, parent, event_id)
                                    if parent is not None and edge is not None else None)
        if hops >= max_hops:
            continue
        # "Nothing better queued" means no better event: entries of events reached already are stale.
        while heap and heap[0][2] in reached:
            heapq.heappop(heap)
        if score >= config.strong_evidence and hops > 0 and (not heap or -heap[0][0] < score):
            break
        cluster_id = view.events[event_id].cluster_id if event_id in view.events else None
        enter = cluster_id is not None and entered.get(cluster_id, hops + 1) > hops
        lowest_member = 0.0
        decay = config.hop_decay ** (hops + 1)
        for neighbour, step_type, confidence, step in _steps(view, event_id, cluster_id if enter else None):
            row = event_row.get(neighbour)
            if row is None or neighbour in reached or step_type in config.skipped_steps:
                continue
            priority = semantic_weight * similarity[row] + logical_weight * weights.get(step_type, 0.3) * confidence
            if step_type == CLUSTER_HOP:
                lowest_member = min(lowest_member, priority)
            priority *= decay
            heapq.heappush(heap, (-priority, counter, neighbour, hops + 1, event_id, step))
            counter += 1
        if enter and lowest_member >= 0.0:
            entered[str(cluster_id)] = hops
    return reached


def _path_step(fields: EdgeFields, parent: str, event_id: str) -> PathStep:
    edge = WalkEdge._make(fields)
    return PathStep(type=edge.type, subtype=edge.subtype, adjacency=edge.adjacent,
                    source=edge.source or parent, target=edge.target or event_id, confidence=edge.confidence)


# Positions in an edge's plain fields: the walk reads three of them for every way out of every event it visits.
_TYPE, _CONFIDENCE, _ADJACENT = (WalkEdge._fields.index(name) for name in ("type", "confidence", "adjacent"))


def _steps(view: MemoryView, event_id: str, cluster_id: str | None) -> list[tuple[str, str, float, EdgeFields]]:
    """(neighbour, weight key, confidence, edge) for every way out of an event: its relations, and the other members
    of ``cluster_id`` (its topic cluster, or None to leave the cluster out)."""
    steps: list[tuple[str, str, float, EdgeFields]] = []
    for neighbour, fields in view.neighbours(event_id):
        key = ADJACENT_HOP if fields[_ADJACENT] else fields[_TYPE]
        steps.append((neighbour, key, fields[_CONFIDENCE], fields))
    members = view.cluster_members(event_id) if cluster_id else []
    if members:
        # One edge for every member: the hop goes through the cluster, so source and target are the same for all.
        fields = WalkEdge(source=event_id, target=str(cluster_id), relation_id="", type=CLUSTER_HOP, subtype=None,
                           confidence=1.0, adjacent=False).fields()
        steps.extend((member, CLUSTER_HOP, 1.0, fields) for member in members)
    return steps
