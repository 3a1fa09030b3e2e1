"""Scale: does memory slow down, or grow without bound, as it grows?

Everything but the embedder is measured: every turn's vector is the real vector of the development turn it was
copied from, computed once up front with the real embedder (whose own throughput is reported separately, from
that up-front run); the pipeline's embedder is then a lookup by the exact text the pipeline embeds
(``Turn.search_text()``). Queries embed their questions with the real embedder, as the API does.

1. Long conversation: one conversation of ``--turns`` turns, the development turns repeated with renamed
   speakers, ids and sessions and shifted 1,000 days per copy (copies never merge). (a) processors only (sinks
   that drop records), one turn per batch; (b) the whole ``MemoryPipeline`` into both embedded stores,
   ``--store-batch`` turns per batch. Median ms/turn per ``--block``-turn block, last block against the first;
   and the Faust changelog record the worker would write for this conversation (``encode_record`` of its
   ``to_state()``) at ``--block`` turns and at the end.
2. Many conversations through the dev broker and the real worker: ``--conversations`` conversations of 30
   turns (30-turn slices of the development conversations, renamed) over ``--subjects`` subjects, one subject
   owning ``--subject-conversations`` of them; produced ``--active`` conversations at a time, turn by turn
   round robin, consumed by the StreamingWorker on a thread of this process (``InProcessWorker``), written to
   the same stores as section 1. Turns/s from the first produce to the last turn applied; this process's RSS.
3. Queries on those stores (one tenant: the long conversation, the many conversations, and one development
   conversation added as it is with ``Memory.add``): p50/p99 in-process (the API's ``Memory.query``) and over HTTP
   (uvicorn on loopback, ``create_app(build_services(...))``, asked by a client in a process of its own as an agent
   would be, ``benchmarks/http_client_process.py``; following the change feeds of a dev broker as
   ``compassmem api`` does; the two paths share one hot tier and take turns at asking each question first) for one
   ~600-turn conversation, the long conversation, the big subject and the whole tenant, with the development file's
   QA questions (for synthetic copies the questions are a load generator), after building the vector store's HNSW
   index as ``compassmem build-index`` does (``--no-build-index``: exact dense search, as a store that was never
   indexed). Then one question to each of ``--hot-conversations`` distinct conversations through a ``Memory`` whose
   hot tier holds at most ``--hot-turns`` turns: RSS before and after, and the turns the hot tier held.

The final table lists each goal, the measured value and whether it is met.

    python -m benchmarks.scale --data PATH [--quick] [--turns 20000] [--conversations 5000] [--subjects 1000]
                               [--queries 200] [--out results/scale.json]

``--quick`` shrinks everything (2,000 turns, 200 conversations, 40 subjects, 30 queries) to run in minutes.
``--keep DIR`` leaves the stores in DIR; ``--reuse DIR`` then runs section 3 alone on them (a few minutes instead of
about twenty: a change to the query path measured on the same memory), with the sizes of the run that built them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    DEFAULT_DATA,
    RESULTS_DIR,
    alternating,
    cached_vectors,
    latency_stats,
    print_table,
    require_data,
    stopwatch,
    timed,
    write_results,
)
from benchmarks.http_client_process import ClientProcess
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.contracts.search import SearchScope
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.evaluation.locomo_questions import load_locomo_questions
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.conversation_memory import ConversationMemory
from compassmem.system.process_gc import freeze_long_lived_objects
from compassmem.query_api.app import create_app
from compassmem.query_api.change_listener import ChangeFeedListener
from compassmem.query_api.server import (
    BackgroundServer,
    build_services,
    use_serving_threads,
    warm_store_in_background,
)
from compassmem.publish.producer import TurnProducer
from compassmem.retrieval.hot_tier import HotTier
from compassmem.sinks.batching import GraphSink, Sink, VectorSink
from compassmem.sinks.factory import Stores, open_stores
from compassmem.streams.broker import DevBroker
from compassmem.streams.runner import InProcessWorker
from compassmem.streams.state import ConversationRecord, RecordHeader, encode_record
from compassmem.streams.topics import ensure_topics, topic_specs

TENANT = "scale"
LONG_CONVERSATION = "scale-long"
SLICE_TURNS = 30
WARMUP_QUERIES = 5
GOAL_BLOCK_RATIO = 1.5
GOAL_RECORD_RATIO = 1.5
GOAL_P50_MS = 25.0
GOAL_P99_MS = 100.0
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- memory of this process ---------------------------------------------------------------------------------------

def rss_mb(pid: int | str = "self") -> float:
    """Resident set size now, MiB (/proc/PID/statm: resident pages)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE / 2**20
    except OSError:
        return float("nan")


