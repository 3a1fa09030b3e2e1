"""The streaming worker's pure parts: table-state snapshots, record decoding, control-message compatibility."""

from __future__ import annotations

import json

from conftest import stream_conversation

from compassmem.core.contracts.commands import ForgetCommand
from compassmem.core.contracts.dead_letters import DeadLetter
from compassmem.write.pipeline import MemoryPipeline
from compassmem.processors.clustering import Reclusterer
from compassmem.processors.conversation_memory import ConversationMemory, ConversationMemoryState
from compassmem.processors.merging import EventMerger
from compassmem.processors.relations import RelationExtractor
from compassmem.processors.segmentation import BoundaryDetector
from compassmem.publish.publisher import ForgetCommand as ApiForgetCommand
from compassmem.streams.decoding import RawRecord, TurnItem, decode_turns_record
from compassmem.streams.state import ConversationRecord, RecordHeader, decode_header, decode_record, encode_record


def _fingerprint(memory: ConversationMemory) -> list[str]:
    events = [f"{e.event_id}:{e.version}:{','.join(e.turn_ids)}:{e.cluster_id}" for e in memory.events.values()]
    relations = [f"{r.relation_id}:{r.superseded_by}" for r in memory.ledger.active.values()]
    return events + relations + [memory.segmenter.model_dump_json(), memory.clusters.model_dump_json()]


def test_state_snapshots_resume_exactly(embedder) -> None:  # noqa: ANN001
    """Snapshot to bytes and restore every few turns: the memory ends bit-for-bit as an uninterrupted one."""
    turns = stream_conversation("snap", 2, sessions=4)
    vectors = embedder.embed([t.search_text() for t in turns])
    straight = MemoryPipeline(embedder, []).memory_for("default", "snap")
    resumed_pipeline = MemoryPipeline(embedder, [])
    resumed = resumed_pipeline.memory_for("default", "snap")
    for index, (turn, vector) in enumerate(zip(turns, vectors, strict=True)):
        straight.add_turn(turn, vector)
        if index % 5 == 0:
            header = RecordHeader(tenant="default", conversation_id="snap", partition=2, last_offset=index)
            data = encode_record(ConversationRecord(header=header, memory=resumed.to_state()))
            assert decode_header(data) == header
            restored = decode_record(data)
            resumed = ConversationMemory.from_state(restored.memory, BoundaryDetector(), EventMerger(),
                                                    RelationExtractor(), Reclusterer())
        resumed.add_turn(turn, vector)
    assert _fingerprint(resumed) == _fingerprint(straight)
    assert [e.embedding for e in resumed.events.values()] == [e.embedding for e in straight.events.values()]


def test_the_state_record_covers_everything_a_conversation_memory_holds() -> None:
    """If ConversationMemory gains state, ConversationMemoryState must carry it, or a restarted worker loses it."""
    memory = ConversationMemory(BoundaryDetector(), EventMerger(), RelationExtractor(), Reclusterer())
    public = {name for name in vars(memory) if not name.startswith("_")}
    assert public == set(ConversationMemoryState.model_fields)


def _record(value: bytes, key: bytes = b"default/c1", headers: tuple = ()) -> RawRecord:
    return RawRecord(topic="turns", partition=1, offset=7, key=key, value=value, headers=headers, timestamp=1.7e9)


def test_decoding_accepts_a_turn_and_names_the_broken_field_otherwise() -> None:
    turn = {"conversation_id": "c1", "turn_id": "D1:1", "speaker": "Ann", "text": "hi there",
            "timestamp": "2024-03-04T09:00:00+00:00"}
    assert isinstance(decode_turns_record(_record(json.dumps(turn).encode())), TurnItem)
    naive = decode_turns_record(_record(json.dumps({**turn, "timestamp": "2024-03-04T09:00:00"}).encode()))
    assert isinstance(naive, DeadLetter) and naive.stage == "validate" and "timestamp" in naive.reason
    assert (naive.topic, naive.partition, naive.offset) == ("turns", 1, 7)
    broken = decode_turns_record(_record(b"{nope"))
    assert isinstance(broken, DeadLetter) and broken.stage == "decode"
    rekeyed = decode_turns_record(_record(json.dumps(turn).encode(), key=b"c1"))
    assert isinstance(rekeyed, DeadLetter) and rekeyed.stage == "route"


def test_the_api_forget_command_is_the_control_topic_schema() -> None:
    for api in (ApiForgetCommand(tenant="acme", conversation_id="c1"), ApiForgetCommand(tenant="acme")):
        ours = ForgetCommand.model_validate_json(api.model_dump_json())
        assert (ours.tenant, ours.conversation_id, ours.key) == (api.tenant, api.conversation_id, api.key)
