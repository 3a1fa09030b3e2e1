"""The bounded per-conversation state: a memory holds a hot window of recent events, not the whole conversation.

Within the window nothing changes (the records written are exactly those of an unbounded memory); past it the
state stops growing, a snapshot resumes exactly, and the health counts stay the conversation's totals.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from compassmem.core.config import Settings
from compassmem.core.models import Cluster, Event, IndexedTurn, Relation, Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.clustering import Reclusterer, cluster_id_for
from compassmem.processors.conversation_memory import ConversationMemory, MemoryUpdate
from compassmem.processors.event_index import EventIndex
from compassmem.processors.merging import EventMerger
from compassmem.processors.relations import ADJACENCY_EVIDENCE, RelationExtractor
from compassmem.processors.segmentation import BoundaryDetector
from compassmem.publish.producer import encode_turn
from compassmem.sinks.batching import GraphSink, Sink
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.streams.decoding import RawRecord
from compassmem.streams.processor import BatchInput, MemoryStreamProcessor
from compassmem.streams.state import ConversationRecord, RecordHeader, decode_record, encode_record

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOPICS: list[list[str]] = json.loads((DATA / "topics.json").read_text())
START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
SPEAKERS = ("Ann", "Bob")


def locomo_shaped(copies: int, conversation_id: str = "hot") -> list[Turn]:
    """A LoCoMo-shaped conversation: sessions a few days apart, turn ids D<session>:<n>, two speakers a session.

    Each copy tells the sample conversation (examples/, four sessions) and the 20 topics (tests/data, one a
    session) again, in another order and with speakers of its own: new events for the memory, not repeats of
    another copy's; its last session retells its first topic (a repeat to merge).
    """
    sample = [json.loads(line)["text"] for line in (EXAMPLES / "sample_conversation.jsonl").read_text().splitlines()]
    turns: list[Turn] = []
    session = 0
    for copy in range(copies):
        speakers = [f"{name} {copy}" if copy else name for name in SPEAKERS]
        order = [(copy * 7 + k) % len(TOPICS) for k in range(len(TOPICS))]
        sessions = [sample[k : k + 6] for k in range(0, len(sample), 6)] + [TOPICS[k] for k in order]
        sessions.append(TOPICS[order[0]])
        for texts in sessions:
            session += 1
            for offset, text in enumerate(texts, start=1):
                turns.append(Turn(
                    conversation_id=conversation_id, turn_id=f"D{session}:{offset}", speaker=speakers[offset % 2],
                    text=text, timestamp=START + timedelta(days=3 * session, seconds=40 * offset),
                    session_id=str(session),
                ))
    return turns


class MemoEmbedder:
    """The real embedder, each text embedded once for the whole module."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.dim = inner.dim
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self.vectors})
        if missing:
            self.vectors.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)


@pytest.fixture(scope="module")
def memo(embedder) -> MemoEmbedder:  # noqa: ANN001
    return MemoEmbedder(embedder)


def record_line(record: Event | IndexedTurn | Relation | Cluster) -> str:
    """A record as its type and JSON, relations without their wall-clock creation time."""
    exclude = {"created_at"} if isinstance(record, Relation) else None
    return f"{type(record).__name__} {record.model_dump_json(exclude=exclude)}"


