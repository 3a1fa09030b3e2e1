"""Ingestion throughput: the whole in-process pipeline against the embedding-only rate of the same model, for each
embedder (the torch reference and onnx-int8, see COMPASSMEM_EMBEDDER), in the same run.

The embedder is the floor: everything else (segmentation, merging, relations, clustering, both stores)
should cost little on top. Each round measures every embedder and measure, alternating, on the same turns; the table
reports medians, the ratio to the same embedder's embedding-only rate and the ratio to the torch reference's rate for
the same measure, since timings on a shared 2-core machine are noisy. Also the latency of embedding one short
question with one intra-op thread (as the query API does), per embedder.

    python -m benchmarks.ingest_throughput [--data PATH] [--rounds 3] [--limit N] [--embedders torch,onnx-int8]
                                           [--embed-calls 16,64] [--no-pipeline]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.write.importers import read_turns
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig


QUESTIONS = ["What did she research?", "When did they paint a sunrise?", "What is his dream job?",
             "How many children does she have?", "Where did they go camping last summer?"]


def embedding_only(embedder: Embedder, turns: list[Turn], batch: int) -> float:
    started = time.perf_counter()
    for index in range(0, len(turns), batch):
        embedder.embed([t.search_text() for t in turns[index : index + batch]])
    return len(turns) / (time.perf_counter() - started)


def question_latency_ms(embedder: Embedder, repeats: int = 20) -> float:
    """Median time to embed one short question on its own (the query API's embedding stage)."""
    times = []
    for _ in range(repeats):
        for question in QUESTIONS:
            started = time.perf_counter()
            embedder.embed([question])
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def pipeline_rate(embedder: Embedder, turns: list[Turn], batch: int, with_stores: bool) -> float:
    config = PipelineConfig(batch_turns=batch)
    if not with_stores:
        # The pipeline by hand: Memory always writes to stores, and this measure is the pipeline without them.
        started = time.perf_counter()
        MemoryPipeline(embedder, [], config).ingest(turns)
        return len(turns) / (time.perf_counter() - started)
    with tempfile.TemporaryDirectory() as scratch, \
            Memory(Settings(data_dir=Path(scratch)), embedder=embedder, pipeline_config=config) as memory:
        started = time.perf_counter()
        memory.add(turns)
        return len(turns) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256, help="turns per pipeline batch")
    parser.add_argument("--embed-calls", default="16,64",
                        help="turns per embed() call for the embedding-only rates (comma-separated); each call is "
                        "sorted by length and cut into batches of COMPASSMEM_EMBEDDING_BATCH_SIZE")
    parser.add_argument("--embedders", default="torch,onnx-int8", help="comma-separated COMPASSMEM_EMBEDDER values")
    parser.add_argument("--no-pipeline", action="store_true", help="embedding-only rates and latency only")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads of every embedder for the rates (0 = each library's default, one per "
                        "core; torch's default spins on a busy machine, ONNX Runtime's threads here do not)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (0 = all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "ingest_throughput.json")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    if args.limit:
        turns = turns[: args.limit]
    calls = [int(c) for c in args.embed_calls.split(",") if c]
    names = [n for n in args.embedders.split(",") if n]
    defaults = Settings()
    import torch

    embedders: dict[str, Embedder] = {}
    for name in names:
        embedders[name] = make_embedder(defaults.model_copy(update={"embedder": name}), threads=args.threads or None)
        embedders[name].embed([t.search_text() for t in turns[:64]])  # warm-up: the first call initialises lazily
    # One question with one thread, as the API embeds it; torch's thread count is process-wide, so it is set for
    # this measure only and restored, and ONNX Runtime gets a second, single-threaded session.
    default_threads = torch.get_num_threads()
    latency: dict[str, list[float]] = {name: [] for name in names}
    single: dict[str, Embedder] = {
        name: embedders[name] if name == "torch"
        else make_embedder(defaults.model_copy(update={"embedder": name}), threads=1) for name in names
    }
    measures = [f"embedding only, calls of {c}" for c in calls]
    if not args.no_pipeline:
        measures += ["pipeline, no stores", "pipeline + both stores"]
    rates: dict[str, dict[str, list[float]]] = {name: {m: [] for m in measures} for name in names}
    for round_number in range(args.rounds):
        for name in names:
            embedder = embedders[name]
            for call, measure in zip(calls, measures, strict=False):
                rates[name][measure].append(embedding_only(embedder, turns, call))
            if not args.no_pipeline:
                rates[name]["pipeline, no stores"].append(pipeline_rate(embedder, turns, args.batch, False))
                rates[name]["pipeline + both stores"].append(pipeline_rate(embedder, turns, args.batch, True))
            torch.set_num_threads(1)
            try:
                latency[name].append(question_latency_ms(single[name]))
            finally:
                torch.set_num_threads(default_threads)
            print(f"round {round_number + 1}/{args.rounds} {name}: "
                  + ", ".join(f"{m} {v[-1]:.0f}/s" for m, v in rates[name].items())
                  + f", one question {latency[name][-1]:.2f} ms")
    reference = "torch" if "torch" in names else names[0]
    rows = []
    for measure in measures:
        for name in names:
            values = rates[name][measure]
            median = statistics.median(values)
            embedding = statistics.median(rates[name][measures[0]])
            rows.append([measure, name, median, min(values), max(values), median / embedding,
                         median / statistics.median(rates[reference][measure])])
    print(f"\n{len(turns)} turns, pipeline batch {args.batch}, {args.rounds} rounds, "
          f"{args.threads or 'default'} intra-op threads (turns/s)")
    print_table(["measure", "embedder", "median", "min", "max", f"ratio to {measures[0]}", f"ratio to {reference}"],
                rows)
    lat_rows = [[name, statistics.median(latency[name]), min(latency[name]), max(latency[name]),
                 statistics.median(latency[reference]) / statistics.median(latency[name])] for name in names]
    print("\none question, one intra-op thread (ms, median of each round's median)")
    print_table(["embedder", "median", "min", "max", f"speed-up over {reference}"], lat_rows)
    write_results(args.out, {
        "turns": len(turns), "batch": args.batch, "rounds": args.rounds, "embed_calls": calls,
        "threads": args.threads or "default", "rates": rates,
        "medians": {f"{row[0]} [{row[1]}]": row[2] for row in rows},
        "ratio_to_embedding": {f"{row[0]} [{row[1]}]": row[5] for row in rows},
        f"ratio_to_{reference}": {f"{row[0]} [{row[1]}]": row[6] for row in rows},
        "question_latency_ms": latency,
    })


if __name__ == "__main__":
    main()
