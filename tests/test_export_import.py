"""``compassmem export`` / ``compassmem import`` (``Memory.export`` / ``Memory.import_``) on real embedded stores:
memory exported from one data directory and imported into a fresh one is the same memory (events with their turns
and vectors, the passages of long turns, relations with their types and superseded marks, clusters) and answers a
question the same way; bad files and targets that already hold the memory are refused with one clear message."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_library import library_settings, sample_turns
from test_passages import FACT_QUESTION, chat_of_long_answers

from compassmem import Memory, NotFound
from compassmem.cli.main import main
from compassmem.core.contracts.query import QueryResponse
from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import Cluster, RelationType, Turn, turn_point_id
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.processors.relations import make_relation
from compassmem.sinks import event_payload as layout
from compassmem.sinks.batching import turn_keyword_vector
from compassmem.sinks.vector_store import STANDING_WISH_MARK, HitSearch, TurnHit
from compassmem.transfer.files import reading
from compassmem.transfer.importer import import_memory
from compassmem.transfer.records import Counts, ExportFormatError, ImportFailed, ImportRefused

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


def test_command_line_round_trip(exported: dict[str, Path], long_file: Path, tmp_path: Path) -> None:
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
    # The counts name the passages of long turns too.
    passages = records(long_file.read_text())[-2]["counts"]["passages"]
    assert passages > 20
    imported_long = compassmem("import", str(long_file))
    assert imported_long.returncode == 0, imported_long.stderr
    assert f"6 turns, {passages} passages" in imported_long.stdout
    exported_long = compassmem("export", "--tenant", LONG_TENANT)
    assert exported_long.returncode == 0, exported_long.stderr
    assert f"6 turns, {passages} passages" in exported_long.stderr
    assert records(exported_long.stdout) == records(long_file.read_text())
    missing = compassmem("import", str(tmp_path / "missing.jsonl"))
    assert missing.returncode == 2 and "missing.jsonl: No such file or directory" in missing.stderr


# -- a file is checked whole before anything is written ------------------------------------------------------------

TRIO = "trio"


@pytest.fixture(scope="module")
def trio_file(source: Memory, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tenant of three conversations, exported: the file the whole-file rules are tried on."""
    for conversation_id in ("first", "second", "third"):
        source.add([{**turn, "tenant": TRIO, "conversation_id": conversation_id} for turn in other_tenant_turns()])
    path = tmp_path_factory.mktemp("trio") / "trio.jsonl"
    assert source.export(path, tenant=TRIO).conversations == 3
    return path


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def as_file(lines: list[dict[str, Any]]) -> io.StringIO:
    # json.dumps writes NaN and Infinity as the bare words Python's json module reads back.
    return io.StringIO("".join(json.dumps(line) + "\n" for line in lines))


def stored_of_trio(memory: Memory) -> int:
    return memory.stores.vectors.count(TRIO) + len(memory.stores.graph.conversation_stats(TRIO))


def in_conversation(lines: list[dict[str, Any]], conversation_id: str, kind: str) -> int:
    """The index of the first ``kind`` record of a conversation."""
    return next(i for i, line in enumerate(lines)
                if line["kind"] == kind and line[kind]["conversation_id"] == conversation_id)


def test_a_file_cut_before_its_end_stores_nothing_and_the_whole_file_imports_after(
        trio_file: Path, tmp_path: Path, embedder: Embedder) -> None:
    """It used to store the two conversations it had read before finding the file cut, say nothing of them, and
    then refuse the complete file, since they were there."""
    lines = records_of(trio_file)
    third = in_conversation(lines, "third", "event")
    with open_memory(tmp_path / "data", embedder) as target:
        for broken, message in ((lines[:-1], "ends without its 'end' line"),
                                (lines[:third + 1] + ["{not json"] + lines[third + 1:], "not JSON")):
            text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in broken)
            with pytest.raises(ExportFormatError, match=f"{message}.*nothing of the file was imported"):
                target.import_(io.StringIO(text))
            assert stored_of_trio(target) == 0
        summary = target.import_(trio_file)
        assert summary.conversations == 3
        turns = sum(len(target.stores.vectors.conversation_turns(TRIO, c)) for c in ("first", "second", "third"))
        events = target.stores.vectors.count(TRIO)
        relations = sum(len(target.stores.graph.relations(TRIO, c)) for c in ("first", "second", "third"))
        assert summary.counts == Counts(turns=turns, events=events, relations=relations, clusters=0)


def _edit(kind: str, change: Any) -> Any:  # noqa: ANN401 - an edit of the file's records
    """Change the first ``kind`` record of the third conversation."""
    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        change(lines[in_conversation(lines, "third", kind)][kind])
        return lines
    return edit


