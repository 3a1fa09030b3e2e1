"""LoCoMo evidence recall@5/10/20 of compassmem next to the baselines (compassmem/evaluation/baselines.py), same run.

    python -m benchmarks.locomo_recall [--data PATH] [--out results/locomo_recall.json]
                                       [--data-dir DIR --reuse] [--no-baselines] [--embedder onnx-int8|torch]

Memory is built from the turns and session dates only (the in-process pipeline into the embedded stores);
questions are read by the evaluation code alone and asked through QueryEngine.query, the code path behind
POST /v1/query. The embedder is COMPASSMEM_EMBEDDER's unless --embedder names one (run both to compare the torch
reference with onnx-int8); the baselines use the same embedder. Also reports mean context tokens returned and query
latency p50/p99 (in-process, no HTTP).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from benchmarks.locomo_baselines import results_json, table_rows
from compassmem.config import Settings
from compassmem.embedding import Embedder, make_embedder
from compassmem.evaluation.baselines import build_baselines, load_turn_corpus
from compassmem.evaluation.harness import evaluate_retriever
from compassmem.evaluation.locomo_questions import load_locomo_questions
from compassmem.evaluation.recall import BUDGETS
from compassmem.importers import read_turns
from compassmem.logging_setup import configure_logging
from compassmem.pipeline import MemoryPipeline
from compassmem.query_api.engine import QueryEngine
from compassmem.query_api.hot_tier import HotTier
from compassmem.query_api.schemas import QueryRequest
from compassmem.sinks.batching import GraphSink, VectorSink
from compassmem.sinks.factory import Stores, open_stores


class EngineRetriever:
    """The system under test as the evaluation loop sees it; records each query's latency."""

    def __init__(self, engine: QueryEngine, budget: int) -> None:
        self.engine = engine
        self.budget = budget
        self.latencies_ms: list[float] = []

    def rank(self, conversation_id: str, question: str) -> list[str]:
        started = time.perf_counter()
        response = self.engine.query(QueryRequest(conversation_id=conversation_id, question=question,
                                                  budget_turns=self.budget))
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        return response.turn_ids


def build_memory(data: Path, stores: Stores, embedder: Embedder) -> float:
    turns = list(read_turns(data))
    pipeline = MemoryPipeline(embedder, [VectorSink(stores.vectors), GraphSink(stores.graph)])
    summary = pipeline.ingest(turns)
    print(f"memory: {summary.events} events from {summary.turns} turns, {sum(summary.relations_by_type.values())} "
          f"relations, built in {summary.seconds:.1f} s")
    return summary.seconds


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "locomo_recall.json")
    parser.add_argument("--data-dir", type=Path, help="keep the built memory here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="query the memory already in --data-dir")
    parser.add_argument("--no-baselines", action="store_true", help="system only (for quick iterations)")
    parser.add_argument("--embedder", choices=["onnx-int8", "torch"],
                        help="the embedder to measure (default: the COMPASSMEM_EMBEDDER setting)")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    data = require_data(args.data)
    configure_logging(args.log_level.upper())
    started = time.perf_counter()
    questions, report = load_locomo_questions(data)
    corpus = load_turn_corpus(data)
    defaults = Settings()
    chosen = args.embedder or defaults.embedder
    embedder = make_embedder(defaults.model_copy(update={"embedder": chosen}))
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = args.data_dir or Path(scratch)
        with open_stores(Settings(data_dir=data_dir), dim=embedder.dim) as stores:
            ingest_seconds = 0.0 if args.reuse else build_memory(data, stores, embedder)
            hot = HotTier(stores.vectors, stores.graph, max_age_s=1e9)
            engine = QueryEngine(embedder, stores.vectors, stores.graph, hot)
            retriever = EngineRetriever(engine, budget=max(BUDGETS))
            results = [evaluate_retriever("compassmem", retriever, questions, text_of=corpus.text_of)]
    if not args.no_baselines:
        baselines = build_baselines(corpus, embedder)
        results += [evaluate_retriever(name, r, questions, text_of=corpus.text_of) for name, r in baselines.items()]
    seconds = time.perf_counter() - started

    print(f"LoCoMo evidence recall on {data.name} with embedder {chosen}: {len(corpus)} turns, "
          f"{report.questions_kept} questions ({report.skipped} skipped without evidence)")
    headers, rows = table_rows(results)
    print_table(headers, rows)
    latencies = retriever.latencies_ms
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    tokens = results[0].mean_context_tokens or {}
    print(f"compassmem query latency (in-process): p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(latencies)} queries; "
          "mean context tokens @" + "/".join(map(str, BUDGETS)) + ": "
          + "/".join(f"{tokens.get(b, 0):.0f}" for b in BUDGETS))
    print(f"{seconds:.1f} s in all")
    output = results_json(data, report, results, seconds)
    output["compassmem"] = {"latency_ms": {"p50": p50, "p99": p99, "median": statistics.median(latencies)},
                            "ingest_seconds": ingest_seconds, "embedder": chosen}
    write_results(args.out, output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
