"""Behaviour of the pure processors on the real embedder (no Kafka; no stores, except the embedded qdrant-edge
store where a test follows a field all the way into it)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from compassmem.core.models import Event, Relation, RelationType, Turn, relation_id_for
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.clustering import Reclusterer
from compassmem.processors.conversation_memory import ConversationMemory
from compassmem.processors.event_frames import build_event, indexed_turns, merge_into, without_turn
from compassmem.processors.merging import EventMerger
from compassmem.processors.relation_ledger import RelationLedger
from compassmem.processors.relations import KeywordStats, RelationExtractor, make_relation, rests_on_turn
from compassmem.processors.segmentation import (
    BoundaryDetector,
    BoundaryReason,
    Segment,
    SegmentationConfig,
    SegmentTurn,
)
from compassmem.text.text_features import keyword_stems
from compassmem.sinks.batching import VectorSink
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

TOPICS: list[list[str]] = json.loads((Path(__file__).parent / "data" / "topics.json").read_text())
START = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


def make_turns(sessions: list[list[str]], conversation_id: str = "c1", speakers: tuple[str, str] = ("Ann", "Bob"),
               gap: timedelta = timedelta(days=3)) -> list[Turn]:
    turns = []
    for number, texts in enumerate(sessions, start=1):
        for offset, text in enumerate(texts, start=1):
            turns.append(Turn(
                conversation_id=conversation_id, turn_id=f"D{number}:{offset}", speaker=speakers[(offset - 1) % 2],
                text=text, timestamp=START + gap * (number - 1) + timedelta(seconds=offset), session_id=str(number),
            ))
    return turns


def new_memory(segmentation: SegmentationConfig | None = None, window: int = 50) -> ConversationMemory:
    return ConversationMemory(BoundaryDetector(segmentation), EventMerger(), RelationExtractor(), Reclusterer(window))


def feed(memory: ConversationMemory, turns: list[Turn], embedder) -> None:  # noqa: ANN001
    for turn, vector in zip(turns, embedder.embed([t.indexed_text() for t in turns]), strict=True):
        memory.add_turn(turn, vector)
    memory.close_open_segment()


def event_of(memory: ConversationMemory, turn_id: str) -> str:
    return next(e.event_id for e in memory.events.values() if turn_id in e.turn_ids)


def test_session_change_cuts_an_event(embedder) -> None:
    # The same topic goes on across the session change: only the session boundary can cut it.
    memory = new_memory()
    feed(memory, make_turns([TOPICS[0][:2], TOPICS[0][2:]]), embedder)
    assert event_of(memory, "D1:2") != event_of(memory, "D2:1")
    assert memory.stats.boundary_reasons["session_change"] == 1


def test_yesterday_becomes_an_absolute_anchor_on_the_event(embedder) -> None:
    memory = new_memory()
    feed(memory, make_turns([["I went to a LGBTQ support group yesterday and it was so powerful.",
                              "That sounds really meaningful, I'm glad you went."]]), embedder)
    (event,) = memory.events.values()
    anchors = [a for a in event.time_anchors if a.expression.lower() == "yesterday"]
    assert anchors and anchors[0].start == anchors[0].end == date(2023, 5, 7)
    assert anchors[0].turn_id == "D1:1"


def test_because_yields_a_causal_edge_from_cause_to_effect(embedder) -> None:
    sessions = [
        ["The client changed the project requirements again last week.", "Oh no, that means redoing the design."],
        ["We worked overtime all weekend because the client changed the requirements.", "That sounds exhausting."],
    ]
    memory = new_memory()
    feed(memory, make_turns(sessions), embedder)
    cause, effect = event_of(memory, "D1:1"), event_of(memory, "D2:1")
    causal = [r for r in memory.ledger.active.values() if r.type is RelationType.CAUSAL]
    assert [(r.source, r.target) for r in causal] == [(cause, effect)]
    assert "because" in causal[0].evidence


def test_a_cue_clause_of_one_content_word_links_nothing(embedder) -> None:
    # "if you need anything" shares its one content word with the earlier event, which it does not restate.
    sessions = [
        ["I need a new couch for the living room.", "The old one has seen better days."],
        ["Let me know if you need anything.", "Thanks, I will."],
    ]
    memory = new_memory()
    feed(memory, make_turns(sessions), embedder)
    assert event_of(memory, "D1:1") != event_of(memory, "D2:1")
    quoting = [r for r in memory.ledger.active.values()
               if r.type in (RelationType.CAUSAL, RelationType.CONDITIONAL, RelationType.MOTIVATIONAL)]
    assert quoting == []


def test_repeated_segments_merge_and_distinct_ones_do_not(embedder) -> None:
    distinct = TOPICS
    repeats = []
    for index, topic in enumerate(TOPICS[:10]):
        # Half exact repeats, half lightly reworded (a retold story).
        repeats.append(topic if index % 2 == 0 else [t.replace(".", "!").replace("I ", "I really ", 1) for t in topic])
    memory = new_memory()
    feed(memory, make_turns(distinct + repeats), embedder)
    originals = [event_of(memory, f"D{n}:1") for n in range(1, len(distinct) + 1)]
    assert len(set(originals)) == len(distinct), "distinct topics must stay distinct events"
    merged = sum(
        event_of(memory, f"D{len(distinct) + i + 1}:1") == originals[i] for i in range(len(repeats))
    )
    assert merged / len(repeats) >= 0.9
    assert memory.stats.merged == merged, "only the planted repeats may merge"


def test_a_look_alike_chat_that_shares_only_small_talk_is_not_a_duplicate() -> None:
    # Friends cheer each other on in every session with the same words; embeddings of two such chats are close
    # (cosine >= 0.9 is typical). What they are about differs: pottery here, a shelter dinner there. Shared small
    # talk counts by its IDF over the conversation, so it cannot make the second chat a repeat of the first,
    # while a retold story (sharing the rare words) still is one.
    cheer = "Thanks so much, your support really means a lot to me, keep it up, you're awesome and I'm so happy!"
    thanks = "Aww, I really appreciate the encouragement and the friendship!"
    pottery = make_turns([["I signed up for a pottery class and the kiln firing was fun.", cheer, thanks]])
    shelter = make_turns([["At the shelter we served dinner to residents.", cheer, thanks]])
    retold = make_turns([["The pottery class kiln firing was so fun, I signed up again.", cheer, thanks]])
    earlier = build_event(_segment(pottery))
    stats = KeywordStats()
    for _ in range(30):  # thirty earlier events of the same friends cheering each other on
        stats.add(keyword_stems(cheer) + keyword_stems(thanks), new_document=True)
    stats.add(earlier.keywords, new_document=True)
    merger = EventMerger()

    assert merger.decide(_segment(shelter), None, [(earlier, 0.95)], stats) is None
    decision = merger.decide(_segment(retold), None, [(earlier, 0.95)], stats)
    assert decision is not None and decision.target_event_id == earlier.event_id
    # Unweighted, the shared cheering alone would have merged the shelter chat into the pottery event.
    assert merger.decide(_segment(shelter), None, [(earlier, 0.95)], KeywordStats()) is not None


def test_incremental_indexes_agree_with_a_scan_of_the_events(embedder) -> None:
    """The write path's derived indexes (event matrix, entity/participant/session rows, adjacency count) stay
    what a scan of the events gives, through merges and reclustering, and a restored memory rebuilds them."""
    from compassmem.processors.event_index import EventIndex
    from compassmem.processors.relations import ADJACENCY_EVIDENCE

    memory = new_memory(window=5)
    feed(memory, make_turns(TOPICS + TOPICS[:6]), embedder)
    assert memory.stats.merged > 0 and memory.stats.recluster_runs > 0
    restored = new_memory(window=5)
    restored.restore(memory.to_state())
    for mem in (memory, restored):
        index: EventIndex = mem._index
        events = list(mem.events.values())
        assert index.events == events
        assert index.regular
        np.testing.assert_array_equal(index.scores(slice(0, len(events)), np.eye(len(events[0].embedding))[0]),
                                      np.asarray([e.embedding for e in events], dtype=np.float32)[:, 0])
        for name in {n for e in events for n in e.entities}:
            assert index.rows_naming(name) == [r for r, e in enumerate(events) if name in e.entities]
        for session in {s for e in events for s in e.session_ids}:
            assert index.rows_in_session(session) == [r for r, e in enumerate(events) if session in e.session_ids]
        for participants in {tuple(e.participants) for e in events}:
            assert index.rows_with_participants(list(participants)) == [
                r for r, e in enumerate(events) if tuple(e.participants) == participants]
        active = mem.ledger.active.values()
        assert mem.health().adjacency_relations == sum(1 for r in active if r.evidence in ADJACENCY_EVIDENCE)


def test_every_turn_belongs_to_exactly_one_event(embedder) -> None:
    turns = make_turns(TOPICS[:8] + [TOPICS[0]])
    memory = new_memory()
    feed(memory, turns, embedder)
    owned = [tid for e in memory.events.values() for tid in e.turn_ids]
    assert sorted(owned) == sorted(t.turn_id for t in turns)


def test_fiftieth_event_triggers_reclustering(embedder) -> None:
    # One turn per session: every turn closes an event, so event counts are exact.
    texts = [[t] for topic in TOPICS for t in topic][:51]
    memory = new_memory()
    turns = make_turns(texts)
    vectors = embedder.embed([t.indexed_text() for t in turns])
    runs_after = []
    for turn, vector in zip(turns, vectors, strict=True):
        memory.add_turn(turn, vector)
        runs_after.append(memory.stats.recluster_runs)
    # Turn n closes event n-1; the 50th event closes when turn 51 arrives.
    assert runs_after[49] == 0 and runs_after[50] == 1
    clustered = [e for e in memory.events.values() if e.cluster_id]
    assert len(clustered) == 50 and len({e.cluster_id for e in clustered}) == round((50 / 2) ** 0.5)


def _relation(source: str, target: str, confidence: float) -> Relation:
    return Relation(conversation_id="c1", relation_id=relation_id_for(source, target, RelationType.CAUSAL, None),
                    source=source, target=target, type=RelationType.CAUSAL, confidence=confidence,
                    evidence="test", created_at=START)


def test_contradiction_replaces_only_with_twenty_percent_more_confidence() -> None:
    ledger = RelationLedger()
    original = _relation("a", "b", 0.5)
    ledger.apply([original])
    weak = ledger.apply([_relation("b", "a", 0.59)])
    assert weak.rejected and original.relation_id in ledger.active
    strong = ledger.apply([_relation("b", "a", 0.61)])
    retired = next(r for r in strong.writes if r.relation_id == original.relation_id)
    assert retired.superseded_by == strong.writes[-1].relation_id
    assert original.relation_id not in ledger.active


def test_pipeline_summary_on_a_small_conversation(embedder) -> None:
    turns = make_turns(TOPICS[:6]) + make_turns(TOPICS[6:9], conversation_id="c2")
    pipeline = MemoryPipeline(embedder, [], PipelineConfig(batch_turns=7))
    summary = pipeline.ingest(turns)
    assert summary.turns == len(turns) and summary.conversations == 2
    assert summary.events >= 9  # at least one event per session
    assert summary.relations_by_type["follow_up"] >= summary.events - 2
    assert summary.average_degree > summary.average_degree_without_adjacency
    assert np.isclose(summary.mean_turns_per_event * summary.events, len(turns))


@pytest.mark.parametrize("threshold", [0.0, 0.30])
def test_boundaries_are_decided_incrementally(embedder, threshold: float) -> None:
    """Feeding turns one at a time or in any batch size gives the same events: a boundary waits at most for the
    next turn, and is final once decided."""
    turns = make_turns(TOPICS[:5])
    config = PipelineConfig(segmentation=SegmentationConfig(shift_threshold=threshold))
    one = MemoryPipeline(embedder, [], config.model_copy(update={"batch_turns": 1}))
    many = MemoryPipeline(embedder, [], config.model_copy(update={"batch_turns": 64}))
    one.ingest(turns)
    many.ingest(turns)
    ids = lambda p: [e.turn_ids for m in p.memories.values() for e in m.events.values()]  # noqa: E731
    assert ids(one) == ids(many)


# -- subject_id: the customer, user or account a conversation is about -------------------------------------


def _segment(turns: list[Turn], first_vector: int = 0) -> Segment:
    vectors = [[1.0 if i == (first_vector + n) % 4 else 0.0 for i in range(4)] for n in range(len(turns))]
    return Segment(turns=[SegmentTurn(turn=t, embedding=v) for t, v in zip(turns, vectors, strict=True)],
                   boundary_reason=BoundaryReason.SESSION)


def test_an_event_takes_the_subject_of_its_first_turn_that_has_one() -> None:
    plain, about, other = make_turns([["Hello.", "My order is late.", "Let me check."]])
    about = about.model_copy(update={"subject_id": "cust-42"})
    other = other.model_copy(update={"subject_id": "cust-7"})
    segment = _segment([plain, about, other])

    event = build_event(segment)
    assert event.subject_id == "cust-42"
    assert [t.subject_id for t in indexed_turns(segment, event.event_id)] == [None, "cust-42", "cust-7"]
    assert build_event(_segment([plain])).subject_id is None


def test_a_merged_event_keeps_its_subject_unless_it_had_none() -> None:
    first, second, third, fourth = make_turns([["Hello.", "My order is late.", "Still late.", "Any news?"]])
    nobody = build_event(_segment([first, second]))
    merged = merge_into(nobody, _segment([third.model_copy(update={"subject_id": "cust-42"}), fourth], 2))
    assert merged.subject_id == "cust-42" and merged.version == 2

    about = build_event(_segment([first.model_copy(update={"subject_id": "cust-42"}), second]))
    for later in (None, "cust-7"):
        update = {"subject_id": later}
        kept = merge_into(about, _segment([third.model_copy(update=update), fourth.model_copy(update=update)], 2))
        assert kept.subject_id == "cust-42"


def test_subject_id_flows_from_turns_into_the_stored_events_and_turns(embedder, tmp_path: Path) -> None:
    subject = {"subject_id": "cust-42"}
    turns = [t.model_copy(update=subject) for t in make_turns(TOPICS[:3])]
    turns += make_turns(TOPICS[3:5], conversation_id="c2")  # no subject
    store = EdgeVectorStore(tmp_path / "edge", dim=embedder.dim)
    try:
        MemoryPipeline(embedder, [VectorSink(store)]).ingest(turns)
        stored_turns = store.conversation_turns("default", "c1")
        assert len(stored_turns) == sum(len(topic) for topic in TOPICS[:3])
        assert {t.subject_id for t in stored_turns} == {"cust-42"}
        events = store.conversation_events("default", "c1")
        assert len(events) >= 3 and {e.subject_id for e in events} == {"cust-42"}
        assert {t.subject_id for t in store.conversation_turns("default", "c2")} == {None}
        assert {e.subject_id for e in store.conversation_events("default", "c2")} == {None}
    finally:
        store.close()


def test_a_redaction_takes_the_relations_that_rest_on_the_turn_and_no_others() -> None:
    said, asked, answered = make_turns([["The Zembla bridge fell, so I drive the long way now.",
                                         "How long is the drive?", "Forty minutes, past Oslo, so I leave early."]])
    earlier = build_event(_segment(make_turns([["The storm hit Oslo.", "The Zembla bridge fell."]], "c0")))
    event = build_event(_segment([said, asked, answered]))
    removed = event.observations[0]
    rebuilt = without_turn(event, said.turn_id, [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    assert rebuilt is not None and "Oslo" in rebuilt.entities and "Zembla" not in rebuilt.entities

    def rests(type_: RelationType, evidence: str, on: Event = rebuilt) -> bool:
        return rests_on_turn(make_relation(earlier, event, type_, 0.8, evidence), removed, on)

    assert rests(RelationType.CAUSAL, said.text)  # its cue sentence
    assert rests(RelationType.CAUSAL, said.text[:20])  # a quote cut short
    assert not rests(RelationType.CAUSAL, "Forty minutes, past Oslo, so I leave early.")  # a kept turn's
    assert rests(RelationType.SAME_ENTITY, "both name Zembla")
    assert not rests(RelationType.SAME_ENTITY, "both name Oslo")
    assert not rests(RelationType.SAME_PARTICIPANT, "same participants: Ann, Bob")  # Ann speaks on
    alone = without_turn(build_event(_segment([said, asked])), said.turn_id, [[0.0, 1.0, 0.0, 0.0]])
    assert alone is not None and alone.participants == ["Bob"]
    assert rests(RelationType.SAME_PARTICIPANT, "same participants: Ann, Bob", alone)
    # Evidence that holds no text of a turn stays, even where a turn happens to say the same words.
    assert not rests(RelationType.FOLLOW_UP, said.text)
    assert not rests(RelationType.TEMPORAL, "told-time intervals")