def _set(field: str, value: Any) -> Any:  # noqa: ANN401
    return lambda record: record.__setitem__(field, value)


def _drop_a_turn(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A turn line taken out, its conversation's count mended: its event still holds it."""
    index = in_conversation(lines, "third", "turn")
    del lines[index]
    closing = next(line for line in lines[index:] if line["kind"] == "conversation")
    closing["counts"]["turns"] -= 1
    return lines


def _repeat_a_turn(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index = in_conversation(lines, "third", "turn")
    lines.insert(index, lines[index])
    closing = next(line for line in lines[index:] if line["kind"] == "conversation")
    closing["counts"]["turns"] += 1
    return lines


@pytest.mark.parametrize(("edit", "message"), [
    (_edit("turn", lambda t: t["embedding"].__setitem__(0, float("nan"))), "turn.embedding: holds NaN"),
    (_edit("event", lambda e: e["embedding"].__setitem__(0, float("inf"))), "event.embedding: holds NaN or infinite"),
    (_edit("turn", lambda t: t.__setitem__("embedding", [2 * x for x in t["embedding"]])),
     r"turn.embedding: has norm 2; a stored embedding is normalised to norm 1 \(within 0.001\)"),
    # A vector cut short: its dimension is named, not the norm that comes with it.
    (_edit("turn", lambda t: t.__setitem__("embedding", t["embedding"][:3])),
     "turn.embedding: has 3 dimensions; the file's header says 384"),
    (_edit("event", _set("embedding", None)), "event.embedding: has no vector; the file's header says 384 dimensions"),
    (_edit("turn", _set("text", "x" * 8_000_000)), "turn.text: is 8000000 bytes; the limit is"),
    (_edit("turn", _set("speaker", "Z" * 5000)),
     r"turn.speaker: must be at most 100 characters once normalised \(NFKC\), got 5000"),
    (_edit("turn", _set("text", "a\x00b")), "turn.text: must not contain control characters such as U\\+0000"),
    (_edit("event", _set("summary", "\x1b[2J cleared")), "event.summary: must not contain control characters such as "
                                                         r"U\+001B"),
    (_edit("turn", _set("speaker", "\ud800")), "turn.speaker: must not contain a lone surrogate"),
    (_drop_a_turn, "event '.*' holds turn '.*', which the file does not hold"),
    (_repeat_a_turn, r"turn '.*' of conversation 'third' again \(first on line"),
    (_edit("event", lambda e: e["merged_from"].append("x/y")), r"event.merged_from.0.: .*'/' U\+002F"),
    # One id, one conversation: an id a store would trim or a reader could not tell from another is refused.
    (_edit("turn", _set("turn_id", "D1:1 ")), r"turn.turn_id: .*U\+0020 \(SPACE\)"),
    (_edit("turn", _set("session_id", "session 1")), r"turn.session_id: .*U\+0020 \(SPACE\)"),
    (_edit("event", _set("event_id", "e\u200b1")), r"event.event_id: .*U\+200B"),
    (_edit("turn", _set("speaker", "\u0410nn")), "turn.speaker: must not mix letters of the Cyrillic and Latin"),
    # No string anywhere over what a stored turn may hold (141 KiB).
    (_edit("event", _set("summary", "x" * 150_000)), "event.summary: is 150000 bytes; the limit is 144544 bytes"),
    # A turn's event must hold it.
    (_edit("turn", _set("event_id", "ghost")), "event '.*' holds turn '.*', which line [0-9]+ gives to event 'ghost'"),
])
def test_a_bad_record_anywhere_is_named_and_nothing_is_written(
        trio_file: Path, tmp_path: Path, embedder: Embedder, edit: Any, message: str) -> None:
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match=f"line [0-9]+: {message}"):
            target.import_(as_file(edit(records_of(trio_file))))
        assert stored_of_trio(target) == 0


def test_references_between_records_are_checked(source: Memory, tmp_path: Path, embedder: Embedder) -> None:
    """Relations must join events (or a topic) of the file and a topic's members must be its events: the sample
    conversation's file has both."""
    out = io.StringIO()
    source.export(out, conversation_id=SAMPLE_CONVERSATION)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    relation = next(line["relation"] for line in lines if line["kind"] == "relation")
    cluster = next(line["cluster"] for line in lines if line["kind"] == "cluster")
    with open_memory(tmp_path / "data", embedder) as target:
        for record, field, message in ((relation, "target", "the relation joins 'ghost'"),
                                       (cluster, "members", "topic 'topic-atlas' lists event 'ghost'")):
            original = record[field]
            record[field] = "ghost" if field == "target" else [*original, "ghost"]
            with pytest.raises(ExportFormatError, match=message):
                target.import_(as_file(lines))
            record[field] = original
        assert target.stores.vectors.count("default") == 0
        target.import_(as_file(lines))
        assert target.stores.vectors.count("default") > 0


def test_a_line_too_long_is_refused_before_it_is_read_whole(trio_file: Path, tmp_path: Path,
                                                            embedder: Embedder) -> None:
    lines = records_of(trio_file)
    header = json.dumps(lines[0]) + "\n"
    with open_memory(tmp_path / "data", embedder) as target, \
            pytest.raises(ExportFormatError, match="line 2: longer than 16,777,216 characters"):
        target.import_(io.StringIO(header + '{"kind": "turn", "turn": {"text": "' + "x" * 17_000_000 + '"}}\n'))


def test_a_write_that_fails_part_way_is_undone(trio_file: Path, tmp_path: Path, embedder: Embedder) -> None:
    """Writing fails after the second conversation (here: the callback that follows each conversation raises, as a
    store that stops answering would): without --replace both are deleted again; with it they stay (they replaced
    the stored ones) and the error names which conversation holds what."""
    def failing_after(count: int) -> Any:  # noqa: ANN401
        written: list[str] = []

        def on_written(tenant: str, conversation_id: str) -> None:
            written.append(conversation_id)
            if len(written) == count:
                raise RuntimeError("the disk is full")
        return on_written

    with open_memory(tmp_path / "data", embedder) as target:
        settings = target.settings
        with trio_file.open() as stream, pytest.raises(ImportFailed, match="the stores hold nothing of the file"):
            import_memory(target.stores, stream, vector_space=settings.vector_space, dim=embedder.dim,
                          on_written=failing_after(2))
        assert stored_of_trio(target) == 0
        target.import_(trio_file)
        before = stored_of_trio(target)
        with trio_file.open() as stream, pytest.raises(
                ImportFailed, match="written whole, replacing what the stores held: 'first', 'second'; not written, "
                                    "their stored memory unchanged: 'third'"):
            import_memory(target.stores, stream, vector_space=settings.vector_space, dim=embedder.dim,
                          replace=True, on_written=failing_after(2))
        assert stored_of_trio(target) == before


def test_the_command_line_shows_no_control_character_and_no_traceback(trio_file: Path, tmp_path: Path) -> None:
    """A file path with an escape sequence in its error, a lone surrogate in a record: each one line on stderr,
    control characters shown as escapes."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update(COMPASSMEM_DATA_DIR=str(tmp_path / "data"),
               COMPASSMEM_EMBEDDER_CACHE_DIR=str(library_settings(tmp_path).embedder_cache_dir))
    lines = records_of(trio_file)
    lines[in_conversation(lines, "second", "turn")]["turn"]["speaker"] = "\ud800"
    broken = tmp_path / "broken.jsonl"
    broken.write_text(as_file(lines).getvalue())
    for path, said in ((broken, "turn.speaker: must not contain a lone surrogate"),
                       (tmp_path / "missing-\x1b[2J.jsonl", "missing-\\x1b[2J.jsonl: No such file or directory")):
        run = subprocess.run([sys.executable, "-m", "compassmem.cli", "import", str(path)], env=env,
                             capture_output=True, text=True, timeout=180, check=False)
        assert run.returncode == 2, run.stderr
        assert "Traceback" not in run.stderr and "\x1b" not in run.stderr + run.stdout
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and said in last, last


def test_an_export_refuses_what_an_import_would_refuse(tmp_path: Path, embedder: Embedder) -> None:
    """qdrant-edge stores a NaN vector (it came in through an import before the checks); an export used to write it
    as null, a backup no import could restore. Now it fails naming the record, and leaves no file."""
    with open_memory(tmp_path / "data", embedder) as memory:
        memory.add(other_tenant_turns())
        turn = memory.stores.vectors.conversation_turns(OTHER_TENANT, OTHER_CONVERSATION)[0]
        memory.stores.vectors.upsert_turns([turn.model_copy(update={"embedding": [float("nan")] * embedder.dim})],
                                           [turn_keyword_vector(turn)])
        backup = tmp_path / "backup.jsonl"
        with pytest.raises(ExportFormatError, match=f"turn '{turn.turn_id}' of conversation '{OTHER_CONVERSATION}', "
                                                    "which an import would refuse .turn.embedding: holds NaN"):
            memory.export(backup, tenant=OTHER_TENANT)
        assert not backup.exists()


@pytest.mark.parametrize(("centroid", "message"), [
    (lambda c: [float("nan"), *c[1:]], "cluster.centroid: holds NaN"),
    (lambda c: c[:3], "cluster.centroid: has 3 dimensions; the file's header says 384"),
    (lambda c: [0.0] * len(c), "cluster.centroid: has norm 0; a topic's centroid has a norm above 0 and at most 1"),
    (lambda c: [2 * x for x in c], "cluster.centroid: has norm 2; a topic's centroid has a norm above 0 and at most 1"),
])
def test_a_topics_centroid_is_finite_of_the_headers_dimension_and_of_norm_above_0_and_at_most_1(
        exported: dict[str, Path], tmp_path: Path, embedder: Embedder, centroid: Any, message: str) -> None:
    lines = records_of(exported["default"])
    cluster = next(line["cluster"] for line in lines if line["kind"] == "cluster")
    cluster["centroid"] = centroid(cluster["centroid"])
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match=f"line [0-9]+: {message}"):
            target.import_(as_file(lines))
        assert target.stores.vectors.count("default") == 0


def _twice(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conversation 'first' again after the others, the end line counting it."""
    block = lines[1:next(i for i, line in enumerate(lines) if line["kind"] == "conversation") + 1]
    lines[-1]["conversations"] += 1
    return [*lines[:-1], *json.loads(json.dumps(block)), lines[-1]]


def _event_of_another_conversation(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines[in_conversation(lines, "second", "event")]["event"]["event_id"] = \
        lines[in_conversation(lines, "first", "event")]["event"]["event_id"]
    return lines


@pytest.mark.parametrize(("edit", "message"), [
    (_twice, r"conversation 'first' again \(line [0-9]+ closed it\)"),
    (_event_of_another_conversation, "event '.*' again, in another conversation"),
])
def test_an_id_of_another_conversation_or_a_conversation_twice_is_refused(
        trio_file: Path, tmp_path: Path, embedder: Embedder, edit: Any, message: str) -> None:
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match=f"line [0-9]+: {message}"):
            target.import_(as_file(edit(records_of(trio_file))))
        assert stored_of_trio(target) == 0


def test_bytes_that_are_not_utf8_are_refused_naming_their_line(trio_file: Path, tmp_path: Path,
                                                                embedder: Embedder) -> None:
    lines = trio_file.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"', b'"\xff', 1)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"".join(lines))
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match="line ([0-9]+) or soon after: not UTF-8 text") as refused:
            target.import_(broken)
        assert stored_of_trio(target) == 0
    # A text stream decodes a block at a time: the line named is the bad byte's or one a little before it.
    assert 1 <= int(refused.value.args[0].split()[1]) <= 5


