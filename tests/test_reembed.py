"""``compassmem reembed``: a memory built with the bundled model is refused with dialogue-minilm, by a message naming
the settings and the command; re-embedded in place, it opens with dialogue-minilm and holds the same conversations
and turns, and still finds the evidence; what was forgotten or redacted does not come back (not a byte of it in
the new data directory); a running dev, server stores and the leftovers of a half-done swap are refused; and an
interruption at each step leaves one memory whole, as the message says."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compassmem.cli.main import main
from compassmem.core.config import BUNDLED_MODEL, DIALOGUE_MODEL, Settings
from compassmem.core.contracts.search import SearchScope
from compassmem.library.memory import Memory
from compassmem.system.dev_server import DevServer, announced
from compassmem.library import reembedding

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = REPO_ROOT / "examples" / "sample_conversation.jsonl"
CONVERSATION = "priya-tom"
OTHER_TENANT = "acme"
QUESTION = "What is the name of Priya's puppy?"
EVIDENCE = "S1:7"  # "Biscuit is great! We adopted him from the shelter last Saturday, ..."
# Words written only in what is deleted before the re-embedding: a forgotten conversation and a redacted turn.
FORGOTTEN_CANARY = "quokkafandango"
REDACTED_CANARY = "marzipanzeppelin"
OLD_SPACE = f"onnx-int8:{BUNDLED_MODEL}"
NEW_SPACE = f"onnx-int8:{DIALOGUE_MODEL}"


def _settings(data_dir: Path, model: str = BUNDLED_MODEL) -> Settings:
    return Settings(_env_file=None, data_dir=data_dir, embedding_model=model)  # type: ignore[call-arg]


def _turns() -> list[dict[str, object]]:
    sample = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    other = [{**turn, "tenant": OTHER_TENANT, "conversation_id": "ana-ben"} for turn in sample[:8]]
    secret = [{"conversation_id": "secret-chat", "turn_id": f"x{i}", "speaker": "Sam",
               "text": f"The vault code word is {FORGOTTEN_CANARY}, number {i}.",
               "timestamp": f"2024-03-05T10:0{i}:00+00:00"} for i in range(3)]
    redacted = {"conversation_id": CONVERSATION, "turn_id": "S9:1", "speaker": "Tom",
                "text": f"My password is {REDACTED_CANARY}, keep it safe.", "timestamp": "2024-05-01T09:00:00+00:00",
                "session_id": "9"}
    return [*sample, redacted, *other, *secret]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A memory built with the bundled model: the sample conversation (one turn of it redacted) and a second
    tenant's; a conversation forgotten. Copied for each test (the stores are closed)."""
    root = tmp_path_factory.mktemp("reembed-template")
    data = root / "data"
    with Memory(_settings(data)) as memory:
        memory.add(_turns(), warm=False)
        memory.forget("secret-chat")
        memory.redact_turn(CONVERSATION, "S9:1")
    return data


