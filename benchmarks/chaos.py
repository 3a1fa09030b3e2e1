"""Chaos: the development conversations streamed through a broker while the worker is restarted at random moments.

What goes in: every turn of the 5 development conversations, interleaved (each conversation in its order) and
produced at ``--rate`` turns/s, plus malformed and poison records mixed in (bad JSON, not UTF-8, a NUL character,
a lone surrogate, JSON nested 100,000 deep, a turn on the wrong key, an unknown field) and valid pathological
turns (16 KiB without a sentence end, repeated cue words), which must be stored like any other turn.
What happens meanwhile: the worker (``compassmem worker`` processes, one at a time, on the same data directory and
FalkorDB) is stopped ``--restarts`` times at random moments, SIGTERM and kill -9 mixed, and started again at once.
What comes out, counted: every valid turn must be in the stores and every malformed record on the dead-letter
topic; no worker may exit on its own (a crash loop); and the memory must equal an uninterrupted run (the
in-process pipeline over the same valid turns, which the streaming tests show an uninterrupted worker matches).

    .venv/bin/python -m benchmarks.chaos [--data PATH] [--broker tansu|noida] [--restarts 20] [--rate 40]

Goal: 0 turns lost, 0 crash loops, identical memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, write_results
from compassmem.system.child_process import die_with_parent
from compassmem.core.config import Settings
from compassmem.embedding.embedders import make_embedder
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.core.models import Turn
from compassmem.write.pipeline import MemoryPipeline
from compassmem.publish.producer import encode_turn
from compassmem.sinks.batching import GraphSink, VectorSink
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.streams.broker import DevBroker
from compassmem.streams.topics import ensure_topics, topic_specs

CHAOS_ENV = {
    "COMPASSMEM_KAFKA_SESSION_TIMEOUT_S": "6",
    "COMPASSMEM_KAFKA_HEARTBEAT_INTERVAL_S": "1",
    "COMPASSMEM_KAFKA_REBALANCE_TIMEOUT_S": "6",
    "COMPASSMEM_KAFKA_COMMIT_INTERVAL_S": "0.5",
    "COMPASSMEM_KAFKA_PARTITIONS": "4",
    "COMPASSMEM_STREAM_BATCH_SIZE": "32",
    "COMPASSMEM_METRICS_PORT": "0",
    "COMPASSMEM_LOG_LEVEL": "INFO",
}
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


def pathological_turns() -> list[Turn]:
    """Valid turns that used to cost seconds to minutes each: they must be stored like any other."""
    texts = [
        "because " * 2000,
        "word " * 3270,
        "if it rains then " * 960,
        "日本語の文章はスペースなしで続きます" * 300,
        "so that " * 2000,
        "1999 2000 " * 1600,
    ]
    return [Turn(conversation_id="chaos-pathological", turn_id=f"P{index}", speaker=("Ann", "Bob")[index % 2],
                 text=text[:16000], timestamp=T0 + timedelta(minutes=index), session_id="1")
            for index, text in enumerate(texts)]


def poison_records() -> list[tuple[bytes, bytes]]:
    """(key, value) of records the worker must dead-letter, never apply, never crash on."""
    good = {"conversation_id": "chaos-poison", "turn_id": "X1", "speaker": "Ann", "text": "fine",
            "timestamp": "2024-03-04T09:00:00+00:00"}

    def turn(**changes: Any) -> bytes:  # noqa: ANN401
        return json.dumps({**good, **changes}).encode()

    return [
        (b"default/chaos-poison", b'{"conversation_id": "chaos-poison", "text": '),
        (b"default/chaos-poison", b"\xff\xfe\x00 not utf-8"),
        (b"default/chaos-poison", turn(text="hello\u0000world")),
        (b"default/chaos-poison", turn(speaker="Ann\u0000")),
        (b"default/chaos-poison", b'{"conversation_id": "chaos-poison", "text": "\\ud800"}'),
        (b"default/chaos-poison", b"[" * 100_000 + b"]" * 100_000),
        (b"default/other-key", turn()),
        (b"default/chaos-poison", turn(mood="happy")),
        (b"default/chaos-poison", turn(timestamp=1709542800000)),
    ]


class Worker:
    def __init__(self, label: str, env: dict[str, str], log_path: Path) -> None:
        self.label = label
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "compassmem.cli", "worker"], env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)  # noqa: PLW1509
        self.signalled = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, kill: bool, timeout_s: float = 60.0) -> float:
        """Seconds the worker took to exit."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.signalled = True
            os.kill(self.process.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return time.monotonic() - started

    @property
    def crashed(self) -> bool:
        """Exited without being told to: a crash (exit 70 on a store failure would loop under a supervisor)."""
        return self.process.poll() is not None and not self.signalled


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """True end offsets, by reading (some brokers report the last batch's base offset + 1)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=1000)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        consumer.seek_to_beginning()
        ends = dict.fromkeys(partitions, 0)
        for record in consumer:
            ends[record.partition] = max(ends[record.partition], record.offset + 1)
        return ends
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) or 0 for p in range(partitions)}
    finally:
        consumer.close()


def dead_letters(bootstrap: str, topic: str) -> set[tuple[str, int, int]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=1500)
    try:
        consumer.subscribe([topic])
        # A record dead-lettered, then redelivered after a kill before its offset was committed, is dead-lettered
        # again: count source records, not dead-letter records.
        return {(v["topic"], v["partition"], v["offset"]) for v in (json.loads(r.value) for r in consumer)}
    finally:
        consumer.close()


def snapshot(stores: Stores, tenant: str, conversation_id: str) -> dict[str, Any]:
    events = stores.vectors.conversation_events(tenant, conversation_id)
    graph = stores.graph.conversation_graph(tenant, conversation_id)
    return {
        "events": {e.event_id: (tuple(e.turn_ids), e.provisional, e.version, e.cluster_id) for e in events},
        "graph_events": sorted(n for n, d in graph.nodes(data=True) if d.get("kind") == "event" and not d.get("stub")),
        "relations": {r.relation_id: (r.source, r.target, r.type.value, r.subtype, r.superseded_by)
                      for r in stores.graph.relations(tenant, conversation_id)},
        "turns": {t.turn_id: t.event_id for t in stores.vectors.conversation_turns(tenant, conversation_id)},
    }


@contextmanager
def broker_for(kind: str, root: Path) -> Iterator[str]:
    if kind == "tansu":
        with DevBroker(port=0, log_path=root / "tansu.log") as broker:
            yield broker.bootstrap
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from noida_broker import NoidaBroker

        with NoidaBroker(root / "noida-data", root / "noida.log") as noida:
            yield noida.bootstrap


def main() -> None:  # noqa: PLR0915 - one scenario, told top to bottom
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--broker", choices=["tansu", "noida"], default="tansu")
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--rate", type=float, default=40.0, help="turns/s produced")
    parser.add_argument("--kill-share", type=float, default=None,
                        help="share of restarts by kill -9 (default 0.5; 0 on noida-db, which never expires the "
                             "session of a member that died without leaving, so no new member could join)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "chaos.json")
    args = parser.parse_args()
    kill_share = args.kill_share if args.kill_share is not None else (0.5 if args.broker == "tansu" else 0.0)
    configure_logging("WARNING")
    rng = random.Random(args.seed)
    conversations: dict[str, list[Turn]] = {}
    for turn in read_turns(require_data(args.data)):
        conversations.setdefault(turn.conversation_id, []).append(turn)
    conversations["chaos-pathological"] = pathological_turns()
    queues = [list(turns) for turns in conversations.values()]
    valid: list[Turn] = []
    while any(queues):
        valid.append(rng.choice([q for q in queues if q]).pop(0))
    poison = poison_records()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compassmem-chaos-") as tmp:
        root = Path(tmp)
        with broker_for(args.broker, root) as bootstrap, EmbeddedFalkorDB(root / "falkordb") as falkordb:
            settings = Settings(_env_file=None, data_dir=root / "worker", kafka_bootstrap=bootstrap,
                                falkordb_url=falkordb.url, kafka_app_id="chaos", kafka_partitions=4)
            ensure_topics(bootstrap, topic_specs(settings))
            env = {k: v for k, v in os.environ.items() if not k.startswith("COMPASSMEM_")}
            env.update(CHAOS_ENV)
            env.update({"COMPASSMEM_KAFKA_BOOTSTRAP": bootstrap, "COMPASSMEM_DATA_DIR": str(settings.data_dir),
                        "COMPASSMEM_FALKORDB_URL": falkordb.url, "COMPASSMEM_KAFKA_APP_ID": "chaos",
                        # No idle close while restarts make conversations look idle: closes would then depend on
                        # timing. The last worker closes every open segment at the end of the log.
                        "COMPASSMEM_IDLE_CLOSE_S": "3600"})
            workers: list[Worker] = []
            stops: list[dict[str, Any]] = []

            def start(label: str, **extra: str) -> Worker:
                worker = Worker(label, {**env, **extra}, root / f"{label}.log")
                workers.append(worker)
                return worker

            producing_done = threading.Event()

            def produce() -> None:
                producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                         max_in_flight_requests_per_connection=1)
                poison_at = dict(zip(rng.sample(range(len(valid)), len(poison)), poison, strict=True))
                interval = 1.0 / args.rate
                next_at = time.monotonic()
                for index, turn in enumerate(valid):
                    key, value = encode_turn(turn)
                    producer.send(settings.turns_topic, key=key, value=value)
                    if index in poison_at:
                        bad_key, bad_value = poison_at[index]
                        producer.send(settings.turns_topic, key=bad_key, value=bad_value)
                    next_at += interval
                    time.sleep(max(0.0, next_at - time.monotonic()))
                producer.flush()
                producer.close()
                producing_done.set()

            worker = start("worker-0")
            producer_thread = threading.Thread(target=produce, name="chaos-producer", daemon=True)
            producer_thread.start()
            restarts = 0
            while restarts < args.restarts:
                # A random moment of the worker's work: after it has its partitions (start-up takes seconds).
                deadline = time.monotonic() + 120
                while "stream.partitions_assigned" not in worker.log() and not worker.crashed \
                        and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(rng.uniform(0.2, 5.0))
                if worker.crashed:
                    break
                kill = rng.random() < kill_share
                seconds = worker.stop(kill=kill)
                stops.append({"worker": worker.label, "signal": "SIGKILL" if kill else "SIGTERM",
                              "exit_s": round(seconds, 2), "exit_code": worker.process.returncode})
                restarts += 1
                worker = start(f"worker-{restarts}")
            producer_thread.join()
            # The last worker: the end of the log reached, every open segment closes (as the reference does).
            seconds = worker.stop(kill=False)
            stops.append({"worker": worker.label, "signal": "SIGTERM", "exit_s": round(seconds, 2),
                          "exit_code": worker.process.returncode})
            final = start("worker-final", COMPASSMEM_IDLE_CLOSE_S="3")
            deadline = time.monotonic() + 900
            while True:
                time.sleep(2.0)
                if final.crashed:
                    break
                ends = end_offsets(bootstrap, settings.turns_topic)
                done = committed(bootstrap, "chaos", settings.turns_topic, 4) == ends
                requested = final.log().count("idle_close_requested")
                if done and requested:
                    # Idle closes are markers in the log: let them be applied and committed, and end only once a
                    # whole idle period (3 s) passed with no close requested (a stale marker is followed by another).
                    time.sleep(6.0)
                    if committed(bootstrap, "chaos", settings.turns_topic, 4) == end_offsets(
                            bootstrap, settings.turns_topic) and final.log().count("idle_close_requested") == requested:
                        break
                if time.monotonic() > deadline:
                    print("the final worker did not reach the end of the log in 900 s", file=sys.stderr)
                    break
            final.stop(kill=False)
            wall_s = time.monotonic() - started
            letters = dead_letters(bootstrap, settings.dlq_topic)
            crashes = [w.label for w in workers if w.crashed]
            # Repairs, by kind: a hole in the offsets a batch saw, a partition that stopped moving behind the end of
            # the log, and the seeks back that repaired them (several of either can share one seek).
            repairs = {kind: sum(len(re.findall(rf"stream\.{kind}\b", w.log())) for w in workers)
                       for kind in ("offset_gap", "partition_stalled", "seek_back")}
            with open_stores(settings) as stores:
                streamed = {cid: snapshot(stores, "default", cid) for cid in conversations}
            embedder = make_embedder(settings)
            # Same tenant (ids derive from it), other stores: an uninterrupted run over the same valid turns.
            with EmbeddedFalkorDB(root / "falkordb-reference") as reference_graph, open_stores(Settings(
                    _env_file=None, data_dir=root / "reference", falkordb_url=reference_graph.url)) as stores:
                MemoryPipeline(embedder, [VectorSink(stores.vectors), GraphSink(stores.graph)]).ingest(valid)
                reference = {cid: snapshot(stores, "default", cid) for cid in conversations}
    stored = {cid: len(streamed[cid]["turns"]) for cid in conversations}
    produced = {cid: len(turns) for cid, turns in conversations.items()}
    lost = sum(produced.values()) - sum(min(stored[c], produced[c]) for c in conversations)
    identical = {cid: streamed[cid] == reference[cid] for cid in conversations}
    results = {
        "broker": args.broker, "rate": args.rate, "seed": args.seed, "wall_s": round(wall_s, 1),
        "valid_turns_produced": sum(produced.values()), "valid_turns_stored": sum(stored.values()),
        "turns_lost": lost, "poison_records_produced": len(poison), "poison_records_dead_lettered": len(letters),
        "restarts": restarts, "sigkill": sum(1 for s in stops if s["signal"] == "SIGKILL"),
        "sigterm": sum(1 for s in stops if s["signal"] == "SIGTERM"),
        "sigterm_exit_s_max": max((s["exit_s"] for s in stops if s["signal"] == "SIGTERM"), default=0.0),
        "crash_exits": crashes, "repairs": repairs,
        "memory_identical": identical, "per_conversation": {"produced": produced, "stored": stored},
        "stops": stops,
        "goals": {"turns_lost": 0, "crash_exits": 0, "memory_identical": True},
    }
    print_table(["measure", "value", "goal"], [
        ["broker", args.broker, ""],
        ["valid turns produced", results["valid_turns_produced"], ""],
        ["valid turns stored", results["valid_turns_stored"], ""],
        ["turns lost", lost, "0"],
        ["malformed / poison records produced", len(poison), ""],
        ["dead-lettered (distinct source records)", len(letters), str(len(poison))],
        ["worker restarts (SIGKILL / SIGTERM)", f"{restarts} ({results['sigkill']} / {restarts - results['sigkill']})",
         ">= 20"],
        ["slowest SIGTERM exit, s", results["sigterm_exit_s_max"], "<= 10"],
        ["workers that exited on their own", len(crashes), "0"],
        ["offset gaps / stalled partitions detected and repaired",
         f"{repairs['offset_gap']} / {repairs['partition_stalled']}", ""],
        ["seeks back", repairs["seek_back"], ""],
        ["conversations identical to an uninterrupted run", f"{sum(identical.values())} of {len(identical)}",
         f"{len(identical)} of {len(identical)}"],
        ["wall time, s", results["wall_s"], ""],
    ])
    write_results(args.out, results)


if __name__ == "__main__":
    main()