class RecordingSink(Sink):
    """Every record written, in order."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def add(self, record: Event | IndexedTurn | Relation | Cluster) -> None:
        self.written.append(record_line(record))

    def flush(self) -> None:
        pass


def new_memory(hot_events: int) -> ConversationMemory:
    return ConversationMemory(BoundaryDetector(), EventMerger(), RelationExtractor(), Reclusterer(), hot_events)


def update_records(update: MemoryUpdate) -> list[Event | IndexedTurn | Relation | Cluster]:
    """What the pipeline writes for an update, in its order."""
    return [*update.events, *update.turns, *update.clusters, *update.relations]


def test_a_conversation_within_the_window_writes_exactly_what_an_unbounded_memory_writes(memo) -> None:  # noqa: ANN001
    turns = locomo_shaped(copies=9)
    runs = {}
    for hot_events in (PipelineConfig().hot_events, 10**9):
        sink = RecordingSink()
        pipeline = MemoryPipeline(memo, [sink], PipelineConfig(hot_events=hot_events, batch_turns=64))
        summary = pipeline.ingest(turns)
        runs[hot_events] = (sink.written, summary.model_dump(exclude={"seconds", "turns_per_second"}), pipeline)
    (default, bounded_summary, pipeline), (unbounded, unbounded_summary, _) = runs.values()
    memory = pipeline.memories["default/hot"]
    # Close to the window, with merges and reclustering runs that split clusters.
    assert 200 <= memory.stats.events <= PipelineConfig().hot_events
    assert memory.stats.merged and memory.stats.recluster_runs >= 4 and len(memory.clusters.counts) > 5
    assert default == unbounded
    assert bounded_summary == unbounded_summary


def run_memory(turns: list[Turn], vectors: np.ndarray, hot_events: int,
               resume_every: int | None = None) -> tuple[ConversationMemory, list[str], list[int]]:
    """Feed the turns one by one; with ``resume_every``, restart from the encoded table record that often.
    Returns the memory, every record it gave to write, and the events held while waiting for clustering."""
    memory = new_memory(hot_events)
    written: list[str] = []
    evicted_pending: list[int] = []
    for index, (turn, vector) in enumerate(zip(turns, vectors, strict=True)):
        if resume_every and index % resume_every == 0:
            header = RecordHeader(tenant="default", conversation_id=turn.conversation_id, partition=0)
            state = decode_record(encode_record(ConversationRecord(header=header, memory=memory.to_state()))).memory
            evicted_pending.append(len(state.evicted_pending))
            memory = ConversationMemory.from_state(state, BoundaryDetector(), EventMerger(), RelationExtractor(),
                                                   Reclusterer(), hot_events)
        written.extend(map(record_line, update_records(memory.add_turn(turn, vector))))
    written.extend(map(record_line, update_records(memory.close_open_segment())))
    return memory, written, evicted_pending


def fingerprint(memory: ConversationMemory) -> str:
    """The whole state, embeddings included, but not the wall-clock creation times of the relations."""
    return memory.to_state().model_dump_json(exclude={"ledger": {"active": {"__all__": {"created_at"}}}})


def utterance_vectors(turns: list[Turn], memo: MemoEmbedder) -> np.ndarray:
    """Embeddings of the utterances alone (a copy's turns embed like the first copy's: a hundred texts to embed)."""
    return memo.embed([t.indexed_text() for t in turns])


@pytest.fixture(scope="module")
def long_run(memo) -> tuple[list[Turn], np.ndarray]:  # noqa: ANN001
    turns = locomo_shaped(copies=6)
    return turns, utterance_vectors(turns, memo)


def test_a_resumed_memory_continues_exactly_past_the_window(long_run) -> None:  # noqa: ANN001
    turns, vectors = long_run
    straight, expected, _ = run_memory(turns, vectors, hot_events=16)
    resumed, written, evicted_pending = run_memory(turns, vectors, hot_events=16, resume_every=3)
    assert straight.stats.events > 8 * 16 and len(straight.events) == 16
    # The record held events that had left the window before their first clustering (window 16 < 50).
    assert max(evicted_pending) > 0 and straight.stats.recluster_runs >= 2
    assert straight.ledger.active_total > len(straight.ledger.active)  # relations were released
    assert written == expected
    assert fingerprint(resumed) == fingerprint(straight)


def latest(written: list[str]) -> dict[str, dict[str, object]]:
    """The latest version of each record id (what the stores end up holding)."""
    out: dict[str, dict[str, object]] = {}
    for line in written:
        kind, body = line.split(" ", 1)
        record = json.loads(body)
        key = record.get("event_id") if kind == "Event" else record.get("relation_id") or record.get("cluster_id")
        if kind in ("Event", "Relation", "Cluster"):
            out[f"{kind}:{key}"] = record
    return out


def test_health_counts_are_the_conversation_totals_past_the_window(long_run) -> None:  # noqa: ANN001
    turns, vectors = long_run
    memory, written, _ = run_memory(turns, vectors, hot_events=16)
    stored = latest(written)
    events = [r for k, r in stored.items() if k.startswith("Event:")]
    active = [r for k, r in stored.items() if k.startswith("Relation:") and r["superseded_by"] is None]
    health = memory.health()
    assert health.events == len(events) > 16
    assert health.relations == len(active) > len(memory.ledger.active)
    assert health.adjacency_relations == sum(1 for r in active if r["evidence"] in ADJACENCY_EVIDENCE)
    assert memory.stats.turns == sum(len(e["observations"]) for e in events) == len(turns)
    # Every event written got a cluster, and the clusters count every member ever assigned.
    assert all(e["cluster_id"] for e in events[: -len(memory.clusters.pending) or None])
    assert sum(memory.clusters.counts) == len(events) - len(memory.clusters.pending)


def test_the_graph_keeps_every_cluster_member_past_the_window(long_run, embedded_falkordb,  # noqa: ANN001
                                                              store_tenant: str) -> None:
    """Cluster records list only the members the memory holds; the graph store adds and moves those and keeps
    the rest, so every event stays in exactly the cluster its own record names, and the sizes add up."""
    turns, vectors = long_run
    memory = new_memory(hot_events=16)
    graph = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    sink = GraphSink(graph)
    events: dict[str, Event] = {}
    for index, (turn, vector) in enumerate(zip(turns, vectors, strict=True)):
        for record in update_records(memory.add_turn(turn.model_copy(update={"tenant": store_tenant}), vector)):
            sink.add(record)
            if isinstance(record, Event):
                events[record.event_id] = record
        if index % 40 == 39:
            sink.flush()
    sink.flush()
    view = graph.conversation_graph(store_tenant, "hot")
    graph.close()
    members = {node: set(data["members"]) for node, data in view.nodes(data=True) if data.get("kind") == "cluster"}
    clustered = {event_id: event.cluster_id for event_id, event in events.items() if event.cluster_id}
    assert len(clustered) == sum(memory.clusters.counts) > 4 * 16
    assert {e: c for c, held in members.items() for e in held} == clustered
    assert all(view.nodes[e]["cluster_id"] == c for e, c in clustered.items())
    for index, count in enumerate(memory.clusters.counts):
        assert len(members.get(cluster_id_for(store_tenant, "hot", index), ())) == count


def test_the_encoded_record_stops_growing(memo) -> None:  # noqa: ANN001
    turns = locomo_shaped(copies=24)
    vectors = utterance_vectors(turns, memo)
    memory = new_memory(hot_events=32)
    header = RecordHeader(tenant="default", conversation_id="hot", partition=0)
    sizes: dict[int, int] = {}
    for turn, vector in zip(turns, vectors, strict=True):
        # Measured at a session's first turn, so that the open segment and the segmenter's recent turns (bounded,
        # but larger mid-session) are alike at both points.
        reached = next((n for n in (150, 600) if memory.stats.events >= n and n not in sizes), None)
        memory.add_turn(turn, vector)
        if reached is not None and memory.segmenter.context[-1].position == 0:
            sizes[reached] = len(encode_record(ConversationRecord(header=header, memory=memory.to_state())))
    assert set(sizes) == {150, 600}
    assert sizes[600] < 1.5 * sizes[150], sizes


def earlier_layout(header: RecordHeader, state: dict[str, object], embeddings: list[list[float]]) -> bytes:
    """A table record as the worker wrote it before the hot window: every event, centroids in the JSON, no totals."""
    meta = {"dtype": "f4", "lengths": [len(vector) for vector in embeddings]}
    parts = [json.dumps(state).encode(), json.dumps(meta).encode(), np.asarray(embeddings, np.float32).tobytes()]
    body = zlib.compress(b"".join(struct.pack(">I", len(part)) + part for part in parts))
    head = header.model_dump_json().encode()
    return b"CMS1" + struct.pack(">I", len(head)) + head + body


def test_a_record_written_before_the_hot_window_resumes_with_its_totals(long_run) -> None:  # noqa: ANN001
    """A table record of the earlier layout: restored, it reports the same health, holds only its window, and
    goes on exactly as the memory it was written from (whose window is large enough to hold every event)."""
    turns, vectors = long_run
    memory, _, _ = run_memory(turns[:160], vectors[:160], hot_events=10**9)
    state = json.loads(memory.to_state().model_dump_json(exclude={"events": {"__all__": {"embedding"}}}))
    for name in ("events", "turns", "adjacency_relations"):
        del state["stats"][name]
    del state["ledger"]["active_by_type"], state["evicted_pending"]
    header = RecordHeader(tenant="default", conversation_id="hot", partition=0)
    data = earlier_layout(header, state, [event.embedding for event in memory.events.values()])
    restored = ConversationMemory.from_state(decode_record(data).memory, BoundaryDetector(), EventMerger(),
                                             RelationExtractor(), Reclusterer(), 10**9)
    assert restored.health() == memory.health() and restored.health().events > 16
    assert fingerprint(restored) == fingerprint(memory)
    windowed = ConversationMemory.from_state(decode_record(data).memory, BoundaryDetector(), EventMerger(),
                                             RelationExtractor(), Reclusterer(), 16)
    assert windowed.health() == memory.health()
    assert len(windowed.events) == 16 and len(windowed.ledger.active) < len(memory.ledger.active)


def test_the_window_is_at_least_eight_events() -> None:
    with pytest.raises(ValueError, match="worker_hot_events"):
        Settings(_env_file=None, worker_hot_events=7)
    with pytest.raises(ValueError):
        PipelineConfig(hot_events=7)
    assert Settings(_env_file=None).worker_hot_events == PipelineConfig().hot_events == 256


def _events(count: int, event_builder: Callable[..., Event]) -> Iterator[Event]:
    names = ["Biscuit", "Atlas", "Lisbon", "Maya", "Oslo"]
    for n in range(count):
        event = event_builder("c1", n, seed=n)
        yield event.model_copy(update={
            "entities": [names[n % 5], names[(n * 3) % 5]][: 1 + n % 2],
            "participants": ["Ann", "Bob"] if n % 3 else ["Ann"],
            "observations": [o.model_copy(update={"session_id": f"s{n // 4}"}) for o in event.observations],
        })


def test_the_event_index_evicts_the_oldest_and_searches_like_a_fresh_index(event_builder) -> None:  # noqa: ANN001
    """Evictions (with compactions along the way) leave exactly the index a fresh build over the window gives."""
    window = 20
    index = EventIndex()
    held: list[Event] = []
    probe = np.random.default_rng(0).normal(size=32).astype(np.float32)
    for n, event in enumerate(_events(200, event_builder)):
        index.put(event)
        held.append(event)
        if n % 7 == 0 and len(held) >= 3:  # a merge rewrites an event in place
            changed = held[-3].model_copy(update={"entities": ["Oslo"], "embedding": held[-1].embedding})
            held[-3] = changed
            index.put(changed)
        while len(held) > window:
            assert index.evict_oldest() == held.pop(0)
        fresh = EventIndex(held)
        assert index.events == fresh.events and len(index) == len(fresh)
        assert [index.row_of(e.event_id) for e in held] == list(range(len(held)))
        np.testing.assert_array_equal(index.scores(slice(0, len(held)), probe), fresh.scores(slice(0, len(held)), probe))
        rows = np.arange(0, len(held), 3)
        np.testing.assert_array_equal(index.scores(rows, probe), fresh.scores(rows, probe))
        for name in ("Biscuit", "Atlas", "Lisbon", "Maya", "Oslo"):
            assert index.rows_naming(name) == fresh.rows_naming(name)
        for session in {o.session_id for e in held for o in e.observations}:
            assert index.rows_in_session(session) == fresh.rows_in_session(session)
        assert index.rows_with_participants(["Ann"]) == fresh.rows_with_participants(["Ann"])
        assert index.earlier_tail(3, 5) == fresh.earlier_tail(3, 5)
        assert index.last() == fresh.last()
    # Keys of evicted events only are gone: the indexes are bounded by the window, not the conversation.
    assert set(index._sessions) == {o.session_id for e in held for o in e.observations}


@pytest.fixture
def stores(tmp_path: Path, embedded_falkordb) -> Iterator[Stores]:  # noqa: ANN001
    with open_stores(Settings(_env_file=None, data_dir=tmp_path, falkordb_url=embedded_falkordb.url)) as opened:
        yield opened


def test_a_provisional_event_that_closes_and_leaves_the_window_in_one_batch_stays(memo, stores: Stores) -> None:  # noqa: ANN001
    """The worker deletes a provisional event whose segment was merged away; an event that closed and then left
    a small window within the same batch was not merged away and must stay in the stores."""
    turns = locomo_shaped(copies=1)[:150]
    records = []
    for offset, turn in enumerate(turns):
        key, value = encode_turn(turn)
        records.append(RawRecord(topic="t.turns", partition=0, offset=offset, key=key, value=value))
    processor = MemoryStreamProcessor(memo, stores, PipelineConfig(hot_events=8))
    # Each batch as the worker's checkpoint runs it on its store thread: applied, then the sinks flushed.
    first = processor.sinks.write(partial(processor.process, BatchInput(records=records[:3], states={}, tombstones={})))
    (value, _), = first.states.values()
    provisional = decode_record(value).header.provisional_event_id
    second = processor.sinks.write(partial(processor.process, BatchInput(records=records[3:],
                                                                         states={"default/hot": value}, tombstones={})))
    memory = processor.pipeline.memories["default/hot"]
    assert provisional not in memory.events and memory.stats.events > 8 + 1
    stored = {e.event_id: e for e in stores.vectors.conversation_events("default", "hot")}
    assert provisional in stored and not stored[provisional].provisional
    assert not [c for c in second.event_changes if c.op == "delete"]
