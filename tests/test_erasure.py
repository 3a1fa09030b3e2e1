"""Erasure down to the engines' files: after a redaction or a forget the words must leave the disk, not only the
stores' answers. qdrant-edge keeps a deleted point in its segment and its write-ahead log, FalkorDB in its
append-only file (and, with its query telemetry on, in a stream of its last queries), until compaction rewrites
them. Every test writes a canary word, checks that a search of every file under the data directory finds it (so
that the search can fail), erases it, and searches again: real stores, real files, a real worker and broker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from test_library import library_settings

from compassmem import Memory
from compassmem.core.contracts.commands import ForgetCommand, RedactCommand
from compassmem.core.models import IndexedTurn, Turn
from compassmem.sinks import qdrant_edge_backend
from compassmem.sinks.batching import turn_keyword_vector
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from conftest import StreamRun, wait_until


def canary() -> str:
    """A word no text holds but the one that carries it; letters then hex digits, which no stemmer shortens."""
    return f"Vorbex{uuid.uuid4().hex[:10]}"


def files_holding(root: Path, *words: str) -> dict[str, list[str]]:
    """Every file under ``root`` (recursively, binary, whatever its name) that holds a word, case-insensitively
    (keywords are stored lowercased): word -> the files, relative to ``root``."""
    wanted = {word: word.lower().encode() for word in words}
    found: dict[str, list[str]] = {word: [] for word in words}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            try:
                if not path.is_file():  # a socket
                    continue
                content = path.read_bytes().lower()
            except FileNotFoundError:  # deleted meanwhile by a store rewriting its files
                continue
            for word, needle in wanted.items():
                if needle in content:
                    found[word].append(str(path.relative_to(root)))
    return found


def said(conversation_id: str, *texts: str, tenant: str = "default") -> list[dict[str, object]]:
    speakers = ("Ana", "Ben")
    return [{"tenant": tenant, "conversation_id": conversation_id, "turn_id": str(number),
             "speaker": speakers[number % 2], "text": text, "timestamp": f"2024-03-04T09:{number:02d}:00+00:00"}
            for number, text in enumerate(texts, start=1)]


def kept_and_gone(redacted: str, forgotten: str) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """A conversation whose turn 2 says ``redacted`` (its other turns stay), and one that says ``forgotten``."""
    kept = said("lisbon", "We moved the Lisbon trip to May because the passport expired.",
                f"My cousin {redacted} will lend us the car for the trip.", "Great, then May works for everyone.")
    gone = said("router", f"The router {forgotten} drops the wifi every evening.",
                "Move it away from the heater and try again.")
    return kept, gone


def test_a_redaction_and_a_forget_leave_no_word_on_disk(tmp_path: Path) -> None:
    redacted, forgotten = canary(), canary()
    kept, gone = kept_and_gone(redacted, forgotten)
    settings = library_settings(tmp_path / "data").model_copy(update={"compact_after_erasure": True})
    with Memory(settings) as memory:
        memory.add(kept)
        memory.add(gone)
        before = files_holding(settings.data_dir, redacted, forgotten)
        for word in (redacted, forgotten):
            assert any(f.startswith("qdrant/") for f in before[word]), before
            assert any(f.startswith("falkordb/") for f in before[word]), before

        memory.redact_turn("lisbon", "2")
        memory.forget("router")
        assert files_holding(settings.data_dir, redacted, forgotten) == {redacted: [], forgotten: []}
        assert memory.query("When is the trip?", conversation_id="lisbon").turn_ids
    # The rewritten stores open again, with the rest of the memory.
    with Memory(settings) as memory:
        assert sorted(t.turn_id for t in memory.stores.vectors.conversation_turns("default", "lisbon")) == ["1", "3"]
    assert files_holding(settings.data_dir, redacted, forgotten) == {redacted: [], forgotten: []}


def test_compact_purges_what_earlier_erasures_left_on_disk(tmp_path: Path) -> None:
    """Without the setting the words stay in the engines' files after the erasure; `compassmem compact` takes
    them out."""
    redacted, forgotten = canary(), canary()
    kept, gone = kept_and_gone(redacted, forgotten)
    settings = library_settings(tmp_path / "data")
    with Memory(settings) as memory:
        memory.add(kept)
        memory.add(gone)
        memory.redact_turn("lisbon", "2")
        memory.forget("router")
    left = files_holding(settings.data_dir, redacted, forgotten)
    assert left[redacted] and left[forgotten], "the engines no longer keep deleted words: rethink this test"

    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update(COMPASSMEM_DATA_DIR=str(settings.data_dir),
               COMPASSMEM_EMBEDDER_CACHE_DIR=str(settings.embedder_cache_dir))
    compacted = subprocess.run([sys.executable, "-m", "compassmem.cli", "compact"], env=env, capture_output=True,
                               text=True, timeout=180, check=False)
    assert compacted.returncode == 0, compacted.stderr
    assert "stores compacted" in compacted.stdout
    assert files_holding(settings.data_dir, redacted, forgotten) == {redacted: [], forgotten: []}
    with Memory(settings) as memory:
        assert memory.conversations().conversations[0].conversation_id == "lisbon"


def test_deleting_a_tenant_compacts_too(tmp_path: Path) -> None:
    """``Memory.delete_tenant`` with COMPASSMEM_COMPACT_AFTER_ERASURE, as ``redact_turn`` and ``forget`` above."""
    word = canary()
    settings = library_settings(tmp_path / "data").model_copy(update={"compact_after_erasure": True})
    with Memory(settings) as memory:
        memory.add(said("router", f"The router {word} drops the wifi every evening.", tenant="acme"))
        memory.add(said("lisbon", "We moved the Lisbon trip to May."))
        assert files_holding(settings.data_dir, word)[word]
        assert memory.delete_tenant("acme").events_deleted > 0
        assert files_holding(settings.data_dir, word) == {word: []}
        assert memory.conversations().conversations[0].conversation_id == "lisbon"


# -- an interrupted compaction ----------------------------------------------------------------------------------


def _shard_with_a_deleted_turn(path: Path, word: str, turn_builder: Callable[..., IndexedTurn],
                               dim: int) -> EdgeVectorStore:
    """A store of five turns, then the one that says ``word`` deleted (still in the shard's files)."""
    store = EdgeVectorStore(path, dim=dim)
    turns = [turn_builder("c1", n, keywords=[word] if n == 3 else ["plain"]) for n in range(1, 6)]
    store.upsert_turns(turns, [turn_keyword_vector(t) for t in turns])
    store.delete_turn("default", "c1", "D1:3")
    store.flush()
    return store


def _turn_ids(path: Path, dim: int) -> list[str]:
    store = EdgeVectorStore(path, dim=dim)
    try:
        return sorted(t.turn_id for t in store.conversation_turns("default", "c1"))
    finally:
        store.close()


@pytest.mark.parametrize("interrupted", ["while copying", "after the copy was complete", "between the renames"])
def test_an_interrupted_compaction_leaves_the_old_shard_or_the_new_one(
        tmp_path: Path, turn_builder: Callable[..., IndexedTurn], store_dim: int, interrupted: str) -> None:
    """The compaction's steps run for real on a real shard, up to the point where a killed process would have
    stopped; the next open must find every live point (and, once the copy was complete, none of the deleted
    one's words), and no directory of the compaction left over."""
    word = canary()
    path = tmp_path / "qdrant"
    store = _shard_with_a_deleted_turn(path, word, turn_builder, store_dim)
    assert files_holding(tmp_path, word)[word], "the deleted turn should still be in the shard's files"
    if interrupted == "while copying":
        shutil.copytree(path, tmp_path / "qdrant.compacting")  # a copy the process did not finish
    else:
        qdrant_edge_backend._write_copy(store.shard, path, store._config)
    store.close()
    if interrupted == "between the renames":
        os.rename(path, tmp_path / "qdrant.erased")

    assert _turn_ids(path, store_dim) == ["D1:1", "D1:2", "D1:4", "D1:5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qdrant", "qdrant.lock"]
    assert bool(files_holding(tmp_path, word)[word]) == (interrupted == "while copying")


def test_a_second_open_of_a_shard_is_refused_while_the_first_holds_it(tmp_path: Path, store_dim: int) -> None:
    first = EdgeVectorStore(tmp_path / "qdrant", dim=store_dim)
    try:
        with pytest.raises(RuntimeError, match="another process or store object"):
            EdgeVectorStore(tmp_path / "qdrant", dim=store_dim)
    finally:
        first.close()
    EdgeVectorStore(tmp_path / "qdrant", dim=store_dim).close()


def test_compaction_on_a_falkordb_server_of_its_own(tmp_path: Path, event_builder: Callable[..., object]) -> None:
    """A FalkorDB the store does not run (COMPASSMEM_FALKORDB_URL) with its query telemetry on, as FalkorDB ships:
    the queries that wrote the words are kept in a stream beside the graph, and compaction takes them out too."""
    word = canary()
    with EmbeddedFalkorDB(tmp_path / "falkordb") as server:
        client = server.redis_client()
        client.execute_command("GRAPH.CONFIG", "SET", "CMD_INFO", "yes")
        store = FalkorDBGraphStore.from_url(server.url)
        try:
            store.upsert_events([event_builder("c1", 1, summary=f"about {word}"), event_builder("c2", 1)])
            store.delete_conversation("default", "c1")
            # FalkorDB writes its telemetry in the background.
            wait_until(lambda: client.keys("telemetry{*"), 30, "FalkorDB to record its queries")
            server.rewrite_aof()  # what the server's own compaction would do: the telemetry keeps the words
            assert files_holding(server.data_dir, word)[word]
            store.compact()
            assert files_holding(server.data_dir, word)[word] == []
            assert store.conversation_graph("default", "c2").number_of_nodes() == 1
        finally:
            store.close()


def test_compaction_rewrites_the_rdb_snapshot_of_a_server_that_keeps_one(
        tmp_path: Path, event_builder: Callable[..., object]) -> None:
    """A FalkorDB server with ``save`` points keeps the graph in ``dump.rdb`` too: compaction writes a new one."""
    word = canary()
    with EmbeddedFalkorDB(tmp_path / "falkordb") as server:
        client = server.redis_client()
        client.config_set("save", "3600 1")
        store = FalkorDBGraphStore.from_url(server.url)
        try:
            store.upsert_events([event_builder("c1", 1, summary=f"about {word}"), event_builder("c2", 1)])
            client.save()
            assert word.lower().encode() in (server.data_dir / "dump.rdb").read_bytes().lower()
            store.delete_conversation("default", "c1")
            store.compact()
            assert word.lower().encode() not in (server.data_dir / "dump.rdb").read_bytes().lower()
            assert files_holding(server.data_dir, word)[word] == []
            assert store.conversation_graph("default", "c2").number_of_nodes() == 1
        finally:
            store.close()


# -- the worker, through the control topic ----------------------------------------------------------------------


def test_the_worker_compacts_when_it_applies_a_redaction_and_a_forget(stream_run: StreamRun) -> None:
    """A worker with embedded stores (qdrant-edge and FalkorDB in its data directory) and
    COMPASSMEM_COMPACT_AFTER_ERASURE: once it has applied a redaction and a forget from the control topic, no file
    of its data directory holds their words, while it runs and after it stopped."""
    redacted, forgotten = canary(), canary()
    kept, gone = kept_and_gone(redacted, forgotten)
    data_dir = stream_run.root / "worker-data"
    worker = stream_run.start_worker("erase", data_dir, COMPASSMEM_FALKORDB_URL="",
                                     COMPASSMEM_COMPACT_AFTER_ERASURE="true")
    worker.wait_assigned()
    with stream_run.producer() as producer:
        producer.produce([Turn.model_validate(turn) for turn in [*kept, *gone]])
        wait_until(lambda: all(files_holding(data_dir, redacted, forgotten).values()), 90,
                   "the words to reach the stores' files", 0.5, worker.tail)
        producer.send_command(RedactCommand(tenant="default", conversation_id="lisbon", turn_id="2"))
        producer.send_command(ForgetCommand(tenant="default", conversation_id="router"))
    wait_until(lambda: not any(files_holding(data_dir, redacted, forgotten).values()), 90,
               "the words to leave every file of the data directory", 0.5,
               lambda: f"{files_holding(data_dir, redacted, forgotten)}\n{worker.tail()}")
    wait_until(lambda: "stream.turn_redacted" in worker.log() and "stream.conversation_forgotten" in worker.log(),
               60, "the worker to reach both markers", 0.3, worker.tail)
    worker.stop()
    assert "stores.compacted" in worker.log()
    assert files_holding(data_dir, redacted, forgotten) == {redacted: [], forgotten: []}
    with stream_run.open_stores(data_dir) as stores:
        assert sorted(t.turn_id for t in stores.vectors.conversation_turns("default", "lisbon")) == ["1", "3"]
        assert stores.vectors.count("default", "router") == 0
