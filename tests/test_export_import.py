"""``compassmem export`` / ``compassmem import`` (``Memory.export`` / ``Memory.import_``) on real embedded stores:
memory exported from one data directory and imported into a fresh one is the same memory (events with their turns
and vectors, relations with their types and superseded marks, clusters) and answers a question the same way; bad
files and targets that already hold the memory are refused with one clear message."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_library import library_settings, sample_turns

from compassmem import Memory, NotFound
from compassmem.embedding import Embedder, make_embedder
from compassmem.models import Cluster, RelationType
from compassmem.processors.relations import make_relation
from compassmem.transfer.records import ExportFormatError, ImportRefused

SAMPLE_CONVERSATION = "priya-tom"
OTHER_TENANT, OTHER_CONVERSATION = "acme", "greenhouse"
QUESTION = "Why was the Atlas launch moved?"


def other_tenant_turns() -> list[dict[str, Any]]:
    said = [("Zed", "The greenhouse router drops the wifi every evening around six."),
            ("Ana", "Is it the heater? It switches on at six and sits right next to the router."),
            ("Zed", "Could be. I will move the router to the potting shed tomorrow."),
            ("Ana", "Moved it yesterday, and the wifi held all evening."),
            ("Zed", "Great, then the heater was the problem.")]
    return [{"tenant": OTHER_TENANT, "conversation_id": OTHER_CONVERSATION, "turn_id": str(i), "speaker": speaker,
             "text": text, "timestamp": f"2024-05-0{i}T18:00:00+00:00"} for i, (speaker, text) in enumerate(said, 1)]


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    # One model for every data directory of the module: loading it is the slow part of opening a Memory.
    return make_embedder(library_settings(tmp_path_factory.mktemp("unused")))


def open_memory(data_dir: Path, embedder: Embedder) -> Memory:
    return Memory(library_settings(data_dir), embedder=embedder)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[Memory]:
    """The sample conversation and one of another tenant; plus a topic cluster, a part_of relation to it and a
    superseded relation written straight to the graph, as reclustering and contradiction checks write them (the
    sample is too short to make them), so that the round trip covers them."""
    with open_memory(tmp_path_factory.mktemp("source"), embedder) as memory:
        memory.add(sample_turns())
        memory.add(other_tenant_turns())
        events = memory.stores.vectors.conversation_events("default", SAMPLE_CONVERSATION)
        members = events[:2]
        cluster = Cluster(conversation_id=SAMPLE_CONVERSATION, cluster_id="topic-atlas",
                          members=[e.event_id for e in members], centroid=members[0].embedding or [],
                          label=["atlas", "launch"])
        part_of = make_relation(members[0], cluster.cluster_id, RelationType.PART_OF, 0.9, "same topic")
        superseded = make_relation(events[-1], events[0], RelationType.CAUSAL, 0.4, "it caused it").model_copy(
            update={"superseded_by": part_of.relation_id})
        memory.stores.graph.upsert_clusters([cluster])
        memory.stores.graph.upsert_relations([part_of, superseded])
        yield memory


@pytest.fixture(scope="module")
def exported(source: Memory, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("exports")
    files = {tenant: folder / f"{tenant}.jsonl" for tenant in ("default", OTHER_TENANT)}
    for tenant, path in files.items():
        summary = source.export(path, tenant=tenant)
        assert summary.conversations == 1 and summary.counts.turns > 0
    return files


@pytest.fixture(scope="module")
def restored(exported: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
             embedder: Embedder) -> Iterator[Memory]:
    with open_memory(tmp_path_factory.mktemp("restored"), embedder) as memory:
        for path in exported.values():
            memory.import_(path)
        yield memory


def stored(memory: Memory, tenant: str, conversation_id: str) -> dict[str, Any]:
    """Everything both stores hold of a conversation, in a comparable form."""
    graph = memory.stores.graph.conversation_graph(tenant, conversation_id)
    return {
        "events": memory.stores.vectors.conversation_events(tenant, conversation_id),
        "turns": memory.stores.vectors.conversation_turns(tenant, conversation_id),
        "graph_nodes": sorted(graph.nodes(data=True)),
        "graph_edges": sorted(graph.edges(keys=True, data=True)),
    }


def test_import_restores_the_same_memory(source: Memory, restored: Memory) -> None:
    for tenant, conversation_id in (("default", SAMPLE_CONVERSATION), (OTHER_TENANT, OTHER_CONVERSATION)):
        before, after = stored(source, tenant, conversation_id), stored(restored, tenant, conversation_id)
        assert before["turns"] and before["events"]
        # Vectors compare exactly: they travel as JSON numbers and are not embedded again.
        assert all(turn.embedding for turn in after["turns"])
        assert after == before
    graph = restored.graph(SAMPLE_CONVERSATION)
    assert graph.counts.clusters == 1 and graph.counts.superseded_relations == 1
    assert {edge.type for edge in graph.edges} >= {"part_of", "causal"}
    for tenant in ("default", OTHER_TENANT):
        assert restored.conversations(tenant=tenant) == source.conversations(tenant=tenant)


def test_the_same_question_ranks_the_same_turns(source: Memory, restored: Memory) -> None:
    for question, tenant, conversation_id in ((QUESTION, "default", SAMPLE_CONVERSATION),
                                              ("What made the wifi drop?", OTHER_TENANT, OTHER_CONVERSATION)):
        expected = source.query(question, conversation_id=conversation_id, tenant=tenant).turn_ids
        assert expected
        assert restored.query(question, conversation_id=conversation_id, tenant=tenant).turn_ids == expected


def test_file_lines_are_typed_records(exported: dict[str, Path], embedder: Embedder) -> None:
    lines = [json.loads(line) for line in exported["default"].read_text().splitlines()]
    header = lines[0]
    assert header["kind"] == "header" and header["tenant"] == "default" and header["dim"] == embedder.dim
    assert header["vector_space"] == library_settings(Path()).vector_space
    assert lines[-2]["kind"] == "conversation" and lines[-1] == {"kind": "end", "conversations": 1}
    kinds = {line["kind"] for line in lines}
    assert kinds == {"header", "event", "turn", "cluster", "relation", "conversation", "end"}
    assert len(lines[1]["event"]["embedding"]) == embedder.dim


def test_a_conversation_alone(source: Memory, tmp_path: Path, embedder: Embedder) -> None:
    out = io.StringIO()
    summary = source.export(out, conversation_id=SAMPLE_CONVERSATION)
    assert summary.conversations == 1
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["conversation_id"] == SAMPLE_CONVERSATION
    with pytest.raises(NotFound):
        source.export(tmp_path / "nothing.jsonl", conversation_id="no-such-conversation")
    assert not list(tmp_path.iterdir())
    with open_memory(tmp_path / "data", embedder) as target:
        target.import_(io.StringIO(out.getvalue()))
        assert stored(target, "default", SAMPLE_CONVERSATION) == stored(source, "default", SAMPLE_CONVERSATION)
        assert target.conversations(tenant=OTHER_TENANT).conversations == []


@pytest.mark.parametrize(("line", "edit", "message"), [
    (3, lambda text: text[: len(text) // 2], "line 3: not JSON"),
    (2, lambda text: text.replace('"summary":', '"summry":'), "line 2: event.summary: Field required"),
    (3, lambda text: json.dumps({**json.loads(text), "kind": "turns"}), "line 3: Input tag 'turns'"),
    (2, lambda text: text.replace('"tenant":"default"', '"tenant":"acme"'), "line 2: a event of tenant 'acme'"),
])
def test_a_bad_line_is_named_and_nothing_of_its_conversation_is_written(
        exported: dict[str, Path], tmp_path: Path, embedder: Embedder, line: int, edit: Any, message: str) -> None:
    lines = exported["default"].read_text().splitlines(keepends=True)
    lines[line - 1] = edit(lines[line - 1].rstrip("\n")) + "\n"
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match=message.replace("(", r"\(")):
            target.import_(io.StringIO("".join(lines)))
        assert target.conversations().conversations == []
        assert target.stores.vectors.count("default") == 0


def test_a_file_cut_off_is_refused(exported: dict[str, Path], tmp_path: Path, embedder: Embedder) -> None:
    lines = exported["default"].read_text().splitlines(keepends=True)
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match="ends without its 'end' line: it was cut off inside "
                                                    "conversation 'priya-tom'"):
            target.import_(io.StringIO("".join(lines[:10])))
        with pytest.raises(ExportFormatError, match=r"conversation 'priya-tom' should have .* the file holds"):
            target.import_(io.StringIO("".join(lines[:5] + lines[6:])))
        assert target.stores.vectors.count("default") == 0


def test_memory_already_there_is_refused_unless_replaced(exported: dict[str, Path], restored: Memory) -> None:
    before = stored(restored, "default", SAMPLE_CONVERSATION)
    with pytest.raises(ImportRefused, match="already holds memory for tenant 'default'"):
        restored.import_(exported["default"])
    summary = restored.import_(exported["default"], replace=True)
    assert summary.conversations == 1
    assert stored(restored, "default", SAMPLE_CONVERSATION) == before


def test_a_file_of_another_embedder_is_refused(exported: dict[str, Path], tmp_path: Path,
                                              embedder: Embedder) -> None:
    header, *rest = exported["default"].read_text().splitlines(keepends=True)
    for change in ({"vector_space": "torch:another-model"}, {"dim": 768}):
        edited = json.dumps({**json.loads(header), **change}) + "\n"
        with open_memory(tmp_path / "data", embedder) as target:
            with pytest.raises(ImportRefused, match="the file's vectors were made by the embedder"):
                target.import_(io.StringIO(edited + "".join(rest)))
            assert target.stores.vectors.count("default") == 0


def test_command_line_round_trip(exported: dict[str, Path], tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update(COMPASSMEM_DATA_DIR=str(tmp_path / "data"),
               COMPASSMEM_EMBEDDER_CACHE_DIR=str(library_settings(tmp_path).embedder_cache_dir))

    def compassmem(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compassmem.cli", *args], input=stdin, env=env,
                              capture_output=True, text=True, timeout=180, check=False)

    original = exported["default"].read_text()
    imported = compassmem("import", "-", stdin=original)
    assert imported.returncode == 0, imported.stderr
    assert "imported 1 conversation(s) of tenant 'default'" in imported.stdout
    again = compassmem("import", str(exported["default"]))
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1].startswith("error: the target already holds memory")
    exported_again = compassmem("export", "--conversation", SAMPLE_CONVERSATION)
    assert exported_again.returncode == 0, exported_again.stderr

    def records(text: str) -> list[dict[str, Any]]:
        return [line for line in map(json.loads, text.splitlines()) if line["kind"] != "header"]

    assert records(exported_again.stdout) == records(original)
    missing = compassmem("import", str(tmp_path / "missing.jsonl"))
    assert missing.returncode == 2 and "missing.jsonl: No such file or directory" in missing.stderr
