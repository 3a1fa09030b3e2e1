"""A candidate bundled embedder against today's default (onnx-int8, the bundled all-MiniLM-L6-v2), in one run, on
every development set given: recall and turns/s.

    python -m benchmarks.embedder_compare --data PATH [--data PATH ...] [--candidates e5-small]
                                          [--conversations N] [--rate-turns 128] [--rounds 2]
                                          [--out results/embedder_compare.json]

For each set (LoCoMo layout JSON) and each embedder: a memory is built from the turns (``Memory.add``, the
in-process pipeline into both embedded stores) and every question is asked through ``Memory.query``; the plain
dense baseline (compassmem/evaluation/baselines.py) ranks the same questions with the same embedder. Reported:
compassmem's and the dense baseline's recall@5/10/20 of categories 1-4, the embedder-alone turns/s (the first
--rate-turns turns in calls of 64, embedders taking turns, median of --rounds) and the pipeline turns/s of the build,
each with its ratio to the default's in the same run (absolute rates depend on the machine's load; the ratios much
less). Issue #37's rule for switching the default: recall@10 of categories 1-4 gains at least 2 points at no less than
150 turns/s end to end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel

from benchmarks.common import RESULTS_DIR, print_table, require_data, write_results
from benchmarks.ingest_throughput import embedding_only
from benchmarks.locomo_recall import MemoryRetriever, memory_settings
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.evaluation.baselines import DenseTurnRetriever, TurnCorpus, load_turn_corpus
from compassmem.evaluation.harness import MethodResult, evaluate_retriever
from compassmem.evaluation.locomo_questions import Question, load_locomo_questions
from compassmem.evaluation.recall import BUDGETS, TOGETHER
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.core.models import Turn

DEFAULT = "onnx-int8"
DECISION_BUDGET = 10
GAIN_POINTS = 2.0
MIN_PIPELINE_TURNS_PER_S = 150.0
RATE_CALL = 64


def _settings_embedder(name: str) -> Callable[[], Embedder]:
    return lambda: make_embedder(Settings().model_copy(update={"embedder": name}))


def _e5_small() -> Embedder:
    from benchmarks.e5_small_embedder import E5SmallEmbedder

    return E5SmallEmbedder()


EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "onnx-int8": _settings_embedder("onnx-int8"),
    "torch": _settings_embedder("torch"),
    "e5-small": _e5_small,
}


class EmbedderResult(BaseModel):
    """One embedder on one set."""

    embedder: str
    compassmem: MethodResult
    dense: MethodResult
    embedding_turns_per_s: float
    pipeline_turns_per_s: float
    build_seconds: float


@contextlib.contextmanager
def asking(embedder: Embedder) -> Iterator[None]:
    """Questions are embedded as queries by an asymmetric embedder (one with a ``role``); others are unchanged."""
    if not hasattr(embedder, "role"):
        yield
        return
    before = embedder.role
    embedder.role = "query"
    try:
        yield
    finally:
        embedder.role = before


def first_conversations(data: Path, count: int, folder: Path) -> Path:
    """The first ``count`` conversations of a LoCoMo-layout file, written to ``folder`` (0: the file itself)."""
    if count <= 0:
        return data
    records = json.loads(data.read_text(encoding="utf-8"))
    if count >= len(records):
        return data
    subset = folder / f"{data.stem}-first{count}.json"
    subset.write_text(json.dumps(records[:count]), encoding="utf-8")
    return subset


def embedding_rates(embedders: dict[str, Embedder], turns: list[Turn], rounds: int) -> dict[str, float]:
    """Median embedder-alone turns/s over ``rounds``, the embedders taking turns within each round."""
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    for _ in range(rounds):
        for name, embedder in embedders.items():
            rates[name].append(embedding_only(embedder, turns, RATE_CALL))
    return {name: statistics.median(values) for name, values in rates.items()}


def measure(name: str, embedder: Embedder, data: Path, questions: Sequence[Question],
            corpus: TurnCorpus) -> tuple[MethodResult, MethodResult, float, float]:
    """compassmem's and the dense baseline's results with this embedder, the build's turns/s and its seconds."""
    with tempfile.TemporaryDirectory() as scratch, \
            Memory(memory_settings(Path(scratch), DEFAULT), embedder=embedder) as memory:
        summary = memory.add(read_turns(data))
        print(f"  {name}: {summary.events} events from {summary.turns} turns in {summary.seconds:.1f} s", flush=True)
        dense = DenseTurnRetriever(corpus, embedder)
        with asking(embedder):
            ours = evaluate_retriever(f"compassmem ({name})", MemoryRetriever(memory, budget=max(BUDGETS)),
                                      questions, text_of=corpus.text_of)
            theirs = evaluate_retriever(f"dense ({name})", dense, questions)
    return ours, theirs, summary.turns / summary.seconds, summary.seconds


