"""The shipped relevance-minilm reranker (compassmem/embedding/models/relevance-minilm, built by
training/build_relevance_reranker.py): it loads from the package with no network, scores each (question, turn)
pair alone, puts a turn that answers above one that only shares the question's words, and joins the engine's
ranking for the first ``rerank_candidates`` turns only.

The conversations and pairs below are made up for this test (no corpus's text)."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pydantic
import pytest

import compassmem
from compassmem.core.config import DIALOGUE_MODEL, RERANKER_MODEL, Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.models import Turn, search_text
from compassmem.embedding.onnx_embedder import SHIPPED_MODELS
from compassmem.library.memory import Memory
from compassmem.retrieval.engine import EngineConfig, RankingConfig
from compassmem.retrieval.ranking_model import RERANK
from compassmem.retrieval.reranker import MODEL_FILE, SHIPPED_RERANKERS, OnnxReranker, shipped_reranker

FOLDER = SHIPPED_RERANKERS[RERANKER_MODEL]
DAY = datetime(2024, 3, 9, 18, 30)

# (question, the turn that answers it, a turn sharing the question's words that does not answer it)
PAIRS = [
    ("Where did Maya go on holiday last summer?",
     search_text("Maya", "We spent two weeks hiking in the Dolomites in July, the huts were amazing.", DAY),
     search_text("Leo", "Maya, summer holidays are the best, where should we go this time?", DAY)),
    ("What illness did Priya have?",
     search_text("Priya", "The doctor said it was bronchitis, I coughed for three weeks.", DAY),
     search_text("Sam", "Priya, I hope you never get ill again, illness is the worst.", DAY)),
    ("What instrument is Tom learning?",
     search_text("Tom", "I've had three cello lessons so far and my fingers really hurt!", DAY),
     search_text("Ana", "Tom, are you learning anything new? I love musical instruments.", DAY)),
    # Known miss (the model card's): a distractor that says "Sam likes ... foods" outscores the lasagne.
    pytest.param("What foods does Sam like?",
                 search_text("Sam", "My favourite recipe is lasagne, I could eat it every single day.", DAY),
                 search_text("Priya", "Sam likes to talk about foods a lot.", DAY),
                 marks=pytest.mark.xfail(strict=True, reason="a known miss of the shipped model")),
]


@pytest.fixture(scope="module")
def reranker() -> OnnxReranker:
    return OnnxReranker(FOLDER, threads=2)


def test_it_loads_from_the_package_and_scores_each_pair_alone(reranker: OnnxReranker) -> None:
    assert FOLDER.is_relative_to(Path(compassmem.__file__).parent)
    question, answer, distractor = PAIRS[0]
    documents = [answer, distractor, "ok", search_text("Sam", "word " * 2000, DAY)]
    together = reranker.scores(question, documents)
    alone = np.asarray([reranker.scores(question, [d])[0] for d in documents])
    # A pair's score does not depend on the other candidates of its query (each runs alone, int8 per run).
    assert together.shape == (4,) and np.all(np.isfinite(together))
    assert np.array_equal(together, alone)
    assert reranker.scores(question, []).shape == (0,)


@pytest.mark.parametrize(("question", "answer", "distractor"), PAIRS,
                         ids=["Maya-holiday", "Priya-illness", "Tom-instrument", "Sam-foods"])
def test_a_turn_that_answers_scores_above_one_sharing_the_words(reranker: OnnxReranker, question: str, answer: str,
                                                                distractor: str) -> None:
    answering, sharing = reranker.scores(question, [answer, distractor])
    assert answering > sharing


def test_the_model_card_and_the_run_record_ship_with_it() -> None:
    run = json.loads((FOLDER / "training_run.json").read_text())
    assert run["groups"] and run["steps"] > 0 and run["int8_vs_float_correlation"] > 0.95
    card = (FOLDER / "MODEL_CARD.md").read_text()
    for needed in ("FriendsQA", "Molweni", "Apache-2.0", "build_relevance_reranker"):
        assert needed in card


def _sizes(folders: list[Path]) -> int:
    return sum(p.stat().st_size for folder in folders for p in folder.rglob("*") if p.is_file())


def test_the_package_data_carries_every_shipped_model_within_the_size_budgets() -> None:
    root = Path(compassmem.__file__).parent.parent
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    embedding = Path(compassmem.__file__).parent / "embedding"
    folders = [FOLDER, *SHIPPED_MODELS.values()]
    files = [p.relative_to(embedding).as_posix() for folder in folders for p in folder.rglob("*") if p.is_file()]
    assert f"models/{RERANKER_MODEL}/{MODEL_FILE}" in files
    assert not [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns["compassmem.embedding"])]
    # The issues' budgets for what the trained models add to the package: 60 MB for the first two, 60 MB more for
    # the models shipped after them (#58).
    first = [FOLDER, SHIPPED_MODELS[DIALOGUE_MODEL]]
    assert _sizes(first) < 60e6
    assert _sizes([f for f in folders if f not in first]) < 60e6


def test_an_unknown_reranker_is_refused_naming_the_setting() -> None:
    with pytest.raises(pydantic.ValidationError, match="reranker"):
        Settings(reranker="cross-encoder/ms-marco")  # type: ignore[arg-type]


def _chat(start: datetime) -> list[Turn]:
    lines = [("Ann", "Hi Bob! How was your week?"), ("Bob", "Busy. I keep thinking about food lately."),
             ("Ann", "Food is my favourite topic, what do you like?"), ("Bob", "Honestly? Anything with cheese."),
             ("Ann", "My grandmother's lasagne is the best thing I have ever eaten."),
             ("Bob", "I should try it one day."), ("Ann", "We went hiking on Saturday, it rained all day."),
             ("Bob", "Brave of you.")] * 4
    return [Turn(conversation_id="ann-bob", turn_id=f"t{n}", speaker=speaker, text=f"{text} ({n})",
                 timestamp=start + timedelta(minutes=n), session_id="1")
            for n, (speaker, text) in enumerate(lines)]


def test_the_engine_reranks_only_its_first_candidates_and_says_so(tmp_path: Path) -> None:
    start = datetime(2024, 5, 1, 18, 0, tzinfo=UTC)
    settings = Settings(_env_file=None, data_dir=tmp_path, reranker=RERANKER_MODEL)  # type: ignore[call-arg]
    with Memory(settings) as memory:
        memory.add(_chat(start))
        assert memory.engine.reranker is shipped_reranker(RERANKER_MODEL)  # one session per process
        request = QueryRequest(conversation_id="ann-bob", question="What foods does Ann like?", budget_turns=10,
                               explain=True)
        weights = memory.engine.model.weights
        if not (weights.get(RERANK) or weights.get(f"{RERANK}*long")):
            pytest.fail("the shipped ranking does not weigh the reranker's verdict")
        answered = memory.query(request)
        assert "rerank" in answered.timings_ms
        verdicts = [t.features.get(RERANK, 0.0) for t in answered.explanation.turns]
        assert any(verdicts) and all(0.0 <= v <= 1.0 for v in verdicts)
        few = Memory(settings, stores=memory.stores, embedder=memory.embedder,
                     engine_config=EngineConfig(ranking=RankingConfig(rerank_candidates=3)))
        _, features = few.engine.candidate_features(request)
        assert np.count_nonzero(features[RERANK]) == 3
        none = Memory(settings, stores=memory.stores, embedder=memory.embedder,
                      engine_config=EngineConfig(ranking=RankingConfig(rerank_candidates=0)))
        unranked = none.query(request)
        assert "rerank" not in unranked.timings_ms
        assert not any(t.features.get(RERANK) for t in unranked.explanation.turns)


def test_without_the_reranker_nothing_is_loaded_or_reranked(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, reranker="none")  # type: ignore[call-arg]
    with Memory(settings) as memory:
        memory.add(_chat(datetime(2024, 5, 1, 18, 0, tzinfo=UTC)))
        assert memory.engine.reranker is None
        answered = memory.query(QueryRequest(conversation_id="ann-bob", question="What foods does Ann like?"))
        assert answered.turn_ids and "rerank" not in answered.timings_ms
