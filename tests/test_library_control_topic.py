"""``Memory.forget``, ``redact_turn`` and ``delete_tenant`` with a stream configured go through the control topic, as
the HTTP API and ``compassmem forget``/``redact`` do: the running worker deletes what it holds (stores and state),
and a replay of the turns topic by a new consumer group does not bring the memory back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compassmem import Memory, Unavailable
from compassmem.core.contracts.commands import CONTROL_COMMAND, ForgetCommand, RedactCommand
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from conftest import StreamRun, interleave, reference_snapshots, stream_conversation, wait_until
from test_streaming import graph_matches, replayed


def _gone_and_redacted(stores, redacted: str, kept_turns: int) -> None:  # noqa: ANN001 - Stores
    assert stores.vectors.conversation_turns("acme", "gone") == [], "the forgotten conversation is back"
    assert stores.vectors.count("acme", "gone") == 0
    turn_ids = [t.turn_id for t in stores.vectors.conversation_turns("acme", "kept")]
    assert redacted not in turn_ids, "the redacted turn is back"
    assert len(turn_ids) == kept_turns - 1, "other turns went missing"


def test_the_librarys_forget_and_redaction_reach_the_worker_and_survive_a_replay(
        stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    gone, kept = stream_conversation("gone", 1, tenant="acme"), stream_conversation("kept", 2, tenant="acme")
    turns = interleave([gone, kept])
    reference = reference_snapshots(turns, embedder)
    redacted = kept[1].turn_id
    data_dir = stream_run.root / "worker-data"
    worker = stream_run.start_worker("library", data_dir)
    worker.wait_assigned()
    with stream_run.producer() as producer:
        producer.produce(turns)
    graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
    try:
        wait_until(lambda: graph_matches(graph, reference), 90, "the worker to build the memory", 0.5, worker.tail)
    finally:
        graph.close()

    # The library beside the running worker, on the same stream. Its stores are its own (the worker holds its
    # embedded vector store, and the tests have no Qdrant server to share): the same memory, added here.
    settings = stream_run.settings(stream_run.root / "library-data", falkordb_url=None)
    with Memory(settings, embedder=embedder) as memory:
        memory.add(turns)
        forgotten = memory.forget("gone", tenant="acme")
        redaction = memory.redact_turn("kept", redacted, tenant="acme")
        assert forgotten.forget_published and forgotten.events_deleted > 0
        assert redaction.redaction_published
        assert memory.delete_tenant("initech").forget_published  # a tenant with no memory: only the command
        _gone_and_redacted(memory.stores, redacted, len(kept))
    # The worker also appends its own records there (forget-done), which are not commands.
    records = [json.loads(record.value) for record in stream_run.read_topic(settings.control_topic)]
    commands = [CONTROL_COMMAND.validate_python(record) for record in records if "command" in record]
    assert [(type(c), c.tenant, c.conversation_id) for c in commands] == [
        (ForgetCommand, "acme", "gone"), (RedactCommand, "acme", "kept"), (ForgetCommand, "initech", None)]

    wait_until(lambda: "stream.turn_redacted" in worker.log() and "stream.conversation_forgotten" in worker.log(),
               60, "the worker to apply the library's commands", 0.3, worker.tail)
    worker.stop()
    with stream_run.open_stores(data_dir) as stores:
        _gone_and_redacted(stores, redacted, len(kept))

    with replayed(stream_run, "library-replay") as (stores, _):
        _gone_and_redacted(stores, redacted, len(kept))


def test_a_command_the_broker_does_not_take_deletes_nothing(tmp_path: Path, embedder) -> None:  # noqa: ANN001
    """No broker at the configured address (the producer gives up after its 30 s bootstrap timeout): the deletion is
    refused with Unavailable and the memory stays. The three deletions share this step (``Memory._publish``)."""
    from dev_process import free_port
    from test_library import library_settings

    settings = library_settings(tmp_path / "data").model_copy(
        update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})
    turns = stream_conversation("talk", 1, tenant="acme")
    with Memory(settings, embedder=embedder) as memory:
        memory.add(turns)
        with pytest.raises(Unavailable, match="forget command was not acknowledged, nothing deleted"):
            memory.forget("talk", tenant="acme")
        assert len(memory.stores.vectors.conversation_turns("acme", "talk")) == len(turns)
