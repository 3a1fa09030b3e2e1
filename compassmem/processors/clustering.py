"""Windowed reclustering: every 50 new events of a conversation, update its topic clusters (super-events).

Incremental mini-batch k-means, so the cost per window stays proportional to the window, not to the whole
history: new events are assigned to the nearest centroid and centroids move by running means; when the
target k = round(sqrt(n / 2)) grows, the cluster with the largest spread is split in two.

The reclusterer sees only the events a conversation memory still holds (its hot window, and events that left
the window before their first clustering), not the whole conversation: ``counts`` and n count every event ever
clustered, while ``assignment`` and a published cluster's ``members`` cover the held events only. A split
re-centres on the held members and moves some of them to the new cluster; members no longer held stay where they
were (the graph store keeps memberships that a cluster record does not mention).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, Field

from compassmem.core.models import Cluster, Event, stable_uuid
from compassmem.processors.vectors import unit
from compassmem.text.topic_terms import name_terms, topic_terms

WINDOW = 50
LABEL_TERMS = 5


class ClusterState(BaseModel):
    centroids: list[list[float]] = Field(default_factory=list)
    # Events ever assigned to each cluster, including those the memory no longer holds.
    counts: list[int] = Field(default_factory=list)
    # The cluster of each held event that has been clustered.
    assignment: dict[str, int] = Field(default_factory=dict)
    # Events created since the last run.
    pending: list[str] = Field(default_factory=list)
    runs: int = 0


class ReclusterResult(BaseModel):
    clusters: list[Cluster]
    # event_id -> cluster_id for every event whose cluster changed in this run.
    moved: dict[str, str]


def cluster_id_for(tenant: str, conversation_id: str, index: int) -> str:
    return stable_uuid("cluster", tenant, conversation_id, str(index))


def _two_means(vectors: np.ndarray, iterations: int = 8) -> np.ndarray:
    """Split rows in two (labels 0/1), seeded deterministically by the two mutually farthest rows."""
    first = int(np.argmin(vectors @ vectors.mean(axis=0)))
    second = int(np.argmin(vectors @ vectors[first]))
    centres = vectors[[first, second]].copy()
    labels = np.zeros(len(vectors), dtype=int)
    for _ in range(iterations):
        labels = np.argmax(vectors @ centres.T, axis=1)
        for side in (0, 1):
            if np.any(labels == side):
                centres[side] = unit(vectors[labels == side].mean(axis=0))
    return labels


def cluster_label(member_keywords: Sequence[Sequence[str]], conversation_keywords: Iterable[Sequence[str]],
                  participants: Iterable[str]) -> list[str]:
    """A topic's label: the terms its members share that the conversation's other events say less (``topic_terms``),
    never a participant's name, a stop word or a contraction."""
    return topic_terms(member_keywords, conversation_keywords, name_terms(participants), LABEL_TERMS)


def _members(assignment: dict[str, int], clusters: set[int] | None = None) -> dict[int, list[str]]:
    """The member event ids of each cluster (of ``clusters`` only, if given), in assignment order: one pass
    over the assignment, not one per cluster."""
    groups: dict[int, list[str]] = {}
    for event_id, index in assignment.items():
        if clusters is None or index in clusters:
            groups.setdefault(index, []).append(event_id)
    return groups


