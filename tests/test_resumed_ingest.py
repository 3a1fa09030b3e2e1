"""An ingest run again continues where the stored memory stands: interrupted (Ctrl-C) or cut short (an earlier
``add`` of the first part), the same input gives the same events, relations and turn memberships as one
uninterrupted run (``compassmem/write/resume.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compassmem import Memory
from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.write.pipeline import PipelineConfig
from tests.conftest import describe_difference, interleave, stores_snapshot, stream_conversation

CONVERSATIONS = ("resume-a", "resume-b")
# Small batches, so that an interruption after a batch leaves each conversation part-written.
BATCH = 16


def _turns() -> list[Turn]:
    return interleave([stream_conversation(name, index, sessions=5) for index, name in enumerate(CONVERSATIONS)])


def _open(data_dir: Path, embedder: object) -> Memory:
    settings = Settings(_env_file=None, data_dir=data_dir)  # type: ignore[call-arg]
    return Memory(settings, embedder=embedder, pipeline_config=PipelineConfig(batch_turns=BATCH))  # type: ignore[arg-type]


def _snapshots(memory: Memory) -> dict[str, dict[str, object]]:
    return {name: stores_snapshot(memory.stores.vectors, memory.stores.graph, f"default/{name}")
            for name in CONVERSATIONS}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> dict[str, dict[str, object]]:
    with _open(tmp_path_factory.mktemp("whole"), embedder) as memory:
        memory.add(_turns(), warm=False)
        return _snapshots(memory)


def _mid_session_prefix(turns: list[Turn]) -> list[Turn]:
    """Each conversation's turns up to the sixth of its third session: mid-topic, where no boundary falls."""
    cut = {name: next(i for i, t in enumerate(turns) if t.conversation_id == name and t.turn_id == "D3:6")
           for name in CONVERSATIONS}
    return [t for i, t in enumerate(turns) if i <= cut[t.conversation_id]]


class _Interrupt:
    """A progress callback that raises KeyboardInterrupt (Ctrl-C) once ``after`` turns are written."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.done = 0

    def __call__(self, turns: int) -> None:
        self.done += turns
        if self.done >= self.after:
            raise KeyboardInterrupt


def _cut_short(memory: Memory) -> None:
    memory.add(_mid_session_prefix(_turns()), warm=False)


def _interrupted(memory: Memory) -> None:
    with pytest.raises(KeyboardInterrupt):
        memory.add(_turns(), progress=_Interrupt(3 * BATCH), warm=False)


@pytest.fixture(params=[_cut_short, _interrupted], ids=["cut-short", "interrupted"])
def first_run(request: pytest.FixtureRequest) -> Callable[[Memory], None]:
    return request.param


@pytest.fixture(params=[True, False], ids=["new-memory", "same-memory"])
def reopened(request: pytest.FixtureRequest) -> bool:
    return request.param


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"


def test_the_same_input_again_finishes_memory_as_one_run_would(
        uninterrupted: dict[str, dict[str, object]], first_run: Callable[[Memory], None], reopened: bool,
        data_dir: Path, embedder: object) -> None:
    memory = _open(data_dir, embedder)
    try:
        first_run(memory)
        before = _snapshots(memory)
        assert all(before[name]["turns"] for name in CONVERSATIONS), "the first run wrote nothing to resume from"
        assert before != uninterrupted
        if reopened:
            memory.close()
            memory = _open(data_dir, embedder)
        memory.add(_turns(), warm=False)
        resumed = _snapshots(memory)
    finally:
        memory.close()
    for name in CONVERSATIONS:
        assert resumed[name] == uninterrupted[name], describe_difference(uninterrupted[name], resumed[name])
