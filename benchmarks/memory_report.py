"""What memory the pipeline builds from LoCoMo conversations, for a person to judge.

Checks every turn lands in exactly one event, prints the summary (events, turns per event, relations by type,
average degree with and without adjacency edges, duplicate rate), a seeded random sample of causal relations with
their cue and both events' frames, and a seeded random sample of event frames (what happened, who, the main
entities, when). With the LLM steps switched on in the settings (COMPASSMEM_LLM_URL and
COMPASSMEM_LLM_BOUNDARY_CHECK / COMPASSMEM_LLM_SUMMARY) it builds with them and reports what they did.

With ``--compare-segmenters`` the same turns are built once more with the boundary detector compassmem used before
its events followed topics (``benchmarks/previous_segmenter.py``), everything else the same, and the two memories'
summaries are printed side by side: what the topic detector does to the event graph, measured in one run.

    python -m benchmarks.memory_report [--data PATH] [--samples 10] [--events 5] [--seed 7] [--compare-segmenters]
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, require_data, write_results
from benchmarks.previous_segmenter import PreviousBoundaryDetector
from compassmem.cli.ingest_report import print_summary
from compassmem.core.config import Settings
from compassmem.embedding.embedders import make_embedder
from compassmem.write.importers import read_turns
from compassmem.llm.steps import llm_steps
from compassmem.core.models import Event, Relation, RelationType
from compassmem.core.models import SummarySource
from compassmem.write.pipeline import IngestSummary, MemoryPipeline, PipelineConfig
from compassmem.processors.event_frames import frame_lines
from compassmem.processors.segmentation import JudgeCounts
from compassmem.sinks.batching import Record, Sink


def event_text(event: Event, limit: int = 400) -> str:
    text = " | ".join(f"{o.turn_id} {o.speaker}: {o.text}" for o in event.observations)
    return text if len(text) <= limit else text[:limit] + " ..."


def frame(event: Event) -> dict[str, str]:
    """The event frame as a person reads it: what happened, who, the main entities, when; and its turn ids."""
    turns = event.turn_ids
    return {**dict(frame_lines(event)), "turns": f"{turns[0]}..{turns[-1]} ({len(turns)})"}


def print_frame(event: Event, indent: str = "    ") -> None:
    for label, text in frame(event).items():
        print(f"{indent}{label + ':':<9} {text}")


class LatestRecords(Sink):
    """The latest version of every event and relation written: a memory holds only its most recent events."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], Event] = {}
        self.relations: dict[tuple[str, str], Relation] = {}

    def add(self, record: Record) -> None:
        key = f"{record.tenant}/{record.conversation_id}"
        if isinstance(record, Event):
            self.events[(key, record.event_id)] = record
        elif isinstance(record, Relation):
            self.relations[(key, record.relation_id)] = record

    def flush(self) -> None:
        """Nothing to write."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--events", type=int, default=5, help="random event frames to show")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "memory_report.json")
    parser.add_argument("--compare-segmenters", action="store_true",
                        help="build the turns again with the previous boundary detector and compare the two")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    written = LatestRecords()
    settings = Settings(_env_file=None)
    # The pipeline by hand rather than Memory, built as Memory builds it: the report reads what only the pipeline
    # holds (each conversation's boundary and merge reasons, the LLM judge's counts), and needs no stores.
    pipeline = MemoryPipeline(make_embedder(settings), [written], PipelineConfig.from_settings(settings),
                              llm=llm_steps(settings))
    summary = pipeline.ingest(turns)

    membership = Counter((key, turn_id) for (key, _), event in written.events.items() for turn_id in event.turn_ids)
    expected = {(f"{t.tenant}/{t.conversation_id}", t.turn_id) for t in turns}
    missing = expected - set(membership)
    repeated = [key for key, count in membership.items() if count > 1]
    print(f"turns: {len(expected)}; in no event: {len(missing)}; in more than one event: {len(repeated)}")
    print_summary(summary)

    boundary = Counter()
    merges = Counter()
    for memory in pipeline.memories.values():
        boundary.update(memory.stats.boundary_reasons)
        merges.update(memory.stats.merge_reasons)
    print(f"boundaries by reason: {dict(boundary)}; merges by reason: {dict(merges)}")
    judged = JudgeCounts()
    for memory in pipeline.memories.values():
        for name, count in memory.segmenter.judge:
            setattr(judged, name, getattr(judged, name) + count)
    sources = Counter(event.summary_source.value for event in written.events.values())
    if judged.asked or sources[SummarySource.LLM]:
        print(f"LLM boundary checks: {judged.model_dump()}; summaries by source: {dict(sources)}")

    # Conversation by conversation (the last events of all of them are closed at the end of the input).
    order = {key: number for number, key in enumerate(pipeline.memories)}
    causal = sorted(((key, relation) for (key, _), relation in written.relations.items()
                     if relation.type is RelationType.CAUSAL and relation.superseded_by is None),
                    key=lambda item: order[item[0]])
    picked = random.Random(args.seed).sample(causal, min(args.samples, len(causal)))
    samples = []
    print(f"\n{len(picked)} random causal relations of {len(causal)} (seed {args.seed}):")
    for number, (key, relation) in enumerate(picked, start=1):
        cause, effect = written.events[(key, relation.source)], written.events[(key, relation.target)]
        samples.append({"cue": relation.evidence, "confidence": relation.confidence,
                        "cause": event_text(cause), "effect": event_text(effect),
                        "cause_frame": frame(cause), "effect_frame": frame(effect)})
        print(f"\n[{number}] confidence {relation.confidence:.2f}; cue: {relation.evidence!r}")
        print("  cause:")
        print_frame(cause)
        print("  effect:")
        print_frame(effect)

    events = sorted(written.events.items(), key=lambda item: (order[item[0][0]], item[1].temporal_info.start))
    shown = random.Random(args.seed).sample(events, min(args.events, len(events)))
    print(f"\n{len(shown)} random event frames of {len(events)} (seed {args.seed}):")
    frames = []
    for number, ((key, _), event) in enumerate(shown, start=1):
        print(f"\n[{number}] {key}")
        print_frame(event)
        frames.append({"conversation": key, **frame(event)})
    previous = None
    if args.compare_segmenters:
        previous = MemoryPipeline(pipeline.embedder, [LatestRecords()], PipelineConfig.from_settings(settings),
                                  llm=llm_steps(settings), detector=PreviousBoundaryDetector).ingest(turns)
        print_comparison(summary, previous)
    write_results(args.out, {
        "summary": summary.model_dump(), "turns_missing": len(missing), "turns_repeated": len(repeated),
        "boundaries": dict(boundary), "merges": dict(merges), "llm_boundary_checks": judged.model_dump(),
        "summary_sources": dict(sources), "causal_samples": samples, "event_frames": frames,
        **({"previous_segmenter_summary": previous.model_dump()} if previous is not None else {}),
    })


def print_comparison(topic: IngestSummary, previous: IngestSummary) -> None:
    """The two memories of the same turns, the topic detector's beside the previous detector's."""
    rows = [
        ("events", topic.events, previous.events),
        ("mean turns per event", f"{topic.mean_turns_per_event:.2f}", f"{previous.mean_turns_per_event:.2f}"),
        ("duplicate rate", f"{topic.duplicate_rate:.1%}", f"{previous.duplicate_rate:.1%}"),
        *((f"relations: {kind}", topic.relations_by_type.get(kind, 0), previous.relations_by_type.get(kind, 0))
          for kind in dict.fromkeys([*topic.relations_by_type, *previous.relations_by_type])),
        ("average degree", f"{topic.average_degree:.2f}", f"{previous.average_degree:.2f}"),
        ("average degree without adjacency edges", f"{topic.average_degree_without_adjacency:.2f}",
         f"{previous.average_degree_without_adjacency:.2f}"),
        # Built one after the other in this process, embedding included, without stores.
        ("turns/s", f"{topic.turns_per_second:.0f}", f"{previous.turns_per_second:.0f}"),
    ]
    width = max(len(name) for name, _, _ in rows)
    print(f"\nthe same turns, two boundary detectors:\n  {'':<{width}}  {'topic':>8}  {'previous':>8}")
    for name, now, before in rows:
        print(f"  {name:<{width}}  {now!s:>8}  {before!s:>8}")


if __name__ == "__main__":
    main()
