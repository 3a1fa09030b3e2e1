"""Evaluation harness: recall@B, evidence normalisation, baselines on a synthetic LoCoMo-format file."""

from __future__ import annotations

import importlib.util
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from compassmem.embedding.embedders import SentenceTransformerEmbedder
from compassmem.evaluation.baselines import (
    Bm25TurnRetriever,
    Bm25WindowRetriever,
    BaselineTurn,
    RrfRetriever,
    TurnCorpus,
    build_baselines,
    load_turn_corpus,
    session_windows,
)
from compassmem.evaluation.harness import Retriever, evaluate_retriever
from compassmem.evaluation.labelled_questions import QuestionFileError, load_questions
from compassmem.evaluation.locomo_questions import QuestionReport, load_locomo_questions, normalise_evidence
from compassmem.evaluation.recall import context_tokens, first_distinct, recall_at, summarise_recall
from compassmem.core.line_reading import MAX_LINE_CHARS

REPO_ROOT = Path(__file__).resolve().parent.parent

# --- recall@B -------------------------------------------------------------------------------------------------


def test_recall_counts_repeated_turns_once() -> None:
    ranked = ["D1:1", "D1:1", "D1:2", "D1:1", "D1:3"]
    assert first_distinct(ranked, 3) == ["D1:1", "D1:2", "D1:3"]
    assert recall_at(ranked, ["D1:3"], 3) == 1.0


def test_recall_cuts_at_the_budget() -> None:
    ranked = ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert recall_at(ranked, ["D1:3"], 2) == 0.0
    assert recall_at(ranked, ["D1:3"], 3) == 1.0
    assert recall_at(ranked, ["D1:3"], 0) == 0.0


def test_recall_is_partial_and_uses_distinct_gold() -> None:
    ranked = ["D1:1", "D2:5", "D1:7"]
    assert recall_at(ranked, ["D1:1", "D9:9"], 5) == 0.5
    assert recall_at(ranked, ["D1:1", "D2:5", "D3:3", "D4:4"], 10) == 0.5
    assert recall_at(ranked, ["D1:1", "D1:1", "D9:9"], 5) == 0.5  # gold repeats count once
    assert recall_at([], ["D1:1"], 5) == 0.0


def test_recall_without_gold_is_an_error() -> None:
    with pytest.raises(ValueError):
        recall_at(["D1:1"], [], 5)


def test_together_is_the_mean_over_questions_not_over_categories() -> None:
    outcomes = [
        (1, {5: 0.0}),
        (4, {5: 1.0}),
        (4, {5: 1.0}),
        (4, {5: 1.0}),
        (5, {5: 0.0}),  # adversarial: reported, never part of 1-4
    ]
    summary = summarise_recall(outcomes, budgets=[5])
    assert summary.value(1, 5) == 0.0
    assert summary.value(4, 5) == 1.0
    assert summary.value(5, 5) == 0.0
    assert summary.value("1-4", 5) == 0.75  # the mean of category means would be 0.5
    assert summary.categories["1-4"].questions == 4
    assert "2" not in summary.categories


def test_context_tokens_counts_the_first_distinct_turns() -> None:
    texts = {"a": "one two", "b": "three", "c": "four five six"}
    assert context_tokens(["a", "a", "b", "c"], 2, texts.__getitem__) == 3


# --- evidence normalisation -----------------------------------------------------------------------------------

TURNS = {"D8:6", "D9:17", "D9:1", "D4:4", "D30:5", "D11:26", "D1:3"}


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["D8:6; D9:17"], ["D8:6", "D9:17"]),
        (["D9:1 D4:4"], ["D9:1", "D4:4"]),
        (["D30:05"], ["D30:5"]),
        (["D:11:26"], []),
        (["D"], []),
        (["D10:19"], []),
        (["D1:3", "D1:3", "D8:6;D1:3"], ["D1:3", "D8:6"]),
    ],
)
def test_normalise_evidence_defect_forms(entries: list[str], expected: list[str]) -> None:
    assert normalise_evidence(entries, TURNS) == expected