class _ChangedOnSecondRead(io.StringIO):
    """A file that another process rewrites between the import's two passes (the import seeks back for the second)."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(first)
        self._second: str | None = second

    def seek(self, position: int, whence: int = 0) -> int:
        if self._second is not None:
            text, self._second = self._second, None
            super().seek(0)
            self.truncate()
            self.write(text)
        return super().seek(position, whence)


def test_a_file_that_changes_between_the_two_passes_is_refused(trio_file: Path, tmp_path: Path,
                                                                embedder: Embedder) -> None:
    original = trio_file.read_text()
    lines = records_of(trio_file)
    lines[in_conversation(lines, "second", "turn")]["turn"]["text"] = "Words the first pass never read."
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ImportFailed, match="the file changed while it was being imported"):
            target.import_(_ChangedOnSecondRead(original, as_file(lines).getvalue()))
        assert stored_of_trio(target) == 0


def test_an_import_from_a_pipe_reads_an_unnamed_copy_deleted_when_it_ends() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"kind": "header"}\n')
    os.close(write_end)
    with open(read_end, encoding="utf-8") as pipe, reading(pipe) as copy:
        assert not pipe.seekable() and copy is not pipe
        assert os.fstat(copy.fileno()).st_nlink == 0  # no name in any directory
        assert copy.read() == '{"kind": "header"}\n'
    assert copy.closed  # and with its last descriptor closed, its blocks are freed


# -- the passages of long turns ------------------------------------------------------------------------------------

LONG_TENANT, LONG_CONVERSATION = "longform", "advice"


def stored_passages(memory: Memory, tenant: str) -> int:
    """Every passage point of the tenant, searched or not."""
    return memory.stores.vectors._count(layout.tenant_points(tenant, None, layout.PASSAGE_KIND))  # noqa: SLF001


def stored_turns(memory: Memory, tenant: str, conversation_id: str) -> list[str]:
    return [turn.turn_id for turn in memory.stores.vectors.conversation_turns(tenant, conversation_id)]


@pytest.fixture(scope="module")
def long_file(source: Memory, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tenant holding three answers of about 3,000 words (tests/test_passages.py), exported: the fact sits in the
    fifth paragraph of the first, which only a passage's vector knows of."""
    source.add([Turn.model_validate({**turn.model_dump(), "tenant": LONG_TENANT}) for turn in chat_of_long_answers()])
    path = tmp_path_factory.mktemp("long") / "longform.jsonl"
    summary = source.export(path, tenant=LONG_TENANT)
    assert summary.counts.passages == stored_passages(source, LONG_TENANT) > 20
    return path


