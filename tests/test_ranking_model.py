"""The ranking model: the engine's final score as weights over candidate features, the fitted weights shipped with the
package, and the fit itself (real embedded stores, built by ``Memory.add``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.fit_ranking import Candidates, fit
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.evaluation.locomo_questions import Question
from compassmem.write.importers import read_turns
from compassmem.library.memory import Memory
from compassmem.retrieval.engine import EngineConfig, RankingConfig
from compassmem.retrieval.ranking_model import (
    FEATURES,
    RankingModel,
    conversation_shape,
    shipped_model,
)

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"


@pytest.fixture(scope="module")
def sample_memory(embedder, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    with Memory(Settings(data_dir=tmp_path_factory.mktemp("ranking")), embedder=embedder) as memory:
        memory.add(list(read_turns(SAMPLE)))
        yield memory


def test_the_shipped_model_weighs_every_feature_the_engine_computes_and_says_how_it_was_validated() -> None:
    model = shipped_model()
    assert set(model.weights) == set(FEATURES)
    assert model.source.startswith("fitted by benchmarks/fit_ranking.py")
    assert any(key.endswith("_fitted_at10") for key in model.validation)
    assert RankingConfig().fitted and EngineConfig().ranking_model() == model
    hand = EngineConfig(ranking=RankingConfig(fitted=False)).ranking_model()
    assert hand.source == "hand" and hand.weights["fused"] == RankingConfig().turn_weight


def test_every_candidate_has_every_feature(sample_memory: Memory) -> None:
    refs, features = sample_memory.engine.candidate_features(
        QueryRequest(conversation_id="priya-tom", question="Why was the Atlas launch moved?"))
    assert refs and set(features) == set(FEATURES)
    assert all(len(values) == len(refs) for values in features.values())
    # The nearest turn has the dense feature 0 (its similarity less the best), and the first place in the list.
    nearest = int(np.argmax(features["dense"]))
    assert features["dense"][nearest] == pytest.approx(0.0) and features["dense_rank"][nearest] == 1.0
    assert features["dense"].min() < 0


def test_weights_on_the_dense_feature_alone_rank_as_a_plain_dense_search(sample_memory: Memory) -> None:
    # A plain search is inside the model's reach: whatever the fit chooses, it chose against this.
    question = "Why was the Atlas launch moved?"
    dense_only = Memory(sample_memory.settings, stores=sample_memory.stores, embedder=sample_memory.embedder,
                        engine_config=EngineConfig(model=RankingModel(source="test", weights={"dense": 1.0})))
    ranked = dense_only.query(QueryRequest(conversation_id="priya-tom", question=question, budget_turns=5)).turn_ids
    vector = sample_memory.embedder.embed([question])[0]
    scope = QueryRequest(conversation_id="priya-tom", question=question).scope
    plain = [hit.turn_id for hit in sample_memory.stores.vectors.turn_hits(scope, vector, 5)]
    assert ranked == plain
    # ... and the shipped weights rank otherwise (they are not the dense search under another name).
    assert sample_memory.query(QueryRequest(conversation_id="priya-tom", question=question,
                                            budget_turns=5)).turn_ids != plain


def test_the_fit_finds_the_feature_that_marks_the_evidence() -> None:
    rng = np.random.default_rng(7)
    question = Question(conversation_id="c", question="q", answer="", evidence=["t0"], category=4)
    marker = FEATURES.index("keyword_rank")
    examples = []
    for _ in range(40):
        features = rng.normal(0, 1, (30, len(FEATURES)))
        gold = np.zeros(30, dtype=bool)
        gold[rng.integers(30)] = True
        features[:, marker] += 3 * gold
        examples.append(Candidates(style="a", question=question, features=features, gold=gold))
    weights = fit(examples, l2=0.001, fixed={"fused": 0.5})
    assert max(weights, key=weights.__getitem__) == "keyword_rank" and weights["keyword_rank"] > 0.5
    assert weights["fused"] == 0.5  # kept as given: the scale the others are fitted to


def test_a_model_without_a_feature_drops_its_shape_term_too() -> None:
    model = RankingModel(source="m", weights={"event": 0.3, "event*long": 0.1, "dense": 0.5})
    assert model.without("event").weights == {"dense": 0.5}


def test_the_conversation_shape_tells_chat_lines_from_written_answers() -> None:
    def feature(tokens: int) -> float:
        return float(np.log1p(tokens) / np.log1p(4096.0))

    assert conversation_shape(np.asarray([feature(12), feature(20)])) == 0.0
    assert conversation_shape(np.asarray([feature(30), feature(1200)])) > 0.7
    assert conversation_shape(np.zeros(0)) == 0.0