def test_normalise_evidence_fixes_only_to_existing_turns_and_reports() -> None:
    report = QuestionReport()
    result = normalise_evidence(["D30:05", "D31:07", "D:11:26", "D", "D8:6; D9:17", "D10:19"], TURNS, report)
    assert result == ["D30:5", "D8:6", "D9:17"]
    assert report.ids_fixed == 1
    assert report.entries_split == 1
    assert report.ids_dropped_malformed == 2
    assert report.ids_dropped_missing == 2  # D31:7 does not exist, nor D10:19
    assert report.examples["fixed"] == ["D30:05 -> D30:5"]


# --- a synthetic two-conversation LoCoMo file -------------------------------------------------------------------


def _turn(speaker: str, dia_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


def _synthetic_locomo() -> list[dict[str, Any]]:
    alpha = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            _turn("Ann", "D1:1", "Hi Bob, how was your week?"),
            _turn("Bob", "D1:2", "Busy. I adopted a golden retriever puppy named Biscuit!"),
            _turn("Ann", "D1:3", "Lovely. I have been painting sunsets at the lake."),
            _turn("Bob", "D1:4", "Look at this.", img_url=["http://x/y.jpg"], blip_caption="a photo of a red bicycle"),
        ],
        "session_2_date_time": "10:00 am on 12 June, 2023",
        "session_2": [
            _turn("Ann", "D2:1", "I signed up for a pottery class on Tuesdays."),
            _turn("Bob", "D2:2", "Biscuit chewed my shoes again."),
            _turn("Ann", "D2:3", "Ha, puppies do that."),
            _turn("Bob", "D2:4", "Anyway, see you soon."),
        ],
        "session_3_date_time": "9:00 am on 1 July, 2023",  # a date without a session: ignored
    }
    beta = {
        "speaker_a": "Cid",
        "speaker_b": "Dee",
        "session_1_date_time": "8:15 pm on 3 March, 2022",
        "session_1": [
            _turn("Cid", "D1:1", "I started learning the violin."),
            _turn("Dee", "D1:2", "My golden retriever puppy loves the park."),
        ],
        "session_5_date_time": "8:15 pm on 3 April, 2022",
        "session_5": [
            _turn("Cid", "D5:1", "The violin recital went well."),
            _turn("Dee", "D5:2", "Congratulations!"),
        ],
    }
    return [
        {
            "sample_id": "conv-a",
            "conversation": alpha,
            "qa": [
                {"question": "What is the name of Bob's puppy?", "answer": "Biscuit", "evidence": ["D1:2"],
                 "category": 4},
                {"question": "What class did Ann sign up for?", "answer": "pottery", "evidence": ["D2:01"],
                 "category": 4},
                {"question": "What does Bob own?", "answer": "a puppy and a bicycle", "evidence": ["D1:2; D1:4"],
                 "category": 1},
                {"question": "Is Ann an artist?", "answer": "likely", "evidence": [], "category": 3},
                {"question": "What did Ann say about the moon?", "adversarial_answer": "nothing",
                 "evidence": ["D:1:3", "D7:1"], "category": 5},
            ],
            "observation": {"must": "not be read"},
        },
        {
            "sample_id": "conv-b",
            "conversation": beta,
            "qa": [
                {"question": "When was the violin recital?", "answer": 2022, "evidence": ["D5:1"], "category": 2},
            ],
        },
    ]


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo_synthetic.json"
    path.write_text(json.dumps(_synthetic_locomo()), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def embedder() -> Iterator[SentenceTransformerEmbedder]:
    yield SentenceTransformerEmbedder()


def test_questions_are_normalised_and_skipped_questions_counted(locomo_file: Path) -> None:
    questions, report = load_locomo_questions(locomo_file)
    assert [(q.conversation_id, q.category, q.evidence) for q in questions] == [
        ("conv-a", 4, ["D1:2"]),
        ("conv-a", 4, ["D2:1"]),
        ("conv-a", 1, ["D1:2", "D1:4"]),
        ("conv-b", 2, ["D5:1"]),
    ]
    assert questions[3].answer == "2022"
    assert report.questions_read == 6
    assert report.questions_kept == 4
    assert report.skipped_without_evidence == {3: 1, 5: 1}
    assert (report.entries_split, report.ids_fixed) == (1, 1)
    assert (report.ids_dropped_malformed, report.ids_dropped_missing) == (1, 1)
    assert report.kept_per_category == {1: 1, 2: 1, 4: 2}


def test_turns_are_indexed_with_the_original_session_date(locomo_file: Path) -> None:
    corpus = load_turn_corpus(locomo_file)
    assert corpus.text_of("conv-a", "D1:1") == "(1:56 pm on 8 May, 2023) Ann: Hi Bob, how was your week?"
    assert corpus.text_of("conv-a", "D1:4") == "(1:56 pm on 8 May, 2023) Bob: Look at this. [shares a photo of a red bicycle]"
    assert corpus.text_of("conv-b", "D5:1").startswith("(8:15 pm on 3 April, 2022) Cid: ")
    assert len(corpus) == 12


def test_baselines_rank_only_the_asked_conversation(locomo_file: Path, embedder: SentenceTransformerEmbedder) -> None:
    corpus = load_turn_corpus(locomo_file)
    baselines = build_baselines(corpus, embedder)
    assert set(baselines) == {"bm25", "dense", "rrf", "bm25-window3", "bm25-window3-sliding"}
    own = {cid: {t.turn_id for t in turns} for cid, turns in corpus.conversations.items()}
    for name, retriever in baselines.items():
        assert isinstance(retriever, Retriever)
        for cid in own:
            ranked = retriever.rank(cid, "golden retriever puppy violin")
            assert set(ranked) == own[cid], name  # every turn of its own conversation, none of the other
            assert len(ranked) == len(own[cid]), name
        assert retriever.rank("no-such-conversation", "puppy") == []
    assert baselines["bm25"].rank("conv-a", "What is the name of Bob's puppy?")[0] == "D1:2"
    assert baselines["bm25"].rank("conv-b", "When was the violin recital?")[0] == "D5:1"
    assert baselines["bm25"].rank("conv-a", "pottery class")[0] == "D2:1"
    assert baselines["bm25"].rank("conv-a", "red bicycle")[0] == "D1:4"  # the caption is indexed
    assert baselines["dense"].rank("conv-b", "When was the violin recital?")[0] == "D5:1"


def test_evaluation_loop_end_to_end(locomo_file: Path, embedder: SentenceTransformerEmbedder) -> None:
    questions, _ = load_locomo_questions(locomo_file)
    corpus = load_turn_corpus(locomo_file)
    result = evaluate_retriever("rrf", build_baselines(corpus, embedder)["rrf"], questions, text_of=corpus.text_of)
    assert result.summary.value(4, 5) == 1.0
    assert result.summary.value(2, 5) == 1.0
    assert result.summary.categories["1-4"].questions == 4
    assert result.mean_context_tokens is not None and result.mean_context_tokens[20] > result.mean_context_tokens[5]

    class Fixed:
        """A system under test plugs in the same way."""

        def rank(self, conversation_id: str, question: str) -> list[str]:
            return ["D9:9", "D9:9", "D1:2"]

    fixed = evaluate_retriever("fixed", Fixed(), questions, budgets=[1, 2])
    assert fixed.summary.value(4, 1) == 0.0
    assert fixed.summary.value(4, 2) == 0.5  # D1:2 is the second distinct turn
    assert fixed.summary.value(1, 2) == 0.5
    assert fixed.by_ability == {}  # LoCoMo names no ability
    named = [q.model_copy(update={"ability": "recall" if q.category == 4 else "reasoning"}) for q in questions]
    by_ability = evaluate_retriever("fixed", Fixed(), named, budgets=[1, 2]).by_ability
    # Category 4's two questions: D1:2 answers the first (second place), not the second; 1 and 2 hold one of
    # the multi-hop question's two turns (second place) and nothing of the temporal one's.
    assert by_ability == {"recall": {"questions": 2.0, "1": 0.0, "2": 0.5},
                          "reasoning": {"questions": 2.0, "1": 0.0, "2": 0.25}}


def test_rrf_fuses_with_constant_60() -> None:
    class Static:
        def __init__(self, ranking: list[str]) -> None:
            self.ranking = ranking

        def rank(self, conversation_id: str, question: str) -> list[str]:
            return self.ranking

    # a: 1/61 + 1/63 = 0.032266 narrowly beats b: 2/62 = 0.032258 (the constant flattens rank differences)
    assert RrfRetriever([Static(["a", "b", "c"]), Static(["c", "b", "a"])]).rank("x", "q") == ["a", "c", "b"]
    # a turn found by one ranking only still counts: d gets 1/61
    assert RrfRetriever([Static(["a", "b"]), Static(["d", "b"])]).rank("x", "q") == ["b", "a", "d"]


def _synthetic_session(n: int) -> list[BaselineTurn]:
    return [BaselineTurn(conversation_id="c", turn_id=f"D1:{i}", session_id="1", text=f"t{i}") for i in range(1, n + 1)]


def test_session_windows_chunks_and_sliding() -> None:
    turns = _synthetic_session(7) + [BaselineTurn(conversation_id="c", turn_id="D2:1", session_id="2", text="x")]
    chunks = [[t.turn_id for t in w] for w in session_windows(turns, 3, 3)]
    assert chunks == [["D1:1", "D1:2", "D1:3"], ["D1:4", "D1:5", "D1:6"], ["D1:7"], ["D2:1"]]
    sliding = [[t.turn_id[-1] for t in w] for w in session_windows(turns, 3, 1)]
    assert sliding == [list("123"), list("234"), list("345"), list("456"), list("567"), ["1"]]


def test_window_baseline_flattens_windows_in_rank_order() -> None:
    turns = _synthetic_session(6)
    turns[4] = turns[4].model_copy(update={"text": "the zebra escaped"})
    corpus = TurnCorpus(turns)
    ranked = Bm25WindowRetriever(corpus, size=3).rank("c", "zebra")
    assert ranked == ["D1:4", "D1:5", "D1:6", "D1:1", "D1:2", "D1:3"]
    assert Bm25TurnRetriever(corpus).rank("c", "zebra")[0] == "D1:5"
    assert Bm25TurnRetriever(corpus).rank("c", "the")  # a stop-word-only query still ranks every turn


# --- the benchmark script -------------------------------------------------------------------------------------


def _benchmark_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("locomo_baselines", REPO_ROOT / "benchmarks" / "locomo_baselines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_skips_without_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _benchmark_module().main(["--data", str(tmp_path / "absent.json"), "--out", str(tmp_path / "out.json")])
    assert exit_info.value.code == 0
    assert "not found" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_benchmark_writes_table_and_json(locomo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "baselines.json"
    assert _benchmark_module().main(["--data", str(locomo_file), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1-4 together" in printed and "bm25-window3" in printed
    results = json.loads(out.read_text())
    assert set(results["methods"]) == {"bm25", "dense", "rrf", "bm25-window3", "bm25-window3-sliding"}
    assert results["methods"]["bm25"]["recall"]["4"]["5"] == 1.0
    assert results["evidence_normalisation"]["skipped_without_evidence"] == {"3": 1, "5": 1}
    assert "puppy" not in out.read_text()  # aggregates only, no question text


def test_recall_benchmark_builds_with_llm_labels_and_asks_offline(locomo_file: Path, tmp_path: Path,
                                                                  fake_llm: tuple[Any, str]) -> None:
    """``locomo_recall --llm-categories URL``: the LLM is asked for the turns' category labels while the memory is
    built, and never while the questions are answered (the difference it reports is the labels')."""
    from benchmarks.locomo_recall import main

    from compassmem.llm.steps import LABELS_SYSTEM_PROMPT

    fake, url = fake_llm
    fake.reset()
    fake.respond = lambda messages: "\n".join(f"{n}: pet" for n in range(1, messages[-1]["content"].count("\n") + 2))
    out = tmp_path / "recall.json"
    assert main(["--data", str(locomo_file), "--no-baselines", "--llm-categories", url, "--out", str(out)]) == 0
    assert fake.requests
    assert {r["messages"][0]["content"] for r in fake.requests} == {LABELS_SYSTEM_PROMPT}
    assert json.loads(out.read_text())["methods"]["compassmem"]["recall"]["4"]["10"] == 1.0


# --- question files that cannot be read ---------------------------------------------------------------------------


def test_a_line_past_the_import_limit_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    with path.open("w", encoding="utf-8") as out:
        out.write('{"question": "' + "x" * (4 * MAX_LINE_CHARS) + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(QuestionFileError, match=f"^{path}: line 1: longer than {MAX_LINE_CHARS:,} characters"):
            load_questions(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_LINE_CHARS  # the line (4 times the limit) was not read whole


def test_a_locomo_file_nested_too_deeply_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(QuestionFileError, match=f"^{path}: line 1: not valid JSON: nested too deeply to parse"):
        load_questions(path)