def _passage_hits(memory: Memory, question: str) -> list[tuple[str, int, float]]:
    """Each turn of the long conversation found by a passage (all of them: more than it holds), as (turn, the
    passage's index, score)."""
    vector = memory.embedder.embed([question])[0]
    hits = memory.stores.vectors.hits(SearchScope.conversation(LONG_TENANT, LONG_CONVERSATION),
                                      [HitSearch("passage", vector, 100)])[0]
    return [(hit.turn_id, hit.passage, hit.score) for hit in hits if isinstance(hit, TurnHit)]


def _shown(answer: QueryResponse, turn_id: str) -> tuple[tuple[int, int] | None, str]:
    turn = next(t for item in answer.evidence for t in item.turns if t.turn_id == turn_id)
    return turn.span, turn.text


def test_the_passages_of_long_turns_travel_with_them_and_find_the_same_fact(
        source: Memory, long_file: Path, tmp_path: Path, embedder: Embedder) -> None:
    lines = records_of(long_file)
    assert lines[0]["version"] == 2
    # Every passage line follows its turn's line or the passage before it.
    for before, line in itertools.pairwise(lines):
        if line["kind"] == "passage":
            passage = line["passage"]
            assert (before["kind"], before[before["kind"]]["turn_id"]) in (("turn", passage["turn_id"]),
                                                                           ("passage", passage["turn_id"]))
            assert before.get("passage", {"index": 0})["index"] == passage["index"] - 1
    turn_ids = stored_turns(source, LONG_TENANT, LONG_CONVERSATION)
    answer_before = source.query(FACT_QUESTION, conversation_id=LONG_CONVERSATION, tenant=LONG_TENANT,
                                 budget_turns=3)
    with open_memory(tmp_path / "data", embedder) as target:
        summary = target.import_(long_file)
        assert summary.counts.passages == stored_passages(target, LONG_TENANT) == stored_passages(source, LONG_TENANT)
        assert (target.stores.vectors.passages_of_turns(LONG_TENANT, LONG_CONVERSATION, turn_ids)
                == source.stores.vectors.passages_of_turns(LONG_TENANT, LONG_CONVERSATION, turn_ids))
        # The fact's passage is found by meaning after the import as before it, and every turn by its best passage
        # with the same score. (The other answers repeat their paragraphs: which of a turn's equal passages stands
        # for it is the engine's choice, so only the fact's index compares.)
        hits, hits_before = _passage_hits(target, FACT_QUESTION), _passage_hits(source, FACT_QUESTION)
        assert hits[0] == hits_before[0] and hits[0][0] == "m1" and hits[0][1] >= 1
        assert [(turn_id, score) for turn_id, _, score in hits] == [(turn_id, score) for turn_id, _, score in
                                                                     hits_before]
        answer_after = target.query(FACT_QUESTION, conversation_id=LONG_CONVERSATION, tenant=LONG_TENANT,
                                    budget_turns=3)
    assert answer_after.turn_ids[0] == "m1"
    span, text = _shown(answer_after, "m1")
    assert (span, text) == _shown(answer_before, "m1")
    assert span is not None and "48,000 euros" in text


