"""``compassmem ingest`` says what memory holds of the file's conversations and what was already there: a second
run of the same file, or a run that finishes an interrupted one, does not read as if memory were empty."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compassmem.cli.main import main
from compassmem.core.models import Turn
from tests.conftest import stream_conversation


def _jsonl(path: Path, turns: list[Turn]) -> Path:
    path.write_text("".join(turn.model_dump_json() + "\n" for turn in turns))
    return path


def _ingest(data_dir: Path, source: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert main(["--data-dir", str(data_dir), "ingest", str(source)]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if found := re.match(r"^  (conversations|turns|events)\s{2,}(.*)$", line):
            rows[found[1]] = found[2]
        elif line.startswith("  nothing to add"):
            rows["nothing"] = line.strip()
    return rows


def test_a_second_ingest_says_what_is_in_memory_and_what_was_already_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    turns = stream_conversation("summary-chat", 0, sessions=3)
    data_dir = tmp_path / "data"
    first = _ingest(data_dir, _jsonl(tmp_path / "first.jsonl", turns[:10]), capsys)
    assert first["turns"] == "10 in memory (0 already there, 10 added)"
    assert first["conversations"] == "1 in memory (0 already there)"

    whole = _jsonl(tmp_path / "whole.jsonl", turns)
    resumed = _ingest(data_dir, whole, capsys)
    assert resumed["turns"] == f"{len(turns)} in memory (10 already there, {len(turns) - 10} added)"
    events = int(resumed["events"].split()[0])
    assert events > 0 and resumed["events"] == f"{events} in memory"

    again = _ingest(data_dir, whole, capsys)
    assert again["conversations"] == "1 in memory (1 already there)"
    assert again["turns"] == f"{len(turns)} in memory ({len(turns)} already there, 0 added)"
    assert again["events"] == f"{events} in memory"
    assert again["nothing"] == "nothing to add: memory already held every turn of the input"
