"""What each shipped model costs, measured in one run: ingest turns/s and query p50/p99 in process on a LoCoMo-layout
file, with every model combination on and off, beside recall@10 of categories 1-4.

    python -m benchmarks.model_costs --data LOCOMO.json [--out results/model_costs.json] [--questions 300]
                                     [--rerank-candidates 20 12]

Rows: the embedder (the bundled all-MiniLM-L6-v2, ``dialogue-minilm`` or ``dialogue-minilm-mix``) that builds the
memory, times the reranker (none, or ``relevance-minilm``) that ranks its queries. Each embedder builds its memory
once (the ingest figure: ``Memory.add`` of every turn, the in-process write path into the embedded stores); the
reranker rows query the same memory. Every query is asked once after one warm-up pass over the first questions, so
the hot tier is warm for all rows alike; the order of the rows is fixed, and the machine should be quiet (no tests,
no other benchmark). With ``--rerank-candidates`` each reranker row is measured at each count of turns it reads
("relevance-minilm x12"): the runtime setting ``ranking.rerank_candidates`` that trades its cost for its gain.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, latency_stats, print_table, require_data, write_results
from compassmem.core.config import BUNDLED_MODEL, RERANKER_MODEL, SHIPPED_EMBEDDING_MODELS, Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.logging_setup import configure_logging
from compassmem.embedding.embedders import make_embedder
from compassmem.evaluation.locomo_questions import load_locomo_questions
from compassmem.evaluation.recall import recall_at
from compassmem.library.memory import Memory
from compassmem.retrieval.engine import RankingConfig
from compassmem.write.importers import read_turns

CATEGORIES = (1, 2, 3, 4)
WARM_UP = 20


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "model_costs.json")
    parser.add_argument("--questions", type=int, default=0, help="ask only the first N questions (0: all)")
    parser.add_argument("--embedders", nargs="+", default=[BUNDLED_MODEL, *SHIPPED_EMBEDDING_MODELS])
    parser.add_argument("--rerankers", nargs="+", default=["none", RERANKER_MODEL])
    parser.add_argument("--rerank-candidates", nargs="+", type=int, default=[RankingConfig().rerank_candidates],
                        help="a reranker row for each of these counts of turns it reads (ranking.rerank_candidates)")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    data = require_data(args.data)
    questions = [q for q in load_locomo_questions(data)[0] if q.category in CATEGORIES and q.evidence]
    questions = questions[: args.questions] if args.questions else questions
    turns = list(read_turns(data))
    rows, measured = [], []
    for model in args.embedders:
        with tempfile.TemporaryDirectory() as scratch:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None, data_dir=Path(scratch), embedding_model=model, llm_url=None, api_view_max_age_s=1e9)
            embedder = make_embedder(settings)
            with Memory(settings, embedder=embedder) as built:
                started = time.perf_counter()
                built.add(turns)
                ingest = len(turns) / (time.perf_counter() - started)
                runs = [(reranker, count) for reranker in args.rerankers
                        for count in ([None] if reranker == "none" else args.rerank_candidates)]
                for reranker, candidates in runs:
                    chosen = settings.model_copy(update={"reranker": reranker})
                    ask = [QueryRequest(conversation_id=q.conversation_id, question=q.question, budget_turns=10)
                           for q in questions]
                    latencies, recalls = [], []
                    with Memory(chosen, stores=built.stores, embedder=embedder) as memory:
                        if candidates is not None:
                            memory.engine.use_ranking(
                                memory.engine.config.ranking.model_copy(update={"rerank_candidates": candidates}))
                        for request in ask[:WARM_UP]:
                            memory.query(request)
                        for question, request in zip(questions, ask, strict=True):
                            started = time.perf_counter()
                            found = memory.query(request).turn_ids
                            latencies.append(1000 * (time.perf_counter() - started))
                            recalls.append(recall_at(found, question.evidence, 10))
                    stats = latency_stats(latencies)
                    entry = {"embedding_model": model, "reranker": reranker, "rerank_candidates": candidates,
                             "ingest_turns_per_s": round(ingest, 1),
                             "query_p50_ms": round(stats["p50"], 2), "query_p99_ms": round(stats["p99"], 2),
                             "recall_at10": round(100 * sum(recalls) / len(recalls), 1), "questions": len(recalls)}
                    measured.append(entry)
                    rows.append([model, reranker if candidates is None else f"{reranker} x{candidates}",
                                 entry["ingest_turns_per_s"], entry["query_p50_ms"], entry["query_p99_ms"],
                                 entry["recall_at10"]])
                    print(f"  {model} + {rows[-1][1]}: done", flush=True)
    base = measured[0]
    for entry in measured:
        entry["query_p50_ratio"] = round(entry["query_p50_ms"] / base["query_p50_ms"], 2)
        entry["ingest_ratio"] = round(entry["ingest_turns_per_s"] / base["ingest_turns_per_s"], 2)
    print(f"\n{data.name}: {len(turns)} turns, {len(questions)} questions of categories 1-4 (in process, one run)")
    print_table(["embedding model", "reranker", "ingest turns/s", "query p50 ms", "query p99 ms", "1-4 @10 %"], rows)
    write_results(args.out, {"data": data.name, "turns": len(turns), "rows": measured})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