def test_a_file_of_version_1_without_passages_still_imports(long_file: Path, tmp_path: Path,
                                                            embedder: Embedder) -> None:
    """What an export wrote before passages travelled: version 1, no passage lines, counts without passages."""
    lines = records_of(long_file)
    old = [line for line in lines if line["kind"] != "passage"]
    old[0]["version"] = 1
    for line in old:
        if line["kind"] == "conversation":
            del line["counts"]["passages"]
    with open_memory(tmp_path / "data", embedder) as target:
        with pytest.raises(ExportFormatError, match="line [0-9]+: a passage line in a file of version 1; passages came "
                                                    "with version 2"):
            target.import_(as_file([{**lines[0], "version": 1}, *lines[1:]]))
        with pytest.raises(ExportFormatError, match="line 1: version: the file is of version 3 of the "
                                                    "compassmem-export format, newer than this compassmem reads"):
            target.import_(as_file([{**lines[0], "version": 3}, *lines[1:]]))
        assert target.stores.vectors.count(LONG_TENANT) == 0
        summary = target.import_(as_file(old))
        assert summary.counts.passages == 0 and summary.counts.turns == 6
        assert len(stored_turns(target, LONG_TENANT, LONG_CONVERSATION)) == 6
        assert stored_passages(target, LONG_TENANT) == 0