@pytest.fixture
def data_dir(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "memory"
    shutil.copytree(template, copy, symlinks=True)
    return copy


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _contents(memory: Memory) -> dict[tuple[str, str], int]:
    """(tenant, conversation) -> turns stored."""
    found = {}
    for tenant in ("default", OTHER_TENANT):
        for summary in memory.conversations(tenant=tenant, limit=100).conversations:
            found[(tenant, summary.conversation_id)] = memory.stores.vectors.count_turns(
                SearchScope.conversation(tenant, summary.conversation_id))
    return found


def _files_holding(root: Path, word: str) -> list[Path]:
    needle = word.encode()
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


def _siblings(data_dir: Path) -> list[str]:
    return sorted(path.name for path in data_dir.parent.iterdir() if path.name.startswith(data_dir.name + "."))


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_a_memory_is_refused_with_another_model_then_reembedded_in_place(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with Memory(_settings(data_dir)) as memory:
        before = _contents(memory)
        top_before = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=5).turn_ids
    assert before == {("default", CONVERSATION): 24, (OTHER_TENANT, "ana-ben"): 8}
    assert EVIDENCE in top_before
    # The deleted words are still in the old engines' files (nothing compacted them): the new memory must not be.
    assert _files_holding(data_dir, FORGOTTEN_CANARY) and _files_holding(data_dir, REDACTED_CANARY)

    monkeypatch.setenv("COMPASSMEM_EMBEDDING_MODEL", DIALOGUE_MODEL)
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "ask", CONVERSATION, QUESTION)
    assert code == 2
    line = _one_error_line(err)
    for fragment in (f"built with the embedding model '{BUNDLED_MODEL}'", f"'{NEW_SPACE}'",
                     f"COMPASSMEM_EMBEDDING_MODEL={BUNDLED_MODEL}", "COMPASSMEM_EMBEDDER=onnx-int8",
                     "`compassmem reembed`"):
        assert fragment in line, line

    code, out, err = _run(capsys, "--data-dir", str(data_dir), "reembed")
    assert code == 0, err
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("re-embedded 2 tenant(s), 2 conversation(s), 32 turns of ")
    assert f"with {NEW_SPACE} (was {OLD_SPACE}) in " in summary and summary.endswith(" s")
    assert _siblings(data_dir) == []  # no backup, no leftovers

    with Memory(_settings(data_dir, DIALOGUE_MODEL)) as memory:
        assert _contents(memory) == before
        assert memory.stores.vectors.recorded_vector_space() == NEW_SPACE
        response = memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=5)
        assert EVIDENCE in response.turn_ids[:5], response.turn_ids
        assert memory.events(CONVERSATION, limit=50).events  # events built again
        assert memory.graph(CONVERSATION).edges  # and the relations between them
    assert _files_holding(data_dir, FORGOTTEN_CANARY) == []
    assert _files_holding(data_dir, REDACTED_CANARY) == []
    # And the bundled model is refused now, naming the migration back.
    monkeypatch.delenv("COMPASSMEM_EMBEDDING_MODEL")
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "ask", CONVERSATION, QUESTION)
    assert code == 2 and f"COMPASSMEM_EMBEDDING_MODEL={DIALOGUE_MODEL}" in _one_error_line(err)


def test_options_choose_the_model_and_the_backup_is_kept_on_request(
        data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "reembed", "--data-dir", str(data_dir), "--embedding-model", DIALOGUE_MODEL,
                          "--keep-backup")
    assert code == 0, err
    backup = data_dir.with_name(data_dir.name + ".reembed-backup")
    assert f"the old memory is kept in {backup}" in out
    assert reembedding.recorded_space(backup) == OLD_SPACE and reembedding.recorded_space(data_dir) == NEW_SPACE
    with Memory(_settings(backup)) as old:  # the backup is a whole memory
        assert _contents(old)[("default", CONVERSATION)] == 24
    # The same model again: nothing to do (the backup is not in the way of that).
    code, out, err = _run(capsys, "reembed", "--data-dir", str(data_dir), "--embedding-model", DIALOGUE_MODEL)
    assert code == 0, err
    assert "already: nothing to re-embed" in out
    # Another re-embedding would need the backup's name: it says what to do with it.
    code, _, err = _run(capsys, "reembed", "--data-dir", str(data_dir))
    assert code == 2
    line = _one_error_line(err)
    assert str(backup) in line and f"rm -rf {backup}" in line
    # A model the embedder cannot run is refused before anything is opened.
    code, _, err = _run(capsys, "reembed", "--data-dir", str(data_dir), "--embedding-model", DIALOGUE_MODEL,
                        "--embedder", "torch")
    assert code == 2 and "COMPASSMEM_EMBEDDER=onnx-int8" in _one_error_line(err)


