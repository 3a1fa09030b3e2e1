"""benchmarks.embedder_compare's own logic: the comparison table, the conversation limit, the query role, arguments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.embedder_compare import EmbedderResult, asking, comparison_rows, first_conversations, main
from compassmem.evaluation.harness import MethodResult
from compassmem.evaluation.recall import summarise_recall


def _result(name: str, recall_at_10: float, embed_rate: float, pipeline_rate: float) -> EmbedderResult:
    def method(label: str) -> MethodResult:
        summary = summarise_recall([(1, {5: recall_at_10, 10: recall_at_10, 20: 1.0})])
        return MethodResult(method=f"{label} ({name})", summary=summary, seconds=1.0)

    return EmbedderResult(embedder=name, compassmem=method("compassmem"), dense=method("dense"),
                          embedding_turns_per_s=embed_rate, pipeline_turns_per_s=pipeline_rate, build_seconds=1.0)


def test_rows_give_gain_and_ratios_against_the_default_of_the_same_set() -> None:
    headers, rows = comparison_rows({"dev.json": [_result("onnx-int8", 0.5, 100.0, 40.0),
                                                  _result("e5-small", 0.55, 20.0, 30.0)]})
    assert headers[3] == "gain @10"
    assert rows[0][1:4] == ["onnx-int8", "50.0/50.0/100.0", "+0.0"]
    assert rows[1][3] == "+5.0"
    assert rows[1][6] == "0.20" and rows[1][8] == "0.75"


def test_first_conversations_writes_a_subset_and_keeps_the_file_otherwise(tmp_path: Path) -> None:
    data = tmp_path / "set.json"
    data.write_text(json.dumps([{"sample_id": "a"}, {"sample_id": "b"}]))
    assert first_conversations(data, 0, tmp_path) == data
    assert first_conversations(data, 5, tmp_path) == data
    subset = first_conversations(data, 1, tmp_path)
    assert json.loads(subset.read_text()) == [{"sample_id": "a"}]


class _Asymmetric:
    role = "passage"
    dim = 2

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts), 2), dtype=np.float32)


def test_questions_are_asked_in_the_query_role_and_the_role_comes_back() -> None:
    embedder = _Asymmetric()
    with asking(embedder):
        assert embedder.role == "query"
    assert embedder.role == "passage"


def test_unknown_or_default_candidates_are_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    for candidates in ("bge-small", "onnx-int8"):
        with pytest.raises(SystemExit) as exit_info:
            main(["--data", "unused.json", "--candidates", candidates])
        assert exit_info.value.code == 2
        assert "--candidates" in capsys.readouterr().err
