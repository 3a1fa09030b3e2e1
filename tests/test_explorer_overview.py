"""What the explorer opens a conversation on and draws on demand, over real HTTP and real stores:
``GET /v1/conversations/{id}/overview`` (topics with their counts, relation types with what the filters keep, the
strongest links between topics) and the focused graphs of ``GET .../graph`` (``topic``, ``unclustered``, ``event``).

Memory: a 2,000-event conversation written straight into the graph store (``tests/synthetic_graph.py``: 20 topics,
about 10,500 relations), so every figure can be checked against the records written, and the sample conversation
built by ``Memory.add`` (too short to have topics: its events have none yet).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from synthetic_graph import LargeConversation, write_large_conversation

from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

TENANT, LOCKED, KEY = "overview", "overview-locked", "overview-locked.secret-of-the-overview"
BIG = "big"
SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any,
           embedded_falkordb: Any) -> Iterator[tuple[Stores, LargeConversation]]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("overview-qdrant") / "qdrant", embedder.dim)
    stores = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    try:
        big = write_large_conversation(stores.graph, TENANT, BIG)
        turns = [Turn(tenant=TENANT, **json.loads(line)) for line in SAMPLE.read_text().splitlines() if line.strip()]
        with Memory(Settings(_env_file=None), stores=stores, embedder=embedder) as writer:  # type: ignore[call-arg]
            writer.add([*turns, *(t.model_copy(update={"tenant": LOCKED}) for t in turns)])
        yield stores, big
    finally:
        stores.close()


@pytest.fixture(scope="module")
def api(memory: tuple[Stores, LargeConversation], embedder: Any) -> Iterator[httpx.Client]:
    settings = Settings(_env_file=None, api_port=0, api_keys=[KEY])  # type: ignore[call-arg]
    services = build_services(settings, memory[0], embedder, MemoryMetrics(process_collectors=False))
    with BackgroundServer(create_app(services)) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _get(api: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    response = api.get(path, params={"tenant": TENANT, **params})
    assert response.status_code == 200, response.text
    return response.json()


def _topic_of(big: LargeConversation) -> dict[str, str | None]:
    return {e.event_id: e.cluster_id for e in big.events} | {c.cluster_id: c.cluster_id for c in big.clusters}


def test_the_overview_sums_topics_and_the_links_between_them(api: httpx.Client,
                                                             memory: tuple[Stores, LargeConversation]) -> None:
    big = memory[1]
    started = time.perf_counter()
    overview = _get(api, f"/v1/conversations/{BIG}/overview", types=["causal", "temporal"], min_confidence=0.7,
                    links=15)
    print(f"\noverview of {len(big.events)} events and {len(big.relations)} relations over HTTP: "
          f"{(time.perf_counter() - started) * 1000:.0f} ms, {len(json.dumps(overview)):,} bytes")
    members = {c.cluster_id: c.members for c in big.clusters}
    assert [t["id"] for t in overview["topics"]] == sorted(members, key=lambda c: min(
        e.temporal_info.start for e in big.events if e.cluster_id == c))
    for topic in overview["topics"]:
        assert topic["events"] == len(members[topic["id"]]) and topic["turns"] == 2 * topic["events"]
        assert topic["label"] == ", ".join(topic["keywords"][:3])
    counts = overview["counts"]
    assert counts["events"] == len(big.events) and counts["topics"] == len(big.clusters)
    assert counts["relations"] == len(big.relations) and counts["unclustered_events"] == 0
    kept = [r for r in big.relations if r.type.value in {"causal", "temporal"} and r.confidence >= 0.7]
    assert counts["passing_relations"] == len(kept)
    by_type = Counter(r.type.value for r in big.relations)
    passing = Counter(r.type.value for r in kept)
    assert {t["type"]: (t["relations"], t["passing"]) for t in overview["relation_types"]} == {
        kind: (n, passing[kind]) for kind, n in by_type.items()}
    # Every kept relation counted once, in the link of its ends' topics and its type.
    topic_of = _topic_of(big)
    expected: dict[tuple[str | None, str | None, str], list[float]] = defaultdict(list)
    for relation in kept:
        expected[(topic_of[relation.source], topic_of[relation.target], relation.type.value)].append(
            relation.confidence)
    between = {key: values for key, values in expected.items() if key[0] != key[1]}
    assert counts["links_total"] == len(between)
    links = overview["links"]
    assert len(links) == 15 == overview["filters"]["links"]
    strengths = [(-link["max_confidence"], -link["relations"]) for link in links]
    assert strengths == sorted(strengths)
    assert links[0]["max_confidence"] == max(max(v) for v in between.values())
    for link in [*links, *overview["within"]]:
        values = expected[(link["source"], link["target"], link["type"])]
        assert link["relations"] == len(values) and link["max_confidence"] == max(values)
    assert sum(link["relations"] for link in overview["within"]) == sum(
        len(v) for k, v in expected.items() if k[0] == k[1])


def test_the_overview_without_filters_keeps_every_type(api: httpx.Client,
                                                       memory: tuple[Stores, LargeConversation]) -> None:
    overview = _get(api, f"/v1/conversations/{BIG}/overview")
    assert overview["counts"]["passing_relations"] == overview["counts"]["relations"] == len(memory[1].relations)
    assert len(overview["filters"]["types"]) == 8 and overview["filters"]["min_confidence"] == 0.0
    assert len(overview["links"]) == 50


def test_a_conversation_without_topics_yet_is_one_group(api: httpx.Client) -> None:
    overview = _get(api, "/v1/conversations/priya-tom/overview")
    [group] = overview["topics"]
    graph = _get(api, "/v1/conversations/priya-tom/graph")
    assert group["id"] is None and group["events"] == graph["counts"]["events"] == overview["counts"]["events"] > 3
    assert group["turns"] == 24 and overview["counts"]["unclustered_events"] == group["events"]
    focused = _get(api, "/v1/conversations/priya-tom/graph", unclustered="true")
    assert {n["id"] for n in focused["nodes"]} == {n["id"] for n in graph["nodes"]}
    assert {e["id"] for e in focused["edges"]} == {e["id"] for e in graph["edges"]}


def test_a_topic_comes_with_its_events_and_every_relation_around_them(api: httpx.Client,
                                                                      memory: tuple[Stores, LargeConversation]) -> None:
    big = memory[1]
    topic = big.clusters[3]
    started = time.perf_counter()
    graph = _get(api, f"/v1/conversations/{BIG}/graph", topic=[topic.cluster_id])
    print(f"\none topic ({len(topic.members)} events) with its neighbours over HTTP: "
          f"{(time.perf_counter() - started) * 1000:.0f} ms, {graph['counts']['relations']} relations")
    members = set(topic.members)
    touching = {r.relation_id for r in big.relations if r.source in members or r.target in members}
    assert {e["id"] for e in graph["edges"]} == touching
    events = {n["id"]: n for n in graph["nodes"] if n["kind"] == "event"}
    assert members <= set(events)
    # The other events are the relations' other ends, each with its own topic, so a page can draw it there.
    ends = {end for r in big.relations if r.relation_id in touching for end in (r.source, r.target)}
    assert set(events) == ends - {c.cluster_id for c in big.clusters} | members
    topic_of = _topic_of(big)
    assert all(node["cluster_id"] == topic_of[node_id] for node_id, node in events.items())
    assert graph["limits"]["events_total"] == len(big.events)
    assert graph["limits"]["events_omitted"] == len(big.events) - len(events)
    # max_nodes keeps the topic's most recent events.
    limited = _get(api, f"/v1/conversations/{BIG}/graph", topic=[topic.cluster_id], max_nodes=5)
    newest = sorted((e for e in big.events if e.event_id in members), key=lambda e: e.temporal_info.start)[-5:]
    kept = {n["id"] for n in limited["nodes"] if n["kind"] == "event" and n["cluster_id"] == topic.cluster_id}
    assert {e.event_id for e in newest} <= kept


def test_an_event_comes_with_every_relation_it_has(api: httpx.Client,
                                                    memory: tuple[Stores, LargeConversation]) -> None:
    big = memory[1]
    chosen = [big.events[100].event_id, big.events[1500].event_id]
    graph = _get(api, f"/v1/conversations/{BIG}/graph", event=chosen)
    touching = {r.relation_id for r in big.relations if r.source in chosen or r.target in chosen}
    assert {e["id"] for e in graph["edges"]} == touching and len(touching) >= 8
    assert set(chosen) <= {n["id"] for n in graph["nodes"]}
    # An id of another conversation, or of nothing, brings nothing.
    other = _get(api, "/v1/conversations/priya-tom/graph", event=chosen)
    assert not set(chosen) & {n["id"] for n in other["nodes"]}


def test_the_parameters_are_checked_and_named(api: httpx.Client) -> None:
    def problems(path: str, **params: Any) -> list[str]:
        response = api.get(path, params={"tenant": TENANT, **params})
        assert response.status_code == 422, response.text
        return [d["field"] for d in response.json()["detail"]]

    overview, graph = f"/v1/conversations/{BIG}/overview", f"/v1/conversations/{BIG}/graph"
    assert problems(overview, types="kinship") == ["types[0]"]
    assert problems(overview, min_confidence="nan") == ["min_confidence"]
    assert problems(overview, min_confidence=1.5) == ["min_confidence"]
    assert problems(overview, links=0) == ["links"]
    assert problems(overview, links=501) == ["links"]
    assert problems(graph, topic=["a b"]) == ["topic[0]"]
    assert problems(graph, topic=[f"t{i}" for i in range(51)]) == ["topic"]
    assert problems(graph, event=[f"e{i}" for i in range(101)]) == ["event"]
    assert api.get("/v1/conversations/nobody/overview", params={"tenant": TENANT}).status_code == 404
    assert api.get("/v1/conversations/nobody/graph", params={"tenant": TENANT, "event": "e1"}).status_code == 404


def test_a_tenant_with_a_key_needs_it(api: httpx.Client) -> None:
    for path, params in [("/v1/conversations/priya-tom/overview", {}),
                         ("/v1/conversations/priya-tom/graph", {"unclustered": "true"})]:
        params = {"tenant": LOCKED, **params}
        assert api.get(path, params=params).status_code == 401
        assert api.get(path, params=params, headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert api.get(path, params=params, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
