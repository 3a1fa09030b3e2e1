"""The onnx-int8 embedder (compassmem/embedding/onnx_embedder.py) against the torch reference, and its on-disk cache.

One int8 model is built per test session into a temporary cache folder (a few seconds); the cache tests copy it or
build their own."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import structlog
from structlog.testing import capture_logs

from compassmem.embedding import onnx_embedder as onnx_embedding
from compassmem.core.config import BUNDLED_MODEL, Settings
from compassmem.embedding.embedders import SentenceTransformerEmbedder, make_embedder
from compassmem.core.models import search_text
from compassmem.embedding.onnx_embedder import OnnxInt8Embedder, OnnxModelError, cache_file, model_directory

NAMES = ["Caroline", "Melanie", "Jon", "Gina", "Deborah", "Jolene", "Evan", "Sam", "Calvin", "Dave", "Maria", "John"]
SUBJECTS = ["the adoption agency", "my pottery class", "the LGBTQ support group", "our camping trip to the lake",
            "the new dance studio", "my sister's wedding", "a charity run for cancer research", "the violin recital",
            "my job interview at the bank", "the book club", "a sunrise I painted", "the hiking trail near Boulder",
            "my dog Oscar", "the counselling course", "the concert in Paris", "grandma's 80th birthday"]
TEMPLATES = [
    "I went to {s} yesterday and it was amazing!", "Have you ever thought about {s}?",
    "Honestly, {s} has been stressing me out lately.", "{n} told me about {s} last week.",
    "We should plan something around {s} next month.", "Thanks! {s} really means a lot to me.",
    "Wow, that's so cool. How did {s} go?", "I've been working on {s} since 2019.",
    "Can't wait for {s} on Saturday :)", "Remember when we talked about {s}? I finally did it.",
]
ODD = [
    "", " ", "ok", "?", "...", "lol", "Yes.", "🎉🎉🎉", "I ❤️ pottery 🏺 and hiking 🥾",
    "北京的秋天很美。我们下周去长城吧。", "Привет, как дела? Я вчера ходил в театр.", "مرحبا، كيف حالك اليوم؟",
    "Ça va? J'ai visité le musée d'Orsay à Paris — incroyable!", "https://example.com/photos/2023/05/lake.jpg",
    "def f(x):\n    return x * 2  # doubles", "ALL CAPS MESSAGE ABOUT THE MEETING TOMORROW AT 9AM",
    "1 2 3 4 5 6 7 8 9 10 11 12", "$1,250.00 on 2023-05-07 at 14:30 UTC", "the the the the the the the the",
    "[Image: a photo of a painted sunrise over a lake, orange and pink sky]", "email me at jane.doe@example.org",
    "\t\n  spaced   out\ttext \n", "Ünïcödé àccents ñ ß ø å", "a" * 300, "word " * 120,
]


def varied_texts(count: int = 300, seed: int = 14) -> list[str]:
    """Conversation turns as the pipeline embeds them ((date) speaker: text), plus odd inputs and long paragraphs."""
    rng = random.Random(seed)
    start = datetime(2023, 1, 1)
    texts = list(ODD)
    while len(texts) < count:
        parts = [rng.choice(TEMPLATES).format(s=rng.choice(SUBJECTS), n=rng.choice(NAMES))
                 for _ in range(rng.choice([1, 1, 1, 2, 3, 8]))]
        when = start + timedelta(days=rng.randrange(700))
        texts.append(search_text(rng.choice(NAMES), " ".join(parts), when))
    return texts


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx(cache_dir: Path) -> OnnxInt8Embedder:
    return OnnxInt8Embedder(cache_dir=cache_dir)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return varied_texts()


@pytest.fixture(scope="module")
def reference(torch_embedder: SentenceTransformerEmbedder, texts: list[str]) -> np.ndarray:
    return torch_embedder.embed(texts)


def test_vectors_match_the_torch_reference(onnx: OnnxInt8Embedder, reference: np.ndarray, texts: list[str]) -> None:
    # Measured with per-channel int8 weights: mean 0.992 and worst 0.977 on 600 LoCoMo turns; mean 0.992 and worst
    # 0.963 on these texts (the one-word turns "ok", "Yes.", "lol" are the hardest). Per-tensor weights gave mean
    # 0.955 and worst 0.92 on the LoCoMo turns, so these bounds catch a recipe that loses quality while leaving a
    # little room for other CPUs' int8 kernels.
    vectors = onnx.embed(texts)
    cosines = np.sum(vectors * reference, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.mean() >= 0.985, cosines.mean()
    assert cosines.min() >= 0.95, (cosines.min(), texts[worst])
    # Retrieval sees rankings, not vectors: each text's nearest neighbour among the reference vectors is itself.
    rows = sorted({tuple(onnx._tokenizer.encode(text).ids): index for index, text in enumerate(texts)}.values())
    nearest = np.argmax(vectors[rows] @ reference[rows].T, axis=1)
    assert (nearest == np.arange(len(rows))).mean() >= 0.99


def test_rows_are_unit_length_float32(onnx: OnnxInt8Embedder, texts: list[str]) -> None:
    vectors = onnx.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (len(texts), onnx.dim) == (len(texts), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


def test_a_text_has_one_vector_whatever_its_batch_order_or_thread_count(onnx: OnnxInt8Embedder, texts: list[str],
                                                                        cache_dir: Path) -> None:
    # int8 activations are scaled per run: if texts shared a run, a text's vector would move with its batch mates
    # (measured: cosine down to 0.976) and a replay batched differently after a restart would cut events
    # differently. Each text runs alone, so its vector is bit-identical in any batch, order or thread count.
    sample = texts[:120]
    forward = onnx.embed(sample)
    order = list(range(len(sample)))
    random.Random(3).shuffle(order)
    assert np.array_equal(onnx.embed([sample[i] for i in order]), forward[order])
    alone = np.stack([onnx.embed([text])[0] for text in sample])
    assert np.array_equal(alone, forward)
    serial = OnnxInt8Embedder(cache_dir=cache_dir, threads=1)
    assert np.array_equal(serial.embed(sample), forward)


def test_no_texts_give_no_rows(onnx: OnnxInt8Embedder) -> None:
    empty = onnx.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_a_16_kib_text_is_truncated_like_the_reference(onnx: OnnxInt8Embedder,
                                                       torch_embedder: SentenceTransformerEmbedder) -> None:
    rng = random.Random(7)
    words = [rng.choice(TEMPLATES).format(s=rng.choice(SUBJECTS), n=rng.choice(NAMES)) for _ in range(400)]
    text = " ".join(words)[: 16 * 1024]
    assert onnx.max_length == 256  # sentence_bert_config.json of the bundled model
    vector = onnx.embed([text, "short"])[0]
    assert np.isclose(np.linalg.norm(vector), 1.0, atol=1e-5)
    assert float(vector @ torch_embedder.embed([text])[0]) >= 0.97
    # Only the first max_length tokens count, as in sentence-transformers.
    assert float(vector @ onnx.embed([text[:8000]])[0]) >= 0.99


def test_a_second_construction_loads_the_cache(onnx: OnnxInt8Embedder, cache_dir: Path) -> None:
    builds, stamp = onnx_embedding.builds, onnx.path.stat().st_mtime_ns
    again = OnnxInt8Embedder(cache_dir=cache_dir)
    assert onnx_embedding.builds == builds
    assert again.path == onnx.path and onnx.path.stat().st_mtime_ns == stamp
    assert [p.name for p in cache_dir.iterdir()] == [onnx.path.name]  # no temporary files left behind
    assert np.allclose(again.embed(["hello there"]), onnx.embed(["hello there"]))


@pytest.fixture
def onnx_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, object]]]:
    """What onnx_embedding logs meanwhile. The module gets a fresh logger first: ``configure_logging`` caches a
    logger's processors on its first use, and one first used before this test (by any earlier test in the run)
    would write past ``capture_logs``."""
    monkeypatch.setattr(onnx_embedding, "log", structlog.get_logger(onnx_embedding.__name__))
    with capture_logs() as logs:
        yield logs


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_corrupt_cache_file_is_rebuilt_with_a_warning(onnx: OnnxInt8Embedder, tmp_path: Path, damage: str,
                                                        onnx_logs: list[dict[str, object]]) -> None:
    path = tmp_path / onnx.path.name
    good = onnx.path.read_bytes()
    path.write_bytes({"garbage": b"not an onnx model\x00" * 100, "truncated": good[: len(good) // 3],
                      "empty": b""}[damage])
    # Left by a build killed half-way: an old one goes with the next build, a fresh one may be another's.
    stale, fresh = tmp_path / f".{path.name}.old.tmp", tmp_path / f".{path.name}.new.tmp"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    builds = onnx_embedding.builds
    rebuilt = OnnxInt8Embedder(cache_dir=tmp_path)
    assert not stale.exists() and fresh.exists()
    assert rebuilt.path == path
    assert onnx_embedding.builds == builds + 1
    assert any(entry["event"] == "onnx_cache_unreadable" and entry["log_level"] == "warning" for entry in onnx_logs)
    assert path.stat().st_size > 10_000_000
    assert np.allclose(rebuilt.embed(["hello there"]), onnx.embed(["hello there"]), atol=1e-5)


def test_an_unwritable_cache_folder_still_gives_an_embedder(onnx: OnnxInt8Embedder, tmp_path: Path,
                                                            onnx_logs: list[dict[str, object]]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    built = OnnxInt8Embedder(cache_dir=blocker / "models")
    assert any(entry["event"] == "onnx_cache_unwritable" for entry in onnx_logs)
    assert np.allclose(built.embed(["hello there"]), onnx.embed(["hello there"]), atol=1e-5)


def _construct(cache: str) -> str:
    return str(OnnxInt8Embedder(cache_dir=Path(cache)).embed(["hello there"])[0][:4])


def test_processes_starting_together_share_one_sound_cache_file(tmp_path: Path, onnx: OnnxInt8Embedder) -> None:
    """Worker and API starting at once: each builds into its own temporary file and renames it into place."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = pool.map(_construct, [str(tmp_path)] * 2)
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [onnx.path.name]
    assert np.allclose(OnnxInt8Embedder(cache_dir=tmp_path).embed(["hello there"]), onnx.embed(["hello there"]),
                       atol=1e-5)


