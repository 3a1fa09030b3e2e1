"""The graph walk of ``compassmem.retrieval.navigation`` on random graphs, against a plain reference walk."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

import numpy as np
import pytest

from compassmem.retrieval.navigation import (
    CLUSTER_HOP,
    DEFAULT_TYPE_WEIGHTS,
    NavigationConfig,
    walk,
)
from compassmem.sinks.graph_store import EdgeFields, WalkEdge


@dataclass
class _Event:
    cluster_id: str | None


class _View:
    """What ``walk`` reads of a ``MemoryView``: event vectors and rows, relations both ways, topic clusters."""

    def __init__(self, rng: random.Random, events: int, clusters: int, relations: int) -> None:
        self.event_ids = [f"e{i}" for i in range(events)]
        self.event_row = {event_id: row for row, event_id in enumerate(self.event_ids)}
        vectors = np.asarray([[rng.gauss(0, 1) for _ in range(8)] for _ in range(events)], dtype=np.float32)
        self.event_matrix = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.events = {e: _Event(rng.choice([None, *(f"c{k}" for k in range(clusters))])) for e in self.event_ids}
        self._links: dict[str, list[tuple[str, EdgeFields]]] = {e: [] for e in self.event_ids}
        for index in range(relations):
            source, target = rng.sample(self.event_ids, 2)
            kind = rng.choice([k for k in DEFAULT_TYPE_WEIGHTS if k not in (CLUSTER_HOP, "adjacent")])
            fields = WalkEdge(source, target, f"r{index}", kind, None, rng.uniform(0.3, 1.0), False).fields()
            self._links[source].append((target, fields))
            self._links[target].append((source, fields))

    def neighbours(self, event_id: str) -> list[tuple[str, EdgeFields]]:
        return self._links[event_id]

    def cluster_members(self, event_id: str) -> list[str]:
        cluster = self.events[event_id].cluster_id
        return [e for e in self.event_ids if cluster and e != event_id and self.events[e].cluster_id == cluster]


def reference_walk(view: _View, query: np.ndarray, seeds: dict[str, float], max_hops: int,
                   config: NavigationConfig) -> dict[str, tuple[float, int, list[tuple[str, str, str]]]]:
    """Best first, every visited event expanding all its relations and all its cluster's members each time; it
    stops early at a strong event when no better event that is not reached yet is queued."""
    similarity = view.event_matrix @ query
    heap = [(-score, i, event_id, 0, None, None) for i, (event_id, score) in enumerate(seeds.items())]
    heapq.heapify(heap)
    counter = len(heap)
    reached: dict[str, tuple[float, int, list[tuple[str, str, str]]]] = {}
    while heap and len(reached) < config.node_budget:
        negative, _, event_id, hops, parent, step = heapq.heappop(heap)
        if event_id in reached:
            continue
        reached[event_id] = (-negative, hops, [*reached[parent][2], step] if parent else [])
        if hops >= max_hops:
            continue
        live = [entry for entry in heap if entry[2] not in reached]
        if -negative >= config.strong_evidence and hops > 0 and (not live or -min(live)[0] < -negative):
            break
        cluster = (CLUSTER_HOP, event_id, str(view.events[event_id].cluster_id))
        steps = [(n, fields[3], fields[5], (fields[3], fields[0], fields[1])) for n, fields in view.neighbours(event_id)]
        steps += [(member, CLUSTER_HOP, 1.0, cluster) for member in view.cluster_members(event_id)]
        for neighbour, kind, confidence, edge in steps:
            if neighbour in reached:
                continue
            priority = (config.semantic_weight * float(similarity[view.event_row[neighbour]])
                        + (1 - config.semantic_weight) * config.type_weights[kind] * confidence)
            heapq.heappush(heap, (-priority * config.hop_decay ** (hops + 1), counter, neighbour, hops + 1,
                                  event_id, edge))
            counter += 1
    return reached


@pytest.mark.parametrize("seed", range(60))
def test_entering_each_cluster_once_reaches_what_expanding_every_visit_reaches(seed: int) -> None:
    # A cluster is entered once, from its first member visited at the fewest hops: the walk must still reach the
    # same events with the same scores, hops and paths as a walk that expands every member at every visit.
    rng = random.Random(seed)
    view = _View(rng, events=rng.randint(5, 80), clusters=rng.randint(1, 6), relations=rng.randint(0, 120))
    query = view.event_matrix[rng.randrange(len(view.event_ids))]
    seeds = {e: rng.random() for e in rng.sample(view.event_ids, min(5, len(view.event_ids)))}
    config = NavigationConfig(node_budget=rng.choice([8, 24, 48, 200]), strong_evidence=rng.choice([0.62, 1.0]))
    max_hops = rng.randint(1, 4)
    got = walk(view, query, seeds, max_hops, config)  # type: ignore[arg-type]
    expected = reference_walk(view, query, seeds, max_hops, config)
    assert list(got) == list(expected)
    for event_id, (score, hops, path) in expected.items():
        assert got[event_id].score == pytest.approx(score) and got[event_id].hops == hops
        assert [(step.type, step.source, step.target) for step in got[event_id].path] == path
    assert len(got) > 1 or not any(view.neighbours(e) or view.cluster_members(e) for e in seeds)