@pytest.fixture
def stand_in_dev(data_dir: Path) -> Iterator[int]:
    """A process named like compassmem announced as the dev holding ``data_dir``."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "compassmem"])  # noqa: S603
    try:
        with announced(data_dir, DevServer(pid=process.pid, broker="127.0.0.1:1", api_url="http://127.0.0.1:2")):
            yield process.pid
    finally:
        process.kill()
        process.wait()


def test_reembed_is_refused_while_a_dev_holds_the_directory(
        data_dir: Path, stand_in_dev: int, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 2
    line = _one_error_line(err)
    assert f"held by `compassmem dev` (pid {stand_in_dev})" in line and "compassmem reembed" in line, line
    assert reembedding.recorded_space(data_dir) == OLD_SPACE and _siblings(data_dir) == []


def test_server_stores_are_refused_naming_the_way_through_a_data_directory(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COMPASSMEM_QDRANT_URL", "http://127.0.0.1:1")
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 2
    line = _one_error_line(err)
    for fragment in ("COMPASSMEM_QDRANT_URL", "compassmem export", "compassmem --data-dir DIR reembed",
                     "compassmem import", "new collection"):
        assert fragment in line, line


def test_a_mismatch_with_a_server_store_names_a_new_collection_not_the_command(tmp_path: Path) -> None:
    from compassmem.sinks.factory import StoreOpenError, open_vector_store

    made = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    open_vector_store(made, dim=8).close()
    beside_a_graph_server = made.model_copy(update={"embedding_model": DIALOGUE_MODEL,
                                                    "falkordb_url": "redis://127.0.0.1:1"})
    with pytest.raises(StoreOpenError) as refused:
        open_vector_store(beside_a_graph_server, dim=8)
    assert "new collection" in str(refused.value) and "reembed`" not in str(refused.value)


def _old_memory_is_whole(data_dir: Path) -> None:
    assert reembedding.recorded_space(data_dir) == OLD_SPACE
    with Memory(_settings(data_dir)) as memory:
        assert _contents(memory) == {("default", CONVERSATION): 24, (OTHER_TENANT, "ana-ben"): 8}
        assert EVIDENCE in memory.query(QUESTION, conversation_id=CONVERSATION, budget_turns=5).turn_ids


def test_an_interruption_before_the_swap_leaves_the_old_memory_whole(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(source: Path, target: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(reembedding, "_rename", interrupted)
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 130
    assert f"{data_dir} is unchanged" in err and err.rstrip().endswith("interrupted")
    assert _siblings(data_dir) == []  # the half-built memory is gone
    _old_memory_is_whole(data_dir)


def test_an_interruption_while_building_leaves_the_old_memory_whole(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = Memory.add
    calls = []

    def add_then_stop(self: Memory, *args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Memory, "add", add_then_stop)
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 130 and "before the new memory took the old one's place" in err and f"{data_dir} is unchanged" in err
    assert _siblings(data_dir) == []
    _old_memory_is_whole(data_dir)


def test_a_failed_second_rename_is_undone(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = reembedding._rename
    calls: list[Path] = []

    def second_fails(source: Path, target: Path) -> None:
        calls.append(source)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(target))
        real(source, target)

    monkeypatch.setattr(reembedding, "_rename", second_fails)
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 2 and "No space left on device" in err and f"{data_dir} is unchanged" in err
    assert _siblings(data_dir) == []
    _old_memory_is_whole(data_dir)


def test_a_stop_between_the_renames_is_told_and_can_be_finished(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The second rename and its undo both fail (as a process killed between the two would leave it): both memories
    are whole, under the names the message gives, and a later run refuses with the same way out."""
    real = reembedding._rename
    calls: list[Path] = []

    def only_the_first(source: Path, target: Path) -> None:
        calls.append(source)
        if len(calls) > 1:
            raise OSError(5, "Input/output error", str(target))
        real(source, target)

    monkeypatch.setattr(reembedding, "_rename", only_the_first)
    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 2
    paths = reembedding.ReembedPaths.of(data_dir)
    assert "stopped between its two renames" in err and f"mv {paths.new} {data_dir}" in err
    assert not data_dir.exists()
    assert reembedding.recorded_space(paths.backup) == OLD_SPACE
    assert reembedding.recorded_space(paths.new) == NEW_SPACE
    monkeypatch.setattr(reembedding, "_rename", real)

    code, _, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 2
    line = _one_error_line(err)
    assert f"finish it with `mv {paths.new} {data_dir} && rm -rf {paths.backup}`" in line, line
    assert f"undo it with `mv {paths.backup} {data_dir} && rm -rf {paths.new}`" in line, line

    paths.new.rename(data_dir)  # finish, as the message says
    shutil.rmtree(paths.backup)
    with Memory(_settings(data_dir, DIALOGUE_MODEL)) as memory:
        assert _contents(memory) == {("default", CONVERSATION): 24, (OTHER_TENANT, "ana-ben"): 8}


def test_a_build_left_by_a_killed_run_is_replaced(
        data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = reembedding.ReembedPaths.of(data_dir)
    (paths.new / "qdrant").mkdir(parents=True)
    (paths.new / "qdrant" / "half-written").write_text("x")
    paths.trash.mkdir()  # an old memory whose deletion was cut short
    code, out, err = _run(capsys, "--data-dir", str(data_dir), "reembed", "--embedding-model", DIALOGUE_MODEL)
    assert code == 0, err
    assert "32 turns" in out and _siblings(data_dir) == []
    assert not (data_dir / "qdrant" / "half-written").exists()