class Reclusterer:
    def __init__(self, window: int = WINDOW) -> None:
        self.window = window

    def observe(self, state: ClusterState, event_id: str) -> bool:
        """Count a new event; True when the window is full and a recluster is due."""
        if event_id not in state.assignment and event_id not in state.pending:
            state.pending.append(event_id)
        return len(state.pending) >= self.window

    def recluster(self, state: ClusterState, events: dict[str, Event]) -> ReclusterResult:
        """Fold the pending events into the clusters; ``events`` holds the current version of every event the
        memory holds (every pending event among them)."""
        pending = [events[e] for e in state.pending if e in events]
        state.pending = []
        state.runs += 1
        if not pending:
            return ReclusterResult(clusters=[], moved={})
        sample = pending[0]
        moved: dict[str, str] = {}
        touched: set[int] = set()
        centroids = np.asarray(state.centroids, dtype=np.float32).reshape(-1, len(sample.embedding or []))
        if len(centroids) == 0:
            centroids = unit(np.asarray([pending[0].embedding], dtype=np.float32)[0])[None, :]
            state.counts = [0]
        for event in pending:
            vector = np.asarray(event.embedding, dtype=np.float32)
            index = int(np.argmax(centroids @ vector))
            state.counts[index] += 1
            rate = 1.0 / state.counts[index]
            centroids[index] = unit((1 - rate) * centroids[index] + rate * vector)
            state.assignment[event.event_id] = index
            moved[event.event_id] = cluster_id_for(event.tenant, event.conversation_id, index)
            touched.add(index)
        live = {e: i for e, i in state.assignment.items() if e in events}
        # Every event ever clustered (the held ones are only the most recent).
        target = max(1, round(math.sqrt(sum(state.counts) / 2)))
        while len(centroids) < target:
            split = self._split_widest(state, centroids, live, events, moved, touched)
            if split is None:
                break
            centroids = split
        state.centroids = centroids.tolist()
        state.assignment = live
        return ReclusterResult(clusters=self._clusters(state, events, touched, sample), moved=moved)

    def _split_widest(self, state: ClusterState, centroids: np.ndarray, live: dict[str, int],
                      events: dict[str, Event], moved: dict[str, str], touched: set[int]) -> np.ndarray | None:
        """Split the cluster whose held members spread widest; None when no cluster holds two members to split
        (only possible once the memory holds fewer events than were clustered: the split waits for more)."""
        spreads = []
        groups = _members(live)
        for index in range(len(centroids)):
            members = groups.get(index, [])
            if len(members) < 2:
                spreads.append(-1.0)
                continue
            vectors = np.asarray([events[e].embedding for e in members], dtype=np.float32)
            spreads.append(float(len(members) - (vectors @ centroids[index]).sum()))
        widest = int(np.argmax(spreads))
        members = groups.get(widest, [])
        if len(members) < 2:
            return None
        vectors = np.asarray([events[e].embedding for e in members], dtype=np.float32)
        labels = _two_means(vectors)
        new_index = len(centroids)
        centroids = np.vstack([centroids, np.zeros((1, centroids.shape[1]), dtype=np.float32)])
        for side, index in ((0, widest), (1, new_index)):
            chosen = vectors[labels == side]
            centroids[index] = unit(chosen.mean(axis=0)) if len(chosen) else centroids[widest]
        split_off = int(np.sum(labels == 1))
        state.counts = state.counts + [0]
        # Members no longer held stay in the widest cluster (all of its members are held in a short conversation).
        state.counts[widest] -= split_off
        state.counts[new_index] = split_off
        for event_id, label in zip(members, labels, strict=True):
            if label == 1:
                live[event_id] = new_index
                sample = events[event_id]
                moved[event_id] = cluster_id_for(sample.tenant, sample.conversation_id, new_index)
        touched.update({widest, new_index})
        return centroids

    def _clusters(self, state: ClusterState, events: dict[str, Event], touched: set[int], sample: Event) -> list[Cluster]:
        clusters = []
        groups = _members(state.assignment, touched)
        participants = {name for event in events.values() for name in event.participants}
        conversation = [event.keywords for event in events.values()]
        for index in sorted(touched):
            members = groups.get(index, [])
            clusters.append(Cluster(
                tenant=sample.tenant,
                conversation_id=sample.conversation_id,
                cluster_id=cluster_id_for(sample.tenant, sample.conversation_id, index),
                members=members,
                centroid=state.centroids[index],
                label=cluster_label([events[member].keywords for member in members],
                                    conversation, participants),
            ))
        return clusters