def peak_rss_mb() -> float:
    """Highest RSS of this process so far (getrusage: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def falkordb_rss_mb(stores: Stores) -> float:
    server = stores.embedded_falkordb
    return rss_mb(server.pid) if server is not None else float("nan")


def dir_mb(path: Path) -> float:
    """Disk space a directory's files take (allocated blocks: qdrant-edge preallocates sparse files)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20 if path.exists() else 0.0


# -- the embedder -------------------------------------------------------------------------------------------------

class CachedEmbedder:
    """Implements ``compassmem.embedding.embedders.Embedder`` by lookup: a copied turn's search text maps to the real
    vector of the development turn it was copied from (each distinct base text embedded once, up front)."""

    def __init__(self, base_vectors: np.ndarray, dim: int) -> None:
        self._vectors = np.asarray(base_vectors, dtype=np.float32)
        self._dim = dim
        self._row: dict[str, int] = {}

    @property
    def dim(self) -> int:
        return self._dim

    def register(self, turn: Turn, base_row: int) -> None:
        """``turn`` (a copy) is embedded as base turn ``base_row``: keyed by what the pipeline passes to embed."""
        self._row[turn.search_text()] = base_row

    def __len__(self) -> int:
        return len(self._row)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        try:
            return self._vectors[[self._row[t] for t in texts]]
        except KeyError as error:
            raise KeyError(f"no cached vector for a text the pipeline embedded: {error.args[0]!r:.120}") from error