def recall_cell(result: MethodResult) -> str:
    entry = result.summary.categories.get(TOGETHER)
    return "-" if entry is None else "/".join(f"{100 * entry.recall[b]:.1f}" for b in BUDGETS)


def together_points(result: MethodResult, budget: int = DECISION_BUDGET) -> float:
    return 100 * (result.summary.value(TOGETHER, budget) or 0.0)


def comparison_rows(by_set: dict[str, list[EmbedderResult]]) -> tuple[list[str], list[list[str]]]:
    """One row per set and embedder; ratios and the recall gain are against the set's first row (the default)."""
    budgets = "/".join(map(str, BUDGETS))
    headers = ["set", "embedder", f"compassmem 1-4 r@{budgets} %", f"gain @{DECISION_BUDGET}",
               f"dense 1-4 r@{budgets} %", "embed turns/s", "ratio", "pipeline turns/s", "ratio"]
    rows = []
    for set_name, results in by_set.items():
        reference = results[0]
        for result in results:
            rows.append([
                set_name, result.embedder, recall_cell(result.compassmem),
                f"{together_points(result.compassmem) - together_points(reference.compassmem):+.1f}",
                recall_cell(result.dense), f"{result.embedding_turns_per_s:.1f}",
                f"{result.embedding_turns_per_s / reference.embedding_turns_per_s:.2f}",
                f"{result.pipeline_turns_per_s:.1f}",
                f"{result.pipeline_turns_per_s / reference.pipeline_turns_per_s:.2f}",
            ])
    return headers, rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, action="append", required=True,
                        help="a development set in LoCoMo layout (repeat for several)")
    parser.add_argument("--candidates", default="e5-small",
                        help=f"comma-separated embedders to compare with {DEFAULT}: {', '.join(EMBEDDERS)}")
    parser.add_argument("--conversations", type=int, default=0,
                        help="only the first N conversations of each set (0 = all), for builds that take too long")
    parser.add_argument("--rate-turns", type=int, default=128, help="turns for the embedder-alone rate")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the embedder-alone rate")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "embedder_compare.json")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    candidates = [c for c in args.candidates.split(",") if c]
    unknown = [c for c in candidates if c not in EMBEDDERS or c == DEFAULT]
    if unknown or not candidates:
        parser.error(f"--candidates: {unknown or 'none'} not among {sorted(set(EMBEDDERS) - {DEFAULT})}")
    sets = [require_data(path) for path in args.data]
    configure_logging(args.log_level.upper())
    started = time.perf_counter()
    embedders = {name: EMBEDDERS[name]() for name in [DEFAULT, *candidates]}
    by_set: dict[str, list[EmbedderResult]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for given in sets:
            data = first_conversations(given, args.conversations, Path(scratch))
            questions, report = load_locomo_questions(data)
            corpus = load_turn_corpus(data)
            print(f"{given.name}: {len(corpus)} turns, {report.questions_kept} questions", flush=True)
            rates = embedding_rates(embedders, list(read_turns(data))[: args.rate_turns], args.rounds)
            results = []
            for name, embedder in embedders.items():
                ours, dense, pipeline_rate, seconds = measure(name, embedder, data, questions, corpus)
                results.append(EmbedderResult(embedder=name, compassmem=ours, dense=dense,
                                              embedding_turns_per_s=rates[name], pipeline_turns_per_s=pipeline_rate,
                                              build_seconds=seconds))
            by_set[given.name] = results
    seconds = time.perf_counter() - started
    print(f"\nembedders against {DEFAULT} (same run; turns/s under this machine's load, ratios to {DEFAULT})")
    headers, rows = comparison_rows(by_set)
    print_table(headers, rows)
    print(f"switch rule: compassmem 1-4 recall@{DECISION_BUDGET} +{GAIN_POINTS:g} points on every set at "
          f">= {MIN_PIPELINE_TURNS_PER_S:g} pipeline turns/s; {seconds:.1f} s in all")
    write_results(args.out, {
        "benchmark": "bundled embedder comparison", "default": DEFAULT, "candidates": candidates,
        "conversations": args.conversations or "all", "rate_turns": args.rate_turns, "rounds": args.rounds,
        "sets": {name: [r.model_dump(mode="json") for r in results] for name, results in by_set.items()},
        "table": {"headers": headers, "rows": rows}, "seconds_total": round(seconds, 2),
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
