"""One turn id, one turn of its conversation (compassmem/write/turn_ids.py), in the worker's batch step over real
stores, where a turn id may be found in the stores only: a batch redone after a crash finds the writes of its first
attempt there and must apply its turns again, a replay of turns the state has let go of must change nothing.

The rule on the library, HTTP, a real broker and files: tests/test_library.py, tests/test_query_api.py,
tests/test_streaming.py, tests/test_importers.py.
"""

from __future__ import annotations

from pathlib import Path

from compassmem.core.config import Settings
from compassmem.core.contracts.dead_letters import DeadLetterReason
from compassmem.core.models import Turn
from compassmem.publish.producer import encode_turn
from compassmem.sinks.factory import Stores, open_stores
from compassmem.streams.processor import MemoryStreamProcessor
from compassmem.streams.state import decode_record
from compassmem.write.pipeline import PipelineConfig
from conftest import ConversationLog, stores_snapshot, stream_conversation

MODEL_CACHE = Path(".compassmem", "models").resolve()


def _stores(data_dir: Path, falkordb_url: str) -> Stores:
    return open_stores(Settings(_env_file=None, data_dir=data_dir, embedder_cache_dir=MODEL_CACHE,
                                falkordb_url=falkordb_url))


def _records(log: ConversationLog, turns: list[Turn], first: int) -> list:  # noqa: ANN401 - RawRecords
    return [log.record(first + n, encode_turn(turn)[1]) for n, turn in enumerate(turns)]


def test_a_batch_redone_after_its_stores_were_written_applies_its_turns_again(
        tmp_path: Path, embedded_falkordb, embedder) -> None:  # noqa: ANN001
    """A crash after the stores took a batch but before its state was written: the restarted worker redoes the batch
    from the state before it, finds its turns in the stores with the same content, and applies them all the same,
    so memory and state end as a run without the crash."""
    log = ConversationLog("redo", "redo")
    turns = [t.model_copy(update={"tenant": log.tenant}) for t in stream_conversation(log.conversation_id, 1)]
    first, second = _records(log, turns[:5], 0), _records(log, turns[5:], 5)

    def run(data_dir: Path, crash: bool) -> tuple[dict[str, object], dict[str, object], list[str]]:
        with _stores(data_dir, embedded_falkordb.url) as stores:
            try:
                state, _ = log.apply(MemoryStreamProcessor(embedder, stores), first, None)
                if crash:  # the stores take the second batch; its state is lost with the process
                    log.apply(MemoryStreamProcessor(embedder, stores), second, state)
                state, out = log.apply(MemoryStreamProcessor(embedder, stores), second, state)
                assert (out.stats.applied_turns, out.stats.replayed_skipped, out.dead_letters) == (len(second), 0, [])
                memory = decode_record(state).memory
                assert memory is not None
                # The state without the relations' creation times (the clock's), with which relations it holds.
                return (stores_snapshot(stores.vectors, stores.graph, log.key.decode()),
                        memory.model_dump(exclude={"ledger"}), sorted(memory.ledger.active))
            finally:  # the FalkorDB server is the session's
                stores.graph.delete_tenant(log.tenant)

    assert run(tmp_path / "crashed", crash=True) == run(tmp_path / "straight", crash=False)


def test_a_replay_of_turns_the_state_has_let_go_of_changes_nothing(
        tmp_path: Path, embedded_falkordb, embedder) -> None:  # noqa: ANN001
    """With the shortest memory window, a conversation's first events leave the worker's state; sent again, their
    turns are found in the stores only, and are skipped as the replays they are; another turn under one of their
    ids is dead-lettered."""
    log = ConversationLog("replay", "long")
    turns = [t.model_copy(update={"tenant": log.tenant})
             for t in stream_conversation(log.conversation_id, 2, sessions=6)]
    changed = turns[1].model_copy(update={"text": "Something else entirely, said under the same id."})
    with _stores(tmp_path, embedded_falkordb.url) as stores:
        try:
            processor = MemoryStreamProcessor(embedder, stores, PipelineConfig(hot_events=8))
            state, _ = log.apply(processor, [*_records(log, turns, 0), log.idle_close(len(turns), len(turns) - 1)],
                                 None)
            held = decode_record(state).memory
            assert held is not None and turns[0].turn_id not in {t for e in held.events for t in e.turn_ids}, \
                "the first event should have left the window"
            before = stores_snapshot(stores.vectors, stores.graph, log.key.decode())
            again = [changed, *turns]
            state, out = log.apply(processor, _records(log, again, len(turns) + 1), state)
            assert (out.stats.applied_turns, out.stats.replayed_skipped) == (0, len(turns))
            [letter] = out.dead_letters
            assert letter.reason_code is DeadLetterReason.DUPLICATE_TURN
            assert f"turn {changed.turn_id!r} of conversation 'long': memory has another turn" in letter.reason
            assert stores_snapshot(stores.vectors, stores.graph, log.key.decode()) == before
            assert decode_record(state).memory == held
        finally:
            stores.graph.delete_tenant(log.tenant)
