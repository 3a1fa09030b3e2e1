"""Synthetic conversations for the explorer's and the health report's tests.

``synthetic_turns`` makes the turns of a conversation of ``sessions`` sessions (two topics of tests/data/topics.json
each, eight turns, among changing pairs of speakers) for ``Memory.add``: 100 sessions build about 115 events, with
topics, merges and some 900 relations, in about ten seconds.

A large conversation's graph written straight into a graph store, for tests of what the explorer draws at scale.

``write_large_conversation`` writes ``events`` events in ``topics`` topics (clusters), each with two turns, and the
relations the write path would give them: a follow-up to the next event, temporal relations to the next few, a
same-entity relation inside the topic now and then and a causal one rarely, with varied confidences (about six per
event). No embedder and no pipeline: 2,000 events and 12,000 relations are written in a few seconds.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from compassmem.core.models import (
    Cluster,
    Event,
    Observation,
    Relation,
    RelationType,
    TemporalInfo,
    Turn,
    event_id_for,
)
from compassmem.processors.relations import CONSECUTIVE_EVIDENCE, make_relation
from compassmem.sinks.graph_store import GraphStore

T0 = datetime(2023, 1, 2, 9, 0, tzinfo=UTC)
_TOPICS: list[list[str]] = json.loads((Path(__file__).parent / "data" / "topics.json").read_text())
_PAIRS = [("Ann", "Bob"), ("Ann", "Cleo"), ("Bob", "Dev"), ("Cleo", "Dev"), ("Ann", "Dev"), ("Bob", "Cleo"),
          ("Eve", "Ann")]
_PLACES = ["the lake house", "Lisbon", "the allotment", "the office", "Grandma's flat", "the climbing gym", "Porto",
           "the cabin", "Kyoto", "the bakery"]


def synthetic_turns(conversation_id: str, sessions: int, tenant: str = "default", seed: int = 3) -> list[Turn]:
    """Sessions two days apart, each two topics of four turns between a pair of speakers that changes from session
    to session (so that a topic said again by other people is an event of its own, not a merge)."""
    rng = random.Random(seed)
    turns = []
    for session in range(sessions):
        start = T0 + timedelta(days=2 * session, hours=rng.randint(0, 8))
        pair = _PAIRS[session % len(_PAIRS)]
        number = 0
        for k, topic in enumerate(rng.sample(range(len(_TOPICS)), 2)):
            place = _PLACES[(session + k) % len(_PLACES)]
            for i, text in enumerate(_TOPICS[topic]):
                number += 1
                turns.append(Turn(tenant=tenant, conversation_id=conversation_id,
                                  turn_id=f"S{session + 1}:{number}", speaker=pair[i % 2],
                                  text=text + (f" That was at {place}." if i == 0 else ""),
                                  timestamp=start + timedelta(minutes=number), session_id=str(session + 1)))
    return turns
_SUBJECTS = ["garden", "chess", "kitchen", "puppy", "marathon", "guitar", "budget", "holiday", "roof", "novel",
             "bakery", "climbing", "tax", "wedding", "piano", "cabin", "bike", "yoga", "camera", "school"]


@dataclass(frozen=True)
class LargeConversation:
    events: list[Event]
    relations: list[Relation]
    clusters: list[Cluster]


def large_conversation(tenant: str, conversation_id: str, events: int = 2000, topics: int = 20,
                       seed: int = 11) -> LargeConversation:
    rng = random.Random(seed)
    built: list[Event] = []
    topic_of: list[int] = []
    for index in range(events):
        topic = (index // 7 + rng.randrange(3)) % topics  # runs of a topic, then another, and back
        subject = _SUBJECTS[topic % len(_SUBJECTS)]
        start = T0 + timedelta(hours=6 * index)
        speakers = ("Ann", "Bob")
        observations = [Observation(turn_id=f"T{index}:{k}", speaker=speakers[k % 2],
                                    text=f"{subject} news number {index}, part {k}", timestamp=start + timedelta(minutes=k),
                                    session_id=str(index // 4)) for k in range(2)]
        built.append(Event(
            tenant=tenant, event_id=event_id_for(tenant, conversation_id, observations[0].turn_id),
            conversation_id=conversation_id, observations=observations,
            summary=f"Ann and Bob talk about the {subject}, episode {index}", participants=list(speakers),
            keywords=[subject, f"episode{index}"], entities=[subject.title()],
            temporal_info=TemporalInfo(start=start, end=observations[-1].timestamp)))
        topic_of.append(topic)
    clusters = []
    for topic in range(topics):
        members = [e.event_id for e, t in zip(built, topic_of, strict=True) if t == topic]
        if not members:
            continue
        cluster_id = f"{conversation_id}-topic-{topic}"
        for event in built:
            if event.event_id in members:
                event.cluster_id = cluster_id
        clusters.append(Cluster(tenant=tenant, conversation_id=conversation_id, cluster_id=cluster_id, members=members,
                                centroid=[0.0] * 4, label=[_SUBJECTS[topic % len(_SUBJECTS)], "news"]))
    relations: list[Relation] = []
    for index, event in enumerate(built):
        following = built[index + 1:index + 4]
        if following:
            relations.append(make_relation(event, following[0], RelationType.FOLLOW_UP, 0.55 + 0.4 * rng.random(),
                                           CONSECUTIVE_EVIDENCE))
        for later in following:
            relations.append(make_relation(event, later, RelationType.TEMPORAL, 0.4 + 0.55 * rng.random(),
                                           "before", subtype="before"))
        same_topic = [j for j in range(max(0, index - 30), index) if topic_of[j] == topic_of[index]]
        if same_topic:
            relations.append(make_relation(built[rng.choice(same_topic)], event, RelationType.SAME_ENTITY,
                                           0.4 + 0.5 * rng.random(), f"both name {event.entities[0]}"))
        if rng.random() < 0.12 and index > 5:
            relations.append(make_relation(built[index - rng.randrange(1, 6)], event, RelationType.CAUSAL,
                                           0.6 + 0.35 * rng.random(), "so that is why it happened"))
        if rng.random() < 0.3 and event.cluster_id:
            relations.append(make_relation(event, event.cluster_id, RelationType.PART_OF, 0.6, "part of the topic"))
    unique = {r.relation_id: r for r in relations}
    return LargeConversation(built, list(unique.values()), clusters)


def write_large_conversation(graph: GraphStore, tenant: str, conversation_id: str, events: int = 2000,
                             topics: int = 20) -> LargeConversation:
    conversation = large_conversation(tenant, conversation_id, events, topics)
    graph.upsert_events(conversation.events)
    graph.upsert_clusters(conversation.clusters)
    graph.upsert_relations(conversation.relations)
    return conversation
