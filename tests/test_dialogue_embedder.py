"""The shipped dialogue models, dialogue-minilm and dialogue-minilm-mix (compassmem/embedding/models/, both built by
training/build_dialogue_embedder.py): each loads from the package with no network and no export, embeds like the
other embedders, and puts a question nearer the turn that answers it than a turn that only shares its words.

The pairs below are made up for this test (no corpus's text)."""

from __future__ import annotations

import json
import tomllib
from datetime import datetime
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pydantic
import pytest

import compassmem
from compassmem.core.config import DIALOGUE_MIX_MODEL, DIALOGUE_MODEL, SHIPPED_EMBEDDING_MODELS, Settings
from compassmem.core.models import search_text
from compassmem.embedding.embedders import SentenceTransformerEmbedder, make_embedder
from compassmem.embedding.onnx_embedder import PREBUILT_MODEL_FILE, SHIPPED_MODELS, OnnxInt8Embedder

DAY = datetime(2024, 3, 9, 18, 30)

# (question, the turn that answers it, a turn sharing the question's words that does not answer it)
PAIRS = [
    ("What foods does Sam like?",
     search_text("Sam", "My favourite recipe is lasagne, I could eat it every single day.", DAY),
     search_text("Priya", "Sam likes to talk about foods a lot.", DAY)),
    ("Where did Maya go on holiday last summer?",
     search_text("Maya", "We spent two weeks hiking in the Dolomites in July, the huts were amazing.", DAY),
     search_text("Leo", "Maya, summer holidays are the best, where should we go this time?", DAY)),
    # Known miss of dialogue-minilm (docs/decisions/013-dialogue-embedder.md): the answer needs "a cello is an
    # instrument" and "lessons" for "learning"; the distractor has both words. The base model misses all three pairs.
    pytest.param("What instrument is Tom learning?",
                 search_text("Tom", "I've had three cello lessons so far and my fingers really hurt!", DAY),
                 search_text("Ana", "Tom, are you learning anything new? I love musical instruments.", DAY),
                 marks=pytest.mark.xfail(reason="a known miss of the shipped models", strict=False)),
]
# What each model card must name: its corpora, their licences and the script that rebuilds it.
CARD_NAMES = {DIALOGUE_MODEL: ("FriendsQA", "Molweni", "Apache-2.0", "build_dialogue_embedder"),
              DIALOGUE_MIX_MODEL: ("FriendsQA", "Molweni", "QMSum", "irc-disentanglement", "Apache-2.0", "MIT",
                                   "CC BY 4.0", "build_dialogue_embedder")}


@pytest.fixture(scope="module", params=SHIPPED_EMBEDDING_MODELS)
def embedder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> OnnxInt8Embedder:
    cache = tmp_path_factory.mktemp("cache")
    built = make_embedder(Settings(embedding_model=request.param, embedder_cache_dir=cache), threads=1)
    assert isinstance(built, OnnxInt8Embedder)
    # Loaded from the package as shipped: nothing exported, nothing written to the cache.
    assert built.path == SHIPPED_MODELS[request.param] / PREBUILT_MODEL_FILE
    assert built.path.is_relative_to(Path(compassmem.__file__).parent)
    assert not any(cache.iterdir())
    return built


def test_the_shipped_model_embeds_unit_vectors_of_384(embedder: OnnxInt8Embedder) -> None:
    vectors = embedder.embed(["What foods does Sam like?", PAIRS[0][1], "ok", ""])
    assert embedder.dim == 384 and vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.parametrize(("question", "answer", "distractor"), PAIRS,
                         ids=["Sam-foods", "Maya-holiday", "Tom-instrument"])
def test_a_question_is_nearer_its_answer_than_a_turn_sharing_its_words(embedder: OnnxInt8Embedder, question: str,
                                                                        answer: str, distractor: str) -> None:
    asked, answering, sharing = embedder.embed([question, answer, distractor])
    assert float(asked @ answering) > float(asked @ sharing)


@pytest.mark.parametrize("model", SHIPPED_EMBEDDING_MODELS)
def test_the_model_card_and_the_run_record_ship_with_it(model: str) -> None:
    folder = SHIPPED_MODELS[model]
    run = json.loads((folder / "training_run.json").read_text())
    assert run["pairs"] and run["total_seconds"] > 0
    card = (folder / "MODEL_CARD.md").read_text()
    assert card.startswith(f"# {model}\n")
    for needed in CARD_NAMES[model]:
        assert needed in card
    assert json.loads((folder / "1_Pooling" / "config.json").read_text())


@pytest.mark.parametrize("model", SHIPPED_EMBEDDING_MODELS)
def test_the_package_data_carries_every_file_of_the_model(model: str) -> None:
    """A wheel or an editable install carries what pyproject.toml's package-data names: all of the folder."""
    root = Path(compassmem.__file__).parent.parent
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    embedding = Path(compassmem.__file__).parent / "embedding"
    files = [p.relative_to(embedding).as_posix() for p in SHIPPED_MODELS[model].rglob("*") if p.is_file()]
    assert PREBUILT_MODEL_FILE in {Path(f).name for f in files}
    missing = [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns["compassmem.embedding"])]
    assert not missing


@pytest.mark.parametrize("model", SHIPPED_EMBEDDING_MODELS)
def test_the_torch_embedder_refuses_it(model: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=f"EMBEDDING_MODEL={model} .*COMPASSMEM_EMBEDDER=onnx-int8"):
        Settings(embedding_model=model, embedder="torch")
    with pytest.raises(ValueError, match="onnx-int8"):
        SentenceTransformerEmbedder(model)
