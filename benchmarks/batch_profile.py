"""Where a worker batch spends its time: the stream processor's batch step under cProfile, top functions.

Runs the development turns as turns-topic records through ``MemoryStreamProcessor`` exactly as the worker's store
thread does (decode, apply, state encoding, every sink flushed into fresh embedded stores), in batches of
``--batch`` records over ``--partitions`` partitions, carrying each conversation's table value from batch to batch.
Kafka is left out: the broker's share is measured end to end by ``benchmarks.stream_throughput``.

First a timed pass without the profiler (ms per batch, and the embedder's share of it), then a profiled pass on
fresh stores; the table lists the top functions by own time and by cumulative time, the embedder's own frames
included, so "what the embedder does not need" is what is left beside them.

    python -m benchmarks.batch_profile [--data PATH] [--batch 256] [--top 10] [--embedder onnx-int8]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.write.importers import read_turns
from compassmem.core.models import Turn
from compassmem.text.lexicon import noun_lexicon
from compassmem.publish.producer import encode_turn
from compassmem.sinks.factory import open_stores
from compassmem.streams.decoding import RawRecord
from compassmem.streams.processor import BatchInput, MemoryStreamProcessor

TOPIC = "bench.turns"


class _TimedEmbedder:
    """The embedder with the seconds spent in it counted, to split a batch into embedding and the rest."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.dim = inner.dim
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> Any:
        started = time.perf_counter()
        try:
            return self._inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started


def turn_records(turns: Sequence[Turn], partitions: int) -> list[RawRecord]:
    """The turns as the worker reads them: keyed by conversation, one conversation per partition, each partition
    with its own offsets."""
    offsets = [0] * partitions
    records = []
    for turn in turns:
        key, value = encode_turn(turn)
        partition = zlib.crc32(key) % partitions  # a stable stand-in for the producer's key hash
        records.append(RawRecord(topic=TOPIC, partition=partition, offset=offsets[partition], key=key, value=value,
                                 timestamp=turn.timestamp.timestamp()))
        offsets[partition] += 1
    return records


def run_batches(embedder: Any, records: Sequence[RawRecord], batch: int, scratch: Path) -> int:
    """All records through a fresh processor and fresh stores, batch by batch; returns the number of batches."""
    with open_stores(Settings(data_dir=scratch), dim=embedder.dim) as stores:
        processor = MemoryStreamProcessor(embedder, stores)
        states: dict[str, bytes] = {}
        count = 0
        for start in range(0, len(records), batch):
            chunk = records[start : start + batch]
            wanted = {record.key.decode("utf-8") for record in chunk if record.key}
            out = processor.sinks.write(partial(processor.process, BatchInput(
                records=chunk, states={k: v for k, v in states.items() if k in wanted}, tombstones={})))
            for key, (value, _partition) in out.states.items():
                if value is None:
                    states.pop(key, None)
                else:
                    states[key] = value
            count += 1
        return count


def top_functions(profile: cProfile.Profile, key: str, top: int, ours_only: bool = False) -> list[list[Any]]:
    """The ``top`` functions by own or cumulative time; ``ours_only``: compassmem's own functions only (by
    cumulative time they say which stage of the batch costs what)."""
    stats = pstats.Stats(profile)
    entries = []
    for (filename, line, name), (_calls, primitive, own, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if ours_only and "/compassmem/" not in Path(filename).as_posix():
            continue
        where = f"{Path(filename).parent.name}/{Path(filename).name}:{line}" if line else filename
        entries.append((name, where, primitive, own, cumulative))
    total = max(cumulative for _cc, _nc, _own, cumulative, _callers in stats.stats.values())  # type: ignore[attr-defined]
    index = 3 if key == "own" else 4
    entries.sort(key=lambda entry: entry[index], reverse=True)
    return [[name, where, calls, round(own, 3), round(cumulative, 3),
             round(100 * (own if key == "own" else cumulative) / total, 1)]
            for name, where, calls, own, cumulative in entries[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--batch", type=int, default=Settings().stream_batch_size,
                        help="records per batch (default: the worker's, COMPASSMEM_STREAM_BATCH_SIZE)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--embedder", default=None, help="COMPASSMEM_EMBEDDER value (default: the setting's)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (0 = all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "batch_profile.json")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    if args.limit:
        turns = turns[: args.limit]
    settings = Settings()
    if args.embedder:
        settings = settings.model_copy(update={"embedder": args.embedder})
    embedder = _TimedEmbedder(make_embedder(settings))
    embedder.embed([t.search_text() for t in turns[:64]])  # the first call initialises lazily
    embedder.seconds = 0.0
    noun_lexicon()  # loaded once per process (about a second): the timed pass would pay for it alone
    records = turn_records(turns, args.partitions)

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        batches = run_batches(embedder, records, args.batch, Path(scratch) / "timed")
        seconds = time.perf_counter() - started
    per_batch_ms = 1000 * seconds / batches
    embed_share = embedder.seconds / seconds

    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory() as scratch:
        profile.enable()
        run_batches(embedder, records, args.batch, Path(scratch) / "profiled")
        profile.disable()

    print(f"{len(records)} records in {batches} batches of {args.batch} over {args.partitions} partitions, "
          f"embedder {settings.embedder}")
    print(f"timed pass: {seconds:.2f} s, {per_batch_ms:.1f} ms per batch, {len(records) / seconds:.0f} turns/s; "
          f"embedding {100 * embed_share:.0f} % of it, the rest {per_batch_ms * (1 - embed_share):.1f} ms per batch")
    headers = ["function", "where", "calls", "own s", "cumulative s", "% of run"]
    tables = {}
    for key, ours_only, title in (("own", False, "by own time"),
                                  ("cumulative", True, "of compassmem's functions by cumulative time")):
        print(f"\ntop {args.top} {title} (profiled pass)")
        rows = top_functions(profile, key, args.top, ours_only)
        print_table(headers, rows)
        tables[key] = [dict(zip(headers, row, strict=True)) for row in rows]
    write_results(args.out, {
        "data": str(args.data), "records": len(records), "batch": args.batch, "partitions": args.partitions,
        "embedder": settings.embedder, "seconds": round(seconds, 3), "batches": batches,
        "ms_per_batch": round(per_batch_ms, 2), "turns_per_second": round(len(records) / seconds, 1),
        "embedding_share": round(embed_share, 3), "top": tables,
    })


if __name__ == "__main__":
    main()
