"""Write-path scaling: does the cost of one turn stay flat as a conversation grows?

One long conversation is built from the development turns repeated N times (each copy with its own turn ids,
sessions and speakers, and shifted 1,000 days, so it is new material for the memory, not a replay), embedded
once up front (the embedder is not measured), then fed turn by turn through the in-process pipeline with sinks
that drop every record (processors only: segmentation, merging, relations, clustering; no stores). The table
gives the median milliseconds per turn in each 1,000-turn window, the conversation's events at its end, and the
bytes of the worker's table record for the conversation then (``encode_record`` of the memory's state); flat
means the last window costs about what the first does, and a record that stops growing means the hot window
(``--hot-events``, COMPASSMEM_WORKER_HOT_EVENTS) bounds the state.

    python -m benchmarks.write_path_scaling [--data PATH] [--copies 4] [--window 1000] [--limit N] [--hot-events 256]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from compassmem.core.config import Settings
from compassmem.embedding.embedders import make_embedder
from compassmem.write.importers import read_turns
from compassmem.core.models import Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.sinks.batching import Sink
from compassmem.streams.state import ConversationRecord, RecordHeader, encode_record

CONVERSATION = "write-path-scaling"


def long_conversation(turns: list[Turn], copies: int) -> list[Turn]:
    """The turns as one conversation, ``copies`` times over, each copy with distinct ids, sessions and speakers."""
    out = []
    for copy in range(copies):
        for turn in turns:
            out.append(turn.model_copy(update={
                "conversation_id": CONVERSATION,
                "turn_id": f"r{copy}-{turn.conversation_id}-{turn.turn_id}",
                "speaker": f"{turn.speaker} {copy}" if copy else turn.speaker,
                "session_id": f"r{copy}-{turn.conversation_id}-{turn.session_id}",
                "timestamp": turn.timestamp + timedelta(days=1000 * copy),
            }))
    return out


class CachedEmbedder:
    """Vectors computed once for every text up front; ``embed`` is then a lookup (not what is measured)."""

    def __init__(self, texts: list[str]) -> None:
        model = make_embedder(Settings(_env_file=None))
        unique = sorted(set(texts))
        self._vectors = dict(zip(unique, model.embed(unique), strict=True))
        self._dim = model.dim

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


class DropSink(Sink):
    def add(self, record: object) -> None:
        pass

    def flush(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--copies", type=int, default=4, help="how many times the development turns repeat")
    parser.add_argument("--window", type=int, default=1000, help="turns per reported window")
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns of the conversation (0 = all)")
    parser.add_argument("--hot-events", type=int, default=PipelineConfig().hot_events,
                        help="events of the conversation its memory holds")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "write_path_scaling.json")
    args = parser.parse_args()
    turns = long_conversation(list(read_turns(require_data(args.data))), args.copies)
    if args.limit:
        turns = turns[: args.limit]
    print(f"embedding {len(turns)} turns once ...")
    embedder = CachedEmbedder([t.search_text() for t in turns])
    # One turn per batch, so each turn's time is measured on its own (the lookup embedder costs next to nothing).
    pipeline = MemoryPipeline(embedder, [DropSink()], PipelineConfig(batch_turns=1, hot_events=args.hot_events))
    seconds: list[float] = []
    events_at: list[int] = []
    record_bytes: list[int] = []
    memory = pipeline.memory_for(turns[0].tenant, CONVERSATION)
    header = RecordHeader(tenant=turns[0].tenant, conversation_id=CONVERSATION, partition=0)
    mark = time.perf_counter()

    def progress(_: int) -> None:
        nonlocal mark
        now = time.perf_counter()
        seconds.append(now - mark)
        events_at.append(memory.stats.events)
        if len(seconds) % args.window == 0 or len(seconds) == len(turns):  # not timed: once per window
            record_bytes.append(len(encode_record(ConversationRecord(header=header, memory=memory.to_state()))))
        mark = time.perf_counter()

    pipeline.ingest(turns, progress=progress, close_at_end=True)
    rows = []
    for start in range(0, len(seconds), args.window):
        window = seconds[start : start + args.window]
        rows.append([f"{start}-{start + len(window)}", events_at[start + len(window) - 1],
                     record_bytes[start // args.window], 1000 * statistics.median(window), 1000 * statistics.mean(window)])
    # Against the last full window (a short remainder is too few turns to compare).
    full = [row for start, row in zip(range(0, len(seconds), args.window), rows, strict=True)
            if len(seconds) - start >= args.window] or rows
    ratio = full[-1][3] / full[0][3] if full[0][3] else float("nan")
    mean_ratio = full[-1][4] / full[0][4] if full[0][4] else float("nan")
    print(f"\n{len(turns)} turns in one conversation ({args.copies} copies of the development turns), "
          f"processors only, hot window {args.hot_events} events; {memory.stats.events} events at the end")
    print_table(["turns", "events at end", "record bytes", "median ms/turn", "mean ms/turn"], rows)
    print(f"last full window / first window: median {ratio:.2f}, mean {mean_ratio:.2f} (most turns only extend "
          "the open segment, so the median is the segmentation step; the mean carries the closing turns)")
    write_results(args.out, {
        "turns": len(turns), "copies": args.copies, "window": args.window, "hot_events": args.hot_events,
        "events": memory.stats.events,
        "windows": [{"turns": r[0], "events": r[1], "record_bytes": r[2], "median_ms": r[3], "mean_ms": r[4]}
                    for r in rows],
        "last_to_first_median_ratio": ratio, "last_to_first_mean_ratio": mean_ratio,
    })


if __name__ == "__main__":
    main()