def test_the_cache_key_follows_the_weights(tmp_path: Path) -> None:
    bundled = model_directory(BUNDLED_MODEL)
    copy = tmp_path / "my-model"
    shutil.copytree(bundled, copy)
    assert cache_file(tmp_path, str(copy), copy) == cache_file(tmp_path, str(copy), copy)
    before = cache_file(tmp_path, str(copy), copy)
    with (copy / "model.safetensors").open("r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x01\x02\x03")
    assert cache_file(tmp_path, str(copy), copy) != before
    assert before.name.startswith("my-model-") and before.parent == tmp_path


@pytest.mark.parametrize(("config", "modes"), [
    # sentence-transformers 5 writes one name; before, one flag per mode (none set reads as mean).
    ({"word_embedding_dimension": 384, "pooling_mode": "mean", "include_prompt": True}, ["mean"]),
    ({"pooling_mode": ["mean"]}, ["mean"]),
    ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}, ["mean"]),
    ({"word_embedding_dimension": 384}, ["mean"]),
    # The name wins over flags, as sentence-transformers reads it.
    ({"pooling_mode": "mean", "pooling_mode_cls_token": True}, ["mean"]),
    ({"pooling_mode": "cls"}, ["cls"]),
    ({"pooling_mode": ["mean", "max"]}, ["mean", "max"]),
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, ["cls"]),
    ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, ["max", "mean"]),
    ({"pooling_mode": "lasttoken"}, ["lasttoken"]),
])
def test_the_pooling_config_is_read_in_both_spellings(tmp_path: Path, config: dict, modes: list[str]) -> None:
    assert sorted(onnx_embedding.pooling_modes(config)) == sorted(modes)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(config))
    if modes == ["mean"]:
        onnx_embedding.check_mean_pooling(tmp_path)
    else:
        with pytest.raises(OnnxModelError, match="mean pooling only.*COMPASSMEM_EMBEDDER=torch"):
            onnx_embedding.check_mean_pooling(tmp_path)


def test_a_model_that_is_no_local_folder_is_refused() -> None:
    with pytest.raises(OnnxModelError, match="COMPASSMEM_EMBEDDER=torch"):
        OnnxInt8Embedder("sentence-transformers/some-hub-model")


def test_the_factory_builds_the_configured_embedder(tmp_path: Path, cache_dir: Path,
                                                    onnx: OnnxInt8Embedder) -> None:
    assert Settings().embedder == "onnx-int8"
    built = make_embedder(Settings(data_dir=tmp_path, embedder_cache_dir=cache_dir), threads=1)
    assert isinstance(built, OnnxInt8Embedder) and built.path == onnx.path
    assert make_embedder.__module__ == "compassmem.embedding.embedders"
    # Unset, the cache lives in the data directory.
    assert Settings(data_dir=tmp_path).embedder_cache_dir is None
    reference = make_embedder(Settings(data_dir=tmp_path, embedder="torch"))
    assert isinstance(reference, SentenceTransformerEmbedder)


@pytest.fixture(autouse=True)
def _no_leftover_threads() -> Iterator[None]:
    # Keep torch's process-wide thread count as the other tests expect it (the factory may set it).
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
