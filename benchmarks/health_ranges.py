"""The normal range of the memory-health figures over ordinary streams: what `compassmem status` and the Prometheus
alerts (compassmem/monitoring/prometheus/alerts.yml) must not warn about (decision 015).

The LoCoMo development conversations are streamed through the in-process pipeline into embedded stores, as a worker
would (batches of ``--batch`` turns committed one after another, open segments left open), in two orders: one
conversation after another (``compassmem produce`` of the file) and interleaved at random (``--seed``); with
``--tiage``, the TIAGE dev dialogues too (short chit-chat between two alternating speakers, one after another).
After every batch the figures are read the way they are served: each conversation's by ``MemoryHealthMonitor`` from the stores
(what `status` shows), the worker's confidence drift and trend from the ``MemoryMetrics`` the pipeline reports to,
and the all-conversations degree and duplicate rate the alert rules compute from the summed counts. Each figure's
range is taken over the samples where its check applies (its minimum events, segments or relations).

    .venv/bin/python -m benchmarks.health_ranges --data PATH/locomo_dev.json [--tiage PATH/tiage_train_dev.json]
        [--batch 32] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from benchmarks.segmentation import load_dialogues
from compassmem.core.config import Settings
from compassmem.core.contracts.health import HIGH_DUPLICATE_MIN_SEGMENTS, LOW_DEGREE_MIN_EVENTS, MemoryHealth
from compassmem.core.models import DEFAULT_TENANT, Turn
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.monitoring.memory_health import MemoryHealthMonitor
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.sinks.batching import GraphSink, VectorSink
from compassmem.sinks.factory import open_stores
from compassmem.write.importers import read_turns
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig


class Range(BaseModel):
    """The lowest and highest value of a figure over the samples where its check applies."""

    samples: int = 0
    low: float | None = None
    high: float | None = None
    low_at: str | None = Field(default=None, description="where the lowest was seen: stream, conversation, turns")
    high_at: str | None = None

    def add(self, value: float | None, where: str) -> None:
        if value is None:
            return
        self.samples += 1
        if self.low is None or value < self.low:
            self.low, self.low_at = value, where
        if self.high is None or value > self.high:
            self.high, self.high_at = value, where


FIGURES = ("conversation_degree", "conversation_semantic_degree", "conversation_duplicate_rate",
           "conversation_confidence_drift", "all_degree", "all_semantic_degree", "all_duplicate_rate",
           "worker_confidence_drift", "worker_confidence_trend_per_1000")


def orders(turns: list[Turn], seed: int) -> Iterator[tuple[str, list[Turn]]]:
    """The file's order (each conversation whole, one after another) and a random interleaving that keeps each
    conversation's own order."""
    yield "sequential", turns
    queues: dict[str, list[Turn]] = {}
    for turn in turns:
        queues.setdefault(turn.conversation_id, []).append(turn)
    rng = random.Random(seed)
    mixed: list[Turn] = []
    while any(queues.values()):
        queue = queues[rng.choice(sorted(k for k, q in queues.items() if q))]
        mixed.append(queue.pop(0))
    yield f"interleaved (seed {seed})", mixed


def sample(health: MemoryHealth, ranges: dict[str, Range], where: str) -> None:
    """One reading of every figure into its range, where its check applies."""
    for c in health.conversations:
        at = f"{where}, {c.conversation_id}"
        if c.events >= LOW_DEGREE_MIN_EVENTS:
            ranges["conversation_degree"].add(c.average_degree, at)
            ranges["conversation_semantic_degree"].add(c.semantic_degree, at)
        if c.segments >= HIGH_DUPLICATE_MIN_SEGMENTS:
            ranges["conversation_duplicate_rate"].add(c.duplicate_rate, at)
        ranges["conversation_confidence_drift"].add(c.confidence_drift, at)
    events = sum(c.events for c in health.conversations)
    segments = sum(c.segments for c in health.conversations)
    if events >= LOW_DEGREE_MIN_EVENTS:
        ranges["all_degree"].add(2 * sum(c.relations for c in health.conversations) / events, where)
        ranges["all_semantic_degree"].add(2 * sum(c.semantic_relations for c in health.conversations) / events,
                                          where)
    if segments >= HIGH_DUPLICATE_MIN_SEGMENTS:
        ranges["all_duplicate_rate"].add(sum(c.merged_segments for c in health.conversations) / segments, where)
    worker = health.worker
    ranges["worker_confidence_drift"].add(worker.confidence_drift, where)
    ranges["worker_confidence_trend_per_1000"].add(worker.confidence_trend_per_1000, where)


def stream(name: str, turns: list[Turn], embedder: Embedder, batch: int, ranges: dict[str, Range]) -> None:
    with tempfile.TemporaryDirectory(prefix="compassmem-health-") as folder:
        settings = Settings(_env_file=None, data_dir=Path(folder))  # type: ignore[call-arg]
        stores = open_stores(settings, embedder.dim)
        try:
            metrics = MemoryMetrics(process_collectors=False)
            pipeline = MemoryPipeline(embedder, [VectorSink(stores.vectors), GraphSink(stores.graph)],
                                      PipelineConfig.from_settings(settings).model_copy(update={"batch_turns": batch}),
                                      observer=metrics)
            monitor = MemoryHealthMonitor(stores, metrics)
            conversations = len({t.conversation_id for t in turns})
            for start in range(0, len(turns), batch):
                chunk = turns[start:start + batch]
                pipeline.ingest(chunk, close_at_end=False)
                metrics.consumed(len(chunk))  # the worker's figures are reported once it consumes
                where = f"{name}, {start + len(chunk)} turns"
                sample(monitor.report(DEFAULT_TENANT, limit=conversations), ranges, where)
            pipeline.close_all()
            sample(monitor.report(DEFAULT_TENANT, limit=conversations), ranges, f"{name}, end")
        finally:
            stores.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--tiage", type=Path, help="the TIAGE dialogues (tiage_train_dev.json): its dev split too")
    parser.add_argument("--batch", type=int, default=32, help="turns per committed batch (a sample after each)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "health_ranges.json")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    embedder = make_embedder(Settings(_env_file=None))  # type: ignore[call-arg]
    ranges = {figure: Range() for figure in FIGURES}
    streams = []
    named = list(orders(turns, args.seed))
    if args.tiage:
        named.append(("TIAGE dev", [turn for dialogue in load_dialogues(args.tiage) if dialogue.split == "dev"
                                    for turn in dialogue.turns()]))
    for name, ordered in named:
        stream(name, ordered, embedder, args.batch, ranges)
        streams.append(name)
    print_table(["figure", "samples", "low", "high", "lowest at", "highest at"],
                [[figure, r.samples, r.low, r.high, r.low_at, r.high_at] for figure, r in ranges.items()])
    write_results(args.out, {"data": str(args.data), "turns": len(turns),
                             "conversations": len({t.conversation_id for t in turns}), "batch_turns": args.batch,
                             "streams": streams, "ranges": {k: v.model_dump() for k, v in ranges.items()}})


if __name__ == "__main__":
    main()