def _first_passage(lines: list[dict[str, Any]]) -> int:
    return next(i for i, line in enumerate(lines) if line["kind"] == "passage")


def _passage_edit(change: Any) -> Any:  # noqa: ANN401 - an edit of the file's records
    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        change(lines[_first_passage(lines)]["passage"])
        return lines
    return edit


def _repeat_a_passage(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index = _first_passage(lines)
    lines.insert(index + 1, lines[index])
    return lines


def _passage_before_its_turn(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index = _first_passage(lines)
    lines.insert(index - 1, lines.pop(index))
    return lines


def _drop_a_passage(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    del lines[_first_passage(lines)]
    return lines


PASSAGE_EDITS = [
    (_passage_edit(lambda p: p["embedding"].append(0.0)),
     "passage.embedding: has 385 dimensions; the file's header says 384"),
    (_passage_edit(lambda p: p["embedding"].__setitem__(0, float("nan"))), "passage.embedding: holds NaN"),
    (_passage_edit(_set("turn_id", "ghost")),
     "passage.turn_id: turn 'ghost' has no line before this passage in conversation 'advice'"),
    (_passage_before_its_turn, "passage.turn_id: turn 'm1' has no line before this passage"),
    (_passage_edit(_set("conversation_id", "elsewhere")),
     "a record of conversation 'elsewhere' inside conversation 'advice'"),
    (_passage_edit(_set("tenant", "acme")), "a passage of tenant 'acme' in a file of tenant 'longform'"),
    (_passage_edit(_set("index", 0)), "passage.index: Input should be greater than or equal to 1"),
    (_repeat_a_passage, r"passage 1 of turn 'm1' of conversation 'advice' again \(first on line"),
    (_passage_edit(_set("end", 1_000_000)),
     (r"passage.end: is 1000000, past the end of turn 'm1', whose text is [0-9]+ characters long \(the turn is on "
      r"line [0-9]+\)")),
    (_passage_edit(lambda p: p.__setitem__("end", p["start"])), "passage.end: is [0-9]+, not after passage.start"),
    (_passage_edit(_set("subject_id", "cust-9")), "passage.subject_id: is 'cust-9', and turn 'm1' is about None"),
    (_drop_a_passage, r"conversation 'advice' should have .* the file holds"),
]


def test_a_bad_passage_line_is_named_and_nothing_is_written(long_file: Path, tmp_path: Path,
                                                           embedder: Embedder) -> None:
    with open_memory(tmp_path / "data", embedder) as target:
        for edit, message in PASSAGE_EDITS:
            with pytest.raises(ExportFormatError, match=f"line [0-9]+: {message}"):
                target.import_(as_file(edit(records_of(long_file))))
            assert target.stores.vectors.count(LONG_TENANT) == 0 and stored_passages(target, LONG_TENANT) == 0
        assert target.conversations(tenant=LONG_TENANT).conversations == []


def test_undoing_or_replacing_an_import_takes_its_passages(long_file: Path, tmp_path: Path,
                                                           embedder: Embedder) -> None:
    """``Stores.delete_conversation``, which undoes a failed import and clears the way for --replace, deletes the
    conversation's passage points with its turns."""
    def full_disk(tenant: str, conversation_id: str) -> None:
        raise RuntimeError("the disk is full")

    with open_memory(tmp_path / "data", embedder) as target:
        settings = target.settings
        with long_file.open() as stream, pytest.raises(ImportFailed, match="the stores hold nothing of the file"):
            import_memory(target.stores, stream, vector_space=settings.vector_space, dim=embedder.dim,
                          on_written=full_disk)
        assert stored_passages(target, LONG_TENANT) == 0 and stored_turns(target, LONG_TENANT, LONG_CONVERSATION) == []
        expected = target.import_(long_file).counts.passages
        assert target.import_(long_file, replace=True).counts.passages == expected
        assert stored_passages(target, LONG_TENANT) == expected


def test_an_import_derives_the_mark_a_turn_stored_before_it_lacks(tmp_path: Path, embedder: Embedder) -> None:
    """Export and import migrate a memory written before turns were stored with their standing-wish mark: the import
    writes it as derived now, whatever the file says."""
    wish = "Always answer in metric units when I ask about distances."
    turns = [{"conversation_id": "trip", "turn_id": str(i), "speaker": speaker, "text": text,
              "timestamp": f"2024-05-0{i}T10:00:00+00:00"}
             for i, (speaker, text) in enumerate([("user", wish), ("assistant", "Understood, metric it is."),
                                                  ("user", "How far is Lyon from Paris by train?")], 1)]
    scope = SearchScope.conversation("default", "trip")
    with open_memory(tmp_path / "old", embedder) as old:
        old.add(turns)
        vectors = old.stores.vectors
        assert isinstance(vectors, layout.PointStore)
        written = vectors.conversation_turns("default", "trip")
        vectors._upsert([layout.PointData(
            turn_point_id(t.tenant, t.conversation_id, t.turn_id), list(t.embedding or []), layout.TURN_SPARSE_VECTOR,
            turn_keyword_vector(t), {k: v for k, v in layout.turn_to_payload(t).items() if k != layout.MARKS_FIELD})
            for t in written])
        query = embedder.embed(["Which units should distances be in?"])[0]
        assert vectors.hits(scope, [HitSearch("turn", query, 5, marks=(STANDING_WISH_MARK,))]) == [[]]
        out = io.StringIO()
        old.export(out, tenant="default")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    for line in lines:  # what a file says of them is not what is stored
        if line.get("kind") == "turn":
            line["turn"][layout.MARKS_FIELD] = [STANDING_WISH_MARK]
    with open_memory(tmp_path / "new", embedder) as new:
        new.import_(io.StringIO("\n".join(json.dumps(line) for line in lines) + "\n"))
        vectors = new.stores.vectors
        found = vectors.hits(scope, [HitSearch("turn", query, 5, marks=(STANDING_WISH_MARK,))])[0]
        assert [hit.turn_id for hit in found if isinstance(hit, TurnHit)] == ["1"]


# -- ids stored before the id rule ----------------------------------------------------------------------------------

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``compassmem --data-dir DATA ARGS...`` in this process: (exit code, stdout, stderr). An exception main does
    not turn into one error line (a traceback) fails the test."""
    monkeypatch.setenv("COMPASSMEM_EMBEDDER_CACHE_DIR", str(library_settings(Path()).embedder_cache_dir))

    def run(data_dir: Path, *args: str) -> tuple[int, str, str]:
        code = main(["--data-dir", str(data_dir), *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


def test_a_fullwidth_conversation_id_in_a_file_is_refused_naming_it(exported: dict[str, Path], tmp_path: Path,
                                                                    cli: Cli) -> None:
    """The closing line read it as 'priya-tom' and the records kept it as it was, so the file was refused as
    "closes conversation 'priya-tom', which has no records before it"."""
    fullwidth = "ｐｒｉｙａ-ｔｏｍ"
    edited = tmp_path / "fullwidth.jsonl"
    edited.write_text(exported["default"].read_text(encoding="utf-8").replace(f'"{SAMPLE_CONVERSATION}"',
                                                                              f'"{fullwidth}"'), encoding="utf-8")
    code, _, err = cli(tmp_path / "data", "import", str(edited))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: line 2: event.conversation_id: '{fullwidth}' is not in its canonical form "
                           f"'{SAMPLE_CONVERSATION}'"), last
    assert "no records before it" not in err


LEGACY = "legacy"
# Stored id -> turn ids as stored (None: the chat's own), and what migrate-ids makes of it (None: left as it is).
LEGACY_CONVERSATIONS: dict[str, tuple[Callable[[str], str] | None, str | None]] = {
    "ｇｒｅｅｎｈｏｕｓｅ": (None, "greenhouse"),
    "shed": (lambda turn_id: chr(ord("０") + int(turn_id)), "shed"),  # fullwidth digits
    "green house": (None, None),  # no form the rule accepts
    "ｐｏｔｔｉｎｇ": (None, None),  # its canonical form is the stored 'potting'
}


def legacy_turns(conversation_id: str, turn_ids: Callable[[str], str] | None) -> list[Turn]:
    """The greenhouse chat as turns were before the id rule: made without validation (``model_construct``), so the
    write path and its sinks store the ids as they are."""
    turns = [Turn.model_validate({**turn, "tenant": LEGACY}) for turn in other_tenant_turns()]
    return [Turn.model_construct(**{**turn.model_dump(), "conversation_id": conversation_id,
                                    "turn_id": turn_ids(turn.turn_id) if turn_ids else turn.turn_id})
            for turn in turns]


def conversations_of(path: Path) -> list[str]:
    return [line["conversation_id"] for line in records_of(path) if line["kind"] == "conversation"]


def test_ids_stored_before_the_id_rule_are_skipped_by_export_and_rewritten_or_forgotten_by_migrate_ids(
        tmp_path: Path, embedder: Embedder, cli: Cli) -> None:
    """A store written before the id rule: `compassmem export --tenant` ended in a pydantic traceback (or refused
    the whole tenant) and wrote no file, and the conversations could not be forgotten. Export now writes the rest and
    names what it left out; migrate-ids rewrites the ids to their canonical form, or reports a conversation it
    cannot rewrite, which --forget then deletes by its stored id."""
    data = tmp_path / "data"
    with open_memory(data, embedder) as memory:
        memory.add([{**turn, "tenant": LEGACY, "conversation_id": "potting"} for turn in other_tenant_turns()])
        for conversation_id, (turn_ids, _) in LEGACY_CONVERSATIONS.items():
            memory.add(legacy_turns(conversation_id, turn_ids))
        with pytest.raises(ValueError, match="must hold only ASCII letters"):
            memory.forget("green house", tenant=LEGACY)
    backup = tmp_path / "backup.jsonl"

    code, _, err = cli(data, "export", "--tenant", LEGACY, "--out", str(backup))
    assert code == 0, err
    assert conversations_of(backup) == ["potting"]
    assert "skipped 4 conversation(s) holding ids stored before the id rule" in err
    for shown in ("'ｇｒｅｅｎｈｏｕｓｅ'", "'green house'", "'ｐｏｔｔｉｎｇ'",
                  "'shed' (turn ids '１', '２', '３', '４', '５')"):
        assert shown in err, err

    code, out, _ = cli(data, "migrate-ids", "--tenant", LEGACY, "--dry-run")
    assert code == 1 and "would rewrite conversation 'ｇｒｅｅｎｈｏｕｓｅ': conversation id -> 'greenhouse'" in out
    code, out, _ = cli(data, "migrate-ids", "--tenant", LEGACY)
    assert code == 1, out
    assert "rewrote conversation 'ｇｒｅｅｎｈｏｕｓｅ': conversation id -> 'greenhouse'" in out
    assert "rewrote conversation 'shed': " + ", ".join(f"'{chr(ord('０') + i)}' -> '{i}'" for i in range(1, 6)) in out
    assert "left conversation 'green house': its id has no form the id rule accepts (must hold only ASCII" in out
    assert ("left conversation 'ｐｏｔｔｉｎｇ': its canonical form 'potting' is the id of another stored "
            "conversation") in out
    assert "2 of 4 conversation(s) holding ids that break the id rule rewritten" in out
    # Forgotten by the stored id, or as the report shows it.
    for named in ("green house", "'ｐｏｔｔｉｎｇ'"):
        code, out, err = cli(data, "migrate-ids", "--tenant", LEGACY, "--forget", named)
        assert code == 0 and out.startswith("forgot conversation "), err
    code, _, err = cli(data, "migrate-ids", "--tenant", LEGACY, "--forget", "potting")
    assert code == 2 and "has no conversation 'potting' holding ids that break the id rule" in err
    code, out, _ = cli(data, "migrate-ids", "--tenant", LEGACY)
    assert code == 0 and "nothing to rewrite" in out

    code, _, err = cli(data, "export", "--tenant", LEGACY, "--out", str(backup))
    assert code == 0 and "skipped" not in err
    assert conversations_of(backup) == ["greenhouse", "potting", "shed"]
    with open_memory(data, embedder) as memory:
        held = {conversation_id: stored(memory, LEGACY, conversation_id)
                for conversation_id in ("greenhouse", "potting", "shed")}
        ids = {"conversation_id", "event_id", "merged_from"}
        for conversation_id in ("greenhouse", "shed"):
            # The same memory as the chat written under valid ids, but for the ids.
            for kind in ("turns", "events"):
                assert [record.model_dump(exclude=ids) for record in held[conversation_id][kind]] == \
                    [record.model_dump(exclude=ids) for record in held["potting"][kind]]
            assert memory.query("What made the wifi drop?", conversation_id=conversation_id, tenant=LEGACY).turn_ids
        assert memory.redact_turn("shed", "1", tenant=LEGACY).turn_id == "1"
        assert memory.forget("greenhouse", tenant=LEGACY).events_deleted == len(held["greenhouse"]["events"])
        listed = memory.conversations(tenant=LEGACY, order="id").conversations
        assert [c.conversation_id for c in listed] == ["potting", "shed"]