def real_embedder_rate(model: Embedder, texts: list[str], sample: int,
                       batch_size: int) -> dict[str, Any]:
    """Turns/s of the real embedder alone on a sample of development turns (after a warm-up batch)."""
    picked = texts[:: max(1, len(texts) // sample)][:sample]
    model.embed(texts[-32:])
    started = time.perf_counter()
    model.embed(picked)
    seconds = time.perf_counter() - started
    return {"turns": len(picked), "seconds": seconds, "turns_per_second": len(picked) / seconds,
            "batch_size": batch_size}


def base_vectors_for(model: Embedder, model_name: str, texts: list[str],
                     cache_dir: Path | None) -> np.ndarray:
    """The real vectors of the base turns, from ``cache_dir`` when an earlier run left them there for exactly
    these texts and this model."""
    return cached_vectors(model.embed, model.dim, texts, model_name, cache_dir, "scale-vectors")


class DropSink(Sink):
    def add(self, record: object) -> None:
        pass

    def flush(self) -> None:
        pass


# -- the data -----------------------------------------------------------------------------------------------------

def long_conversation(base: list[Turn], turns: int, embedder: CachedEmbedder) -> list[Turn]:
    """``turns`` turns of one conversation: the base turns over and over, each copy with its own ids, sessions and
    speakers and 1,000 days later than the one before, so it is new material, never merged into an earlier copy."""
    out: list[Turn] = []
    for copy in range(math.ceil(turns / len(base))):
        for row, turn in enumerate(base):
            if len(out) == turns:
                return out
            clone = turn.model_copy(update={
                "tenant": TENANT, "conversation_id": LONG_CONVERSATION,
                "turn_id": f"r{copy}-{turn.conversation_id}-{turn.turn_id}",
                "speaker": f"{turn.speaker} {copy}" if copy else turn.speaker,
                "session_id": f"r{copy}-{turn.conversation_id}-{turn.session_id}",
                "timestamp": turn.timestamp + timedelta(days=1000 * copy),
            })
            embedder.register(clone, row)
            out.append(clone)
    return out


def slices(base: list[Turn]) -> list[list[int]]:
    """Rows of the base turns in consecutive 30-turn slices of each development conversation."""
    by_conversation: dict[str, list[int]] = {}
    for row, turn in enumerate(base):
        by_conversation.setdefault(turn.conversation_id, []).append(row)
    return [rows[start : start + SLICE_TURNS] for rows in by_conversation.values()
            for start in range(0, len(rows) - SLICE_TURNS + 1, SLICE_TURNS)]


def subject_of(index: int, conversations: int, subjects: int, big: int) -> str:
    """Subject 0 owns the first ``big`` conversations; the rest are dealt round robin to the other subjects."""
    if index < big or subjects == 1:
        return "subject-0000"
    return f"subject-{1 + (index - big) % (subjects - 1):04d}"


def many_conversations(base: list[Turn], conversations: int, subjects: int, big: int,
                       embedder: CachedEmbedder) -> dict[str, list[Turn]]:
    parts = slices(base)
    out: dict[str, list[Turn]] = {}
    for index in range(conversations):
        conversation_id = f"scale-c{index:05d}"
        subject = subject_of(index, conversations, subjects, big)
        turns = []
        for row in parts[index % len(parts)]:
            turn = base[row]
            clone = turn.model_copy(update={
                "tenant": TENANT, "conversation_id": conversation_id, "subject_id": subject,
                "speaker": f"{turn.speaker} {index}",
                "session_id": f"c{index}-{turn.session_id}",
            })
            embedder.register(clone, row)
            turns.append(clone)
        out[conversation_id] = turns
    return out


def interleaved(conversations: dict[str, list[Turn]], active: int) -> list[Turn]:
    """The turns in the order they are produced: ``active`` conversations at a time, one turn of each in turn."""
    ordered: list[Turn] = []
    groups = list(conversations.values())
    for start in range(0, len(groups), active):
        group = groups[start : start + active]
        for position in range(max(len(g) for g in group)):
            ordered.extend(g[position] for g in group if position < len(g))
    return ordered


# -- section 1 ----------------------------------------------------------------------------------------------------

def record_size(memory: ConversationMemory) -> tuple[int, float]:
    """Bytes of the worker's changelog value for this memory (as ``streams/processor.py`` builds it), and the ms
    to build and encode it."""
    started = time.perf_counter()
    header = RecordHeader(tenant=TENANT, conversation_id=LONG_CONVERSATION, partition=0, health=memory.health())
    value = encode_record(ConversationRecord(header=header, memory=memory.to_state()))
    return len(value), (time.perf_counter() - started) * 1000


def record_figures(memory: ConversationMemory, turns: int) -> dict[str, Any]:
    size, ms = record_size(memory)
    return {"turns": turns, "events": memory.health().events, "events_held": len(memory.events), "bytes": size,
            "encode_ms": ms}


def timed_ingest(pipeline: MemoryPipeline, turns: list[Turn], block: int,
                 at_turns: int) -> tuple[list[tuple[int, float]], dict[str, Any]]:
    """(turns in batch, seconds) per batch; the encoded record at ``at_turns`` turns (not timed) and at the end."""
    memory = pipeline.memory_for(TENANT, LONG_CONVERSATION)
    batches: list[tuple[int, float]] = []
    records: dict[str, Any] = {}
    done = 0
    mark = time.perf_counter()

    def progress(count: int) -> None:
        nonlocal mark, done
        now = time.perf_counter()
        batches.append((count, now - mark))
        done += count
        if "first" not in records and done >= at_turns:
            records["first"] = record_figures(memory, done)
        mark = time.perf_counter()

    pipeline.ingest(turns, progress=progress, close_at_end=True)
    records["end"] = record_figures(memory, done)
    return batches, records


def per_block(batches: list[tuple[int, float]], block: int) -> list[dict[str, Any]]:
    """Median and mean ms/turn over the batches that end in each block of ``block`` turns."""
    rows: dict[int, list[tuple[int, float]]] = {}
    done = 0
    for count, seconds in batches:
        rows.setdefault(done // block, []).append((count, seconds))
        done += count
    out = []
    for index, items in sorted(rows.items()):
        per_turn = [1000 * s / c for c, s in items]
        turns = sum(c for c, _ in items)
        out.append({"block": f"{index * block}-{index * block + turns}", "turns": turns,
                    "median_ms": statistics.median(per_turn), "mean_ms": 1000 * sum(s for _, s in items) / turns})
    return out


def block_ratio(blocks: list[dict[str, Any]], block: int) -> float:
    full = [b for b in blocks if b["turns"] >= block * 0.9] or blocks
    return full[-1]["median_ms"] / full[0]["median_ms"] if full[0]["median_ms"] else float("nan")


def section_long(turns: list[Turn], embedder: CachedEmbedder, stores: Stores, settings: Settings,
                 args: argparse.Namespace) -> dict:
    # MemoryPipeline by hand, not Memory: 1a measures the processors without stores, 1b runs at --store-batch, and
    # both encode the changelog record from the pipeline's own ConversationMemory between batches.
    # The memory's hot window as the worker and `compassmem ingest` set it (COMPASSMEM_WORKER_HOT_EVENTS).
    hot_events = settings.worker_hot_events
    print(f"\n[1a] {len(turns)} turns in one conversation, processors only (hot window {hot_events} events) ...",
          flush=True)
    processors = MemoryPipeline(embedder, [DropSink()], PipelineConfig(batch_turns=1, hot_events=hot_events))
    batches_a, records_a = timed_ingest(processors, turns, args.block, args.block)
    print(f"[1b] the same turns through the whole pipeline into both embedded stores "
          f"({args.store_batch} turns per batch) ...", flush=True)
    whole = MemoryPipeline(embedder, [VectorSink(stores.vectors), GraphSink(stores.graph)],
                           PipelineConfig(batch_turns=args.store_batch, hot_events=hot_events))
    started = time.perf_counter()
    batches_b, records_b = timed_ingest(whole, turns, args.block, args.block)
    seconds_b = time.perf_counter() - started
    blocks_a, blocks_b = per_block(batches_a, args.block), per_block(batches_b, args.block)
    ratio_a, ratio_b = block_ratio(blocks_a, args.block), block_ratio(blocks_b, args.block)
    record_ratio = records_a["end"]["bytes"] / records_a["first"]["bytes"]
    print(f"\n1. Long conversation: {len(turns)} turns, {records_a['end']['events']} events at the end "
          f"({records_a['end']['events_held']} held by the memory); "
          f"median (mean) ms/turn per {args.block}-turn block")
    print_table(["turns", "processors only", "whole pipeline"],
                [[a["block"], f"{a['median_ms']:.2f} ({a['mean_ms']:.2f})",
                  f"{b['median_ms']:.2f} ({b['mean_ms']:.2f})"] for a, b in zip(blocks_a, blocks_b, strict=True)])
    print_table(["changelog record (encode_record of to_state())", "turns", "events", "held", "bytes", "encode ms"],
                [[name, r["turns"], r["events"], r["events_held"], r["bytes"], r["encode_ms"]]
                 for name, r in ((f"at {args.block} turns", records_a["first"]), ("at the end", records_a["end"]))])
    print(f"last/first block (median): processors {ratio_a:.2f}, whole pipeline {ratio_b:.2f}; "
          f"record bytes end/first {record_ratio:.2f}; whole pipeline {len(turns) / seconds_b:.0f} turns/s")
    return {"turns": len(turns), "block": args.block, "store_batch": args.store_batch, "hot_events": hot_events,
            "processors_only": {"blocks": blocks_a, "last_to_first": ratio_a},
            "whole_pipeline": {"blocks": blocks_b, "last_to_first": ratio_b, "seconds": seconds_b,
                               "turns_per_second": len(turns) / seconds_b},
            "record": records_a, "record_whole_pipeline": records_b, "record_end_to_first": record_ratio}


# -- section 2 ----------------------------------------------------------------------------------------------------

class RssSampler:
    """Samples this process's RSS every ``interval_s`` on a thread (the worker runs in this process)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(rss_mb())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def section_many(conversations: dict[str, list[Turn]], embedder: CachedEmbedder, stores: Stores,
                 settings: Settings, root: Path, args: argparse.Namespace) -> dict:
    ordered = interleaved(conversations, args.active)
    print(f"\n[2] {len(conversations)} conversations, {len(ordered)} turns through the dev broker and the worker "
          f"({args.active} conversations at a time) ...", flush=True)
    with DevBroker(port=0, log_path=root / "tansu.log") as broker:
        settings = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
        ensure_topics(broker.bootstrap, topic_specs(settings))
        before = {"rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(), "falkordb_rss_mb": falkordb_rss_mb(stores)}
        worker = InProcessWorker(settings, broker.bootstrap, stores, embedder).start()
        try:
            deadline = time.monotonic() + 120
            while not (worker.streaming and worker.streaming.assigned_partitions):  # type: ignore[attr-defined]
                if time.monotonic() > deadline or worker.exit_code is not None:
                    raise RuntimeError("the worker did not join its group")
                time.sleep(0.05)
            totals = worker.streaming.totals  # type: ignore[attr-defined]
            with RssSampler() as sampler:
                started = time.perf_counter()
                with TurnProducer(broker.bootstrap, settings.turns_topic) as producer:
                    produced = producer.produce(ordered)
                deadline = time.monotonic() + max(900.0, len(ordered) / 20)
                while totals["applied_turns"] < len(ordered):
                    if worker.exit_code is not None:
                        raise RuntimeError(f"the worker stopped (exit {worker.exit_code}) after "
                                           f"{totals['applied_turns']} of {len(ordered)} turns")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the worker applied {totals['applied_turns']} of {len(ordered)} turns")
                    time.sleep(0.05)
                seconds = time.perf_counter() - started
            after = {"rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(), "falkordb_rss_mb": falkordb_rss_mb(stores)}
            counts = dict(totals)
        finally:
            worker.stop()
    result = {
        "conversations": len(conversations), "turns": len(ordered), "subjects": args.subjects,
        "active": args.active, "seconds": seconds, "turns_per_second": len(ordered) / seconds,
        "produce_seconds": produced.seconds, "worker_totals": counts, "before": before, "after": after,
        "peak_rss_sampled_mb": max(sampler.samples, default=after["rss_mb"]),
        "qdrant_dir_mb": dir_mb(settings.data_dir / "qdrant"),
        "falkordb_dir_mb": dir_mb(settings.data_dir / "falkordb"),
    }
    print(f"\n2. Many conversations: {len(conversations)} x {SLICE_TURNS} turns over {args.subjects} subjects, "
          "through the dev broker and the in-process worker into both stores")
    print_table(["measure", "value"], [
        ["turns/s, first produce to last turn applied", round(result["turns_per_second"], 1)],
        ["seconds (producing alone)", f"{seconds:.1f} ({produced.seconds:.1f})"],
        ["worker batches, dead letters", f"{counts.get('batches')}, {counts.get('dead_letters')}"],
        ["RSS now, MiB: before -> after", f"{before['rss_mb']:.0f} -> {after['rss_mb']:.0f}"],
        ["RSS peak (getrusage, whole run so far), MiB: before -> after",
         f"{before['peak_rss_mb']:.0f} -> {after['peak_rss_mb']:.0f}"],
        ["RSS peak sampled while streaming, MiB", f"{result['peak_rss_sampled_mb']:.0f}"],
        ["FalkorDB server RSS (own process), MiB: before -> after",
         f"{before['falkordb_rss_mb']:.0f} -> {after['falkordb_rss_mb']:.0f}"],
        ["on disk, MiB: qdrant-edge, FalkorDB", f"{result['qdrant_dir_mb']:.0f}, {result['falkordb_dir_mb']:.0f}"],
    ])
    print("RSS is this process: worker (Faust, its tables, the pipeline's live memories), the embedded qdrant-edge "
          "shard, the cached vectors and the benchmark's turn lists; the dev broker and FalkorDB are other processes.")
    return result


# -- section 3 ----------------------------------------------------------------------------------------------------

def cycle(items: Sequence[str], count: int, offset: int = 0) -> list[str]:
    return [items[(offset + i) % len(items)] for i in range(count)]


def section_queries(scopes: dict[str, tuple[dict[str, Any], list[str]]], stores: Stores, settings: Settings,
                    embedder: Embedder, args: argparse.Namespace) -> dict:
    print(f"\n[3] {args.queries} queries per scope, in-process and over HTTP ...", flush=True)
    services = build_services(settings, stores, embedder, MemoryMetrics())
    use_serving_threads(settings)
    # As `compassmem api` does at start; waited for, as an API serving for more than a second or so has.
    warm_store_in_background(settings, stores).join()
    results: dict[str, Any] = {}
    # As `compassmem api` with a broker: it follows the worker's change feeds, so its hot tier keeps what no
    # change has touched (without a feed it reloads entries older than COMPASSMEM_API_VIEW_MAX_AGE_S).
    with (DevBroker(port=0, log_path=settings.data_dir.parent / "tansu-queries.log") as broker,
          _following(broker.bootstrap, settings, services.memory.hot),
          BackgroundServer(create_app(services)) as server, ClientProcess(server.url) as client):
        freeze_long_lived_objects()  # as `compassmem api` does once it is serving
        for name, (scope, questions) in scopes.items():
            stages: dict[str, dict[str, list[float]]] = {"in_process": {}, "http": {}}

            def keep(path: str, timings: dict[str, float]) -> None:
                for stage, ms in timings.items():
                    stages[path].setdefault(stage, []).append(ms)

            def in_process(question: str, scope: dict[str, Any] = scope) -> None:
                keep("in_process", services.memory.query(QueryRequest(tenant=TENANT, question=question,
                                                                       **scope)).timings_ms)

            def over_http(question: str, scope: dict[str, Any] = scope) -> float:
                ms, status, body = client.post("/v1/query", {"tenant": TENANT, "question": question, **scope})
                if status != 200:
                    raise RuntimeError(f"POST /v1/query ({name}) answered {status}: {str(body)[:300]}")
                keep("http", body["timings_ms"])
                return ms

            warm = cycle(questions, WARMUP_QUERIES, args.queries)
            timed(over_http, warm)
            timed(in_process, warm)
            for path in stages.values():
                path.clear()
            asked = cycle(questions, args.queries)
            latencies = alternating({"in_process": stopwatch(in_process), "http": over_http}, asked)
            results[name] = {"scope": scope, "turns": stores.vectors.count_turns(QueryRequest(
                                 tenant=TENANT, question="x", **scope).scope),
                             "in_process": latency_stats(latencies["in_process"]),
                             "http": latency_stats(latencies["http"]),
                             "engine_stages_p50_ms": {path: {stage: float(np.percentile(v, 50))
                                                             for stage, v in kept.items()}
                                                      for path, kept in stages.items()}}
            print(f"    {name}: p50 {results[name]['http']['p50']:.1f} ms over HTTP", flush=True)
    print("\n3. Query latency, ms (goal: p50 <= 25, p99 <= 100)")
    print_table(["scope", "turns in scope", "in-process p50", "p99", "HTTP p50", "p99", "HTTP max"],
                [[name, r["turns"], r["in_process"]["p50"], r["in_process"]["p99"], r["http"]["p50"],
                  r["http"]["p99"], r["http"]["max"]] for name, r in results.items()])
    print("engine stages, in-process p50 ms (timings_ms of the responses):")
    for name, r in results.items():
        stage_p50 = r["engine_stages_p50_ms"]["in_process"]
        print(f"    {name}: " + ", ".join(f"{stage} {ms:.1f}" for stage, ms in stage_p50.items()))
    return results


@contextlib.contextmanager
def _following(bootstrap: str, settings: Settings, hot: HotTier) -> Iterator[ChangeFeedListener]:
    ensure_topics(bootstrap, topic_specs(settings))
    listener = ChangeFeedListener(bootstrap, settings, hot).start()
    try:
        deadline = time.monotonic() + 60
        while not hot.following_feed:
            if time.monotonic() > deadline:
                raise RuntimeError("the API's change-feed listener did not start following")
            time.sleep(0.05)
        yield listener
    finally:
        listener.stop()


def section_hot_tier(conversation_ids: list[str], questions: list[str], stores: Stores, settings: Settings,
                     embedder: Embedder, args: argparse.Namespace) -> dict:
    targets = conversation_ids[: args.hot_conversations]
    print(f"\n[3b] one question to each of {len(targets)} conversations, hot tier of at most {args.hot_turns} "
          "turns ...", flush=True)
    # As the API's build_services makes it, with COMPASSMEM_API_HOT_TURNS set to --hot-turns.
    memory = Memory(settings.model_copy(update={"api_hot_turns": args.hot_turns}), stores=stores, embedder=embedder)
    hot = memory.hot
    memory.query(QueryRequest(tenant=TENANT, conversation_id=LONG_CONVERSATION, question=questions[0]))  # warm
    hot.invalidate(TENANT)
    before = rss_mb()
    most_turns = 0
    checkpoints = []
    every = max(1, len(targets) // 10)
    started = time.perf_counter()
    for index, conversation_id in enumerate(targets, start=1):
        memory.query(QueryRequest(tenant=TENANT, conversation_id=conversation_id,
                                  question=questions[index % len(questions)]))
        most_turns = max(most_turns, hot.turns)
        if index % every == 0 or index == len(targets):
            checkpoints.append({"queries": index, "rss_mb": rss_mb(), "hot_turns": hot.turns, "hot_events": len(hot)})
    seconds = time.perf_counter() - started
    result = {"conversations": len(targets), "max_turns": args.hot_turns, "rss_before_mb": before,
              "rss_after_mb": rss_mb(), "peak_rss_mb": peak_rss_mb(), "most_hot_turns": most_turns,
              "hot_turns_end": hot.turns, "hot_events_end": len(hot), "checkpoints": checkpoints,
              "ms_per_query": 1000 * seconds / max(1, len(targets))}
    print(f"\n3b. API memory with the hot tier bounded to {args.hot_turns} turns, {len(targets)} distinct "
          "conversations queried (RSS = this process: the engine and its hot tier, the embedded qdrant-edge shard "
          "it reads, the embedding model, and everything earlier sections left; FalkorDB is its own process)")
    print_table(["queries", "RSS MiB", "hot tier turns", "hot tier events"],
                [["before", f"{before:.0f}", 0, 0]]
                + [[c["queries"], f"{c['rss_mb']:.0f}", c["hot_turns"], c["hot_events"]] for c in checkpoints])
    print(f"most turns the hot tier held after a query: {most_turns} (max_turns {args.hot_turns}); "
          f"{result['ms_per_query']:.1f} ms/query")
    return result


# -- main ---------------------------------------------------------------------------------------------------------

QUICK = {"turns": 2000, "conversations": 200, "subjects": 40, "queries": 30, "hot_conversations": 200,
         "hot_turns": 1000}
FULL = {"turns": 20_000, "conversations": 5000, "subjects": 1000, "queries": 200, "hot_conversations": 5000,
        "hot_turns": 10_000}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true", help="small sizes (about two minutes); explicit sizes win")
    parser.add_argument("--turns", type=int, help="turns of the long conversation (20,000; quick 2,000)")
    parser.add_argument("--block", type=int, default=1000, help="turns per reported block")
    parser.add_argument("--store-batch", type=int, default=25, help="turns per batch in section 1b")
    parser.add_argument("--conversations", type=int, help="30-turn conversations streamed (5,000; quick 200)")
    parser.add_argument("--subjects", type=int, help="subjects they are about (1,000; quick 40)")
    parser.add_argument("--subject-conversations", type=int, default=50, help="conversations of the big subject")
    parser.add_argument("--active", type=int, default=50, help="conversations produced at a time, interleaved")
    parser.add_argument("--queries", type=int, help="queries per scope and path (200; quick 30)")
    parser.add_argument("--hot-conversations", type=int, help="distinct conversations queried once (5,000; quick 200)")
    parser.add_argument("--hot-turns", type=int, help="the hot tier's max_turns for that (10,000; quick 1,000)")
    parser.add_argument("--embed-sample", type=int, default=256,
                        help="development turns the real embedder's own turns/s is measured on")
    parser.add_argument("--vector-cache", type=Path, default=RESULTS_DIR / "cache",
                        help="where the base turns' real vectors are kept between runs")
    parser.add_argument("--no-vector-cache", dest="vector_cache", action="store_const", const=None,
                        help="embed the base turns again every run")
    parser.add_argument("--no-build-index", dest="build_index", action="store_false",
                        help="query without building the embedded store's HNSW index first (exact dense search)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="build the stores in DIR (new or empty) and keep them, to probe queries afterwards")
    parser.add_argument("--reuse", type=Path, metavar="DIR",
                        help="only section 3, on the stores an earlier run left with --keep DIR (same sizes)")
    parser.add_argument("--out", type=Path,
                        help="the JSON written (results/scale.json; with --reuse results/scale_queries.json)")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.conversations < 1 or args.subjects < 1 or args.turns < 1:
        parser.error("--turns, --conversations and --subjects must be at least 1")
    if args.reuse is not None and args.keep is not None:
        parser.error("--reuse reads the stores of an earlier --keep run; it cannot build new ones")
    if args.reuse is not None and not (args.reuse / "stores").is_dir():
        parser.error(f"--reuse {args.reuse}: no stores there (a folder an earlier run filled with --keep)")
    if args.out is None:
        # A section-3-only run must not overwrite the whole run's figures.
        args.out = RESULTS_DIR / ("scale.json" if args.reuse is None else "scale_queries.json")
    args.subjects = min(args.subjects, args.conversations)
    # The big subject gets its conversations; every other subject keeps at least one.
    args.subject_conversations = max(1, min(args.subject_conversations, args.conversations - (args.subjects - 1)))
    return args


@contextlib.contextmanager
def _stores_root(keep: Path | None) -> Iterator[Path]:
    """A temporary folder for the run's stores, or ``keep`` (new or empty), left in place afterwards."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="compassmem-scale-") as tmp:
            yield Path(tmp)
        return
    if keep.exists() and any(keep.iterdir()):
        raise SystemExit(f"--keep {keep}: the folder is not empty")
    keep.mkdir(parents=True, exist_ok=True)
    yield keep


def goal_rows(results: dict[str, Any]) -> list[list[Any]]:
    """The goals of the sections that ran (``--reuse`` runs section 3 only)."""
    queries, hot = results["queries"], results["hot_tier"]

    def row(goal: str, value: float, met: bool, fmt: str = "{:.2f}") -> list[Any]:
        return [goal, fmt.format(value), "met" if met else "NOT met"]

    rows = []
    if "long_conversation" in results:
        long = results["long_conversation"]
        rows += [
            row(f"processors only: last/first block ms/turn <= {GOAL_BLOCK_RATIO}",
                long["processors_only"]["last_to_first"],
                long["processors_only"]["last_to_first"] <= GOAL_BLOCK_RATIO),
            row(f"whole pipeline: last/first block ms/turn <= {GOAL_BLOCK_RATIO}",
                long["whole_pipeline"]["last_to_first"], long["whole_pipeline"]["last_to_first"] <= GOAL_BLOCK_RATIO),
            row(f"changelog record bytes: end/at {long['block']} turns <= {GOAL_RECORD_RATIO}",
                long["record_end_to_first"], long["record_end_to_first"] <= GOAL_RECORD_RATIO),
        ]
    for name, result in queries.items():
        for path in ("in_process", "http"):
            stats = result[path]
            label = "HTTP" if path == "http" else "in-process"
            rows.append(row(f"{name}, {label}: p50 <= {GOAL_P50_MS:g} ms", stats["p50"], stats["p50"] <= GOAL_P50_MS,
                            "{:.1f}"))
            rows.append(row(f"{name}, {label}: p99 <= {GOAL_P99_MS:g} ms", stats["p99"], stats["p99"] <= GOAL_P99_MS,
                            "{:.1f}"))
    rows.append(row(f"hot tier turns <= max_turns ({hot['max_turns']}) over {hot['conversations']} conversations",
                    hot["most_hot_turns"], hot["most_hot_turns"] <= hot["max_turns"], "{:.0f}"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = require_data(args.data)
    configure_logging(args.log_level.upper())
    base = list(read_turns(data))
    questions_all = load_locomo_questions(data)[0]
    all_questions = [q.question for q in questions_all]
    dev_counts: dict[str, int] = {}
    for turn in base:
        dev_counts[turn.conversation_id] = dev_counts.get(turn.conversation_id, 0) + 1
    dev_conversation = min(dev_counts, key=lambda c: (abs(dev_counts[c] - 600), c))
    dev_questions = [q.question for q in questions_all if q.conversation_id == dev_conversation] or all_questions

    defaults = Settings(_env_file=None)
    model = make_embedder(defaults)
    texts = [t.search_text() for t in base]
    embedder_rate = real_embedder_rate(model, texts, args.embed_sample, defaults.embedding_batch_size)
    print(f"real embedder on its own: {embedder_rate['turns_per_second']:.0f} turns/s ({embedder_rate['turns']} "
          f"turns in {embedder_rate['seconds']:.1f} s, batch {defaults.embedding_batch_size}); "
          "not part of the figures below", flush=True)
    base_vectors = base_vectors_for(model, f"{defaults.embedder}:{defaults.embedding_model}", texts, args.vector_cache)
    cached = CachedEmbedder(base_vectors, model.dim)
    for row, turn in enumerate(base):
        if turn.conversation_id == dev_conversation:
            cached.register(turn.model_copy(update={"tenant": TENANT}), row)
    long_turns = long_conversation(base, args.turns, cached)
    many = many_conversations(base, args.conversations, args.subjects, args.subject_conversations, cached)
    dev_turns = [t.model_copy(update={"tenant": TENANT}) for t in base if t.conversation_id == dev_conversation]

    results: dict[str, Any] = {
        "data": str(data), "quick": args.quick, "cpus": os.cpu_count(), "tenant": TENANT,
        "sizes": {k: getattr(args, k) for k in ("turns", "block", "store_batch", "conversations", "subjects",
                                                 "subject_conversations", "active", "queries", "hot_conversations",
                                                 "hot_turns", "embed_sample")},
        "search_index_built": args.build_index,
        "real_embedder": embedder_rate,
    }
    with _stores_root(args.keep) if args.reuse is None else contextlib.nullcontext(args.reuse) as root:
        settings = Settings(_env_file=None, data_dir=root / "stores")
        with open_stores(settings, dim=model.dim) as stores:
            if args.reuse is None:
                results["long_conversation"] = section_long(long_turns, cached, stores, settings, args)
                results["many_conversations"] = section_many(many, cached, stores, settings, root, args)
                print(f"\n[3] ingesting development conversation {dev_conversation} ({len(dev_turns)} turns) as it "
                      "is ...", flush=True)
                Memory(settings, stores=stores, embedder=cached).add(dev_turns)
                if args.build_index:
                    # What `compassmem build-index` does between runs: without it every dense search is exact.
                    print("[3] building the vector store's search index (compassmem build-index) ...", flush=True)
                    started = time.perf_counter()
                    stores.vectors.build_search_index()
                    results["search_index_seconds"] = time.perf_counter() - started
                    print(f"    built in {results['search_index_seconds']:.1f} s", flush=True)
            else:
                print(f"\n[3] reusing the stores of {args.reuse} (sections 1 and 2 not run) ...", flush=True)
                results["reused_stores"] = str(args.reuse)
            # An API process does not hold the ingested turns: drop ours, so the collector's full passes over them
            # do not land in query latencies.
            long_count, conversation_ids = args.turns, list(many)
            dev_count = stores.vectors.count_turns(SearchScope.conversation(TENANT, dev_conversation))
            del long_turns, many, dev_turns
            gc.collect()
            scopes = {
                f"conversation {dev_conversation} ({dev_count} turns)":
                    ({"conversation_id": dev_conversation}, dev_questions),
                f"long conversation ({long_count} turns)": ({"conversation_id": LONG_CONVERSATION}, all_questions),
                f"subject-0000 ({args.subject_conversations} conversations)":
                    ({"subject_id": "subject-0000"}, all_questions),
                "whole tenant": ({"all_conversations": True}, all_questions),
            }
            # The embedder `compassmem api` makes (COMPASSMEM_API_TORCH_THREADS), not the batch one measured above.
            api_model = make_embedder(settings, threads=settings.api_torch_threads)
            results["queries"] = section_queries(scopes, stores, settings, api_model, args)
            results["hot_tier"] = section_hot_tier(conversation_ids, all_questions, stores, settings, api_model, args)

    print("\nGoals")
    rows = goal_rows(results)
    print_table(["goal", "measured", ""], rows)
    results["goals"] = [{"goal": g, "measured": m, "met": s == "met"} for g, m, s in rows]
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
