"""Ingestion throughput: the whole in-process pipeline against the embedding-only rate of the same model.

The embedder is the floor: everything else (segmentation, merging, relations, clustering, both stores)
should cost little on top. Each round measures both, alternating, on the same turns; the table reports
medians and the ratio, since timings on a shared 2-core machine are noisy.

    python -m benchmarks.ingest_throughput [--data PATH] [--rounds 3] [--limit N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from compassmem.config import Settings
from compassmem.embedding import SentenceTransformerEmbedder
from compassmem.importers import read_turns
from compassmem.models import Turn
from compassmem.pipeline import MemoryPipeline, PipelineConfig
from compassmem.sinks.batching import GraphSink, VectorSink
from compassmem.sinks.factory import open_stores


def embedding_only(embedder: SentenceTransformerEmbedder, turns: list[Turn], batch: int) -> float:
    started = time.perf_counter()
    for index in range(0, len(turns), batch):
        embedder.embed([t.search_text() for t in turns[index : index + batch]])
    return len(turns) / (time.perf_counter() - started)


def pipeline_rate(embedder: SentenceTransformerEmbedder, turns: list[Turn], batch: int, with_stores: bool) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        config = PipelineConfig(batch_turns=batch)
        if not with_stores:
            started = time.perf_counter()
            MemoryPipeline(embedder, [], config).ingest(turns)
            return len(turns) / (time.perf_counter() - started)
        with open_stores(Settings(data_dir=Path(scratch)), dim=embedder.dim) as stores:
            pipeline = MemoryPipeline(embedder, [VectorSink(stores.vectors), GraphSink(stores.graph)], config)
            started = time.perf_counter()
            pipeline.ingest(turns)
            return len(turns) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (0 = all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "ingest_throughput.json")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    if args.limit:
        turns = turns[: args.limit]
    embedder = SentenceTransformerEmbedder()
    embedder.embed([t.search_text() for t in turns[:64]])  # warm-up: first call pays for lazy initialisation
    rates: dict[str, list[float]] = {"embedding only": [], "pipeline, no stores": [], "pipeline + both stores": []}
    for round_number in range(args.rounds):
        rates["embedding only"].append(embedding_only(embedder, turns, args.batch))
        rates["pipeline, no stores"].append(pipeline_rate(embedder, turns, args.batch, with_stores=False))
        rates["pipeline + both stores"].append(pipeline_rate(embedder, turns, args.batch, with_stores=True))
        print(f"round {round_number + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rates.items()))
    baseline = statistics.median(rates["embedding only"])
    rows = [[name, statistics.median(values), min(values), max(values), statistics.median(values) / baseline]
            for name, values in rates.items()]
    print(f"\n{len(turns)} turns, batch {args.batch}, {args.rounds} rounds (turns/s)")
    print_table(["measure", "median", "min", "max", "ratio to embedding"], rows)
    write_results(args.out, {
        "turns": len(turns), "batch": args.batch, "rounds": args.rounds, "rates": rates,
        "medians": {row[0]: row[1] for row in rows}, "ratio_to_embedding": {row[0]: row[4] for row in rows},
    })


if __name__ == "__main__":
    main()
