"""Shared pytest fixtures.

Each group of fixtures is marked with the tests that use it; add new groups below rather than reusing names.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compassmem.core.contracts.search import SparseVector
from compassmem.core.models import (
    Cluster,
    Event,
    Granularity,
    IndexedTurn,
    Observation,
    Relation,
    RelationType,
    TemporalInfo,
    TimeAnchor,
    event_id_for,
)
from compassmem.processors.relations import make_relation
from compassmem.sinks.batching import Sink
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB

# --- storage layer: tests/test_vector_stores.py, tests/test_graph_store.py ----------------------------------

STORE_TEST_DIM = 32
STORE_TEST_T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def _store_test_embedding(seed: int, dim: int) -> list[float]:
    """A deterministic random unit vector."""
    vector = np.random.default_rng(seed).normal(size=dim)
    return (vector / np.linalg.norm(vector)).tolist()


def _store_test_sparse(words: Sequence[str]) -> SparseVector:
    """Keyword vector with one stable index per word (term frequency 1), as a keyword extractor would give."""
    indices = sorted({zlib.crc32(w.lower().encode()) & 0x7FFFFFFF for w in words})
    return SparseVector(indices=indices, values=[1.0] * len(indices))


@pytest.fixture
def store_dim() -> int:
    """Embedding size the store tests use (small keeps them fast; the code path is the same as 384)."""
    return STORE_TEST_DIM


@pytest.fixture
def sparse_keywords() -> Callable[[Sequence[str]], SparseVector]:
    """``sparse_keywords(["meeting", "zanzibar"])``: a keyword sparse vector, one stable index per word."""
    return _store_test_sparse


@pytest.fixture
def event_builder() -> Callable[..., Event]:
    """``event_builder(conversation_id, first_turn, ...)``: a complete Event with observations, anchors, embedding."""

    def build(
        conversation_id: str = "conv-1",
        first_turn: int = 1,
        *,
        tenant: str = "default",
        summary: str | None = None,
        keywords: Sequence[str] = (),
        seed: int | None = None,
        turns: int = 2,
        cluster_id: str | None = None,
        version: int = 1,
        dim: int = STORE_TEST_DIM,
    ) -> Event:
        start = STORE_TEST_T0 + timedelta(minutes=10 * first_turn)
        observations = [
            Observation(
                turn_id=f"D1:{first_turn + i}",
                speaker="Caroline" if i % 2 == 0 else "Melanie",
                text=f"turn {first_turn + i} of {conversation_id}: {' '.join(keywords)}",
                timestamp=start + timedelta(seconds=i),
                session_id="session_1",
            )
            for i in range(turns)
        ]
        return Event(
            tenant=tenant,
            event_id=event_id_for(tenant, conversation_id, observations[0].turn_id),
            conversation_id=conversation_id,
            observations=observations,
            summary=summary or f"event at turn {first_turn} about {' '.join(keywords) or 'nothing'}",
            participants=["Caroline", "Melanie"],
            actions=["went to"],
            entities=["LGBTQ support group"],
            keywords=list(keywords),
            temporal_info=TemporalInfo(start=start, end=observations[-1].timestamp),
            time_anchors=[
                TimeAnchor(
                    expression="last Saturday",
                    start=date(2023, 5, 6),
                    end=date(2023, 5, 6),
                    granularity=Granularity.DAY,
                    turn_id=observations[0].turn_id,
                )
            ],
            cluster_id=cluster_id,
            embedding=_store_test_embedding(seed if seed is not None else first_turn, dim),
            version=version,
        )

    return build


@pytest.fixture
def turn_builder() -> Callable[..., IndexedTurn]:
    """``turn_builder(conversation_id, turn, event_id=..., keywords=...)``: an IndexedTurn with its embedding.

    Its turn id is ``D1:<turn>`` and its embedding that of ``event_builder(conversation_id, turn)`` unless ``seed``
    says otherwise, so a turn and an event can share a vector. ``event_id`` defaults to the event that would
    start at this turn.
    """

    def build(
        conversation_id: str = "conv-1",
        turn: int = 1,
        *,
        tenant: str = "default",
        event_id: str | None = None,
        keywords: Sequence[str] = (),
        seed: int | None = None,
        timestamp: datetime | None = None,
        dim: int = STORE_TEST_DIM,
    ) -> IndexedTurn:
        turn_id = f"D1:{turn}"
        return IndexedTurn(
            tenant=tenant,
            conversation_id=conversation_id,
            turn_id=turn_id,
            event_id=event_id or event_id_for(tenant, conversation_id, turn_id),
            speaker="Caroline" if turn % 2 else "Melanie",
            text=f"turn {turn} of {conversation_id}: {' '.join(keywords)}",
            timestamp=timestamp or STORE_TEST_T0 + timedelta(minutes=turn),
            session_id="session_1",
            has_time_expression=turn % 3 == 0,
            embedding=_store_test_embedding(seed if seed is not None else turn, dim),
        )

    return build


@pytest.fixture
def relation_builder() -> Callable[..., Relation]:
    """``relation_builder(source_event, target_id, type_, ...)``: a Relation with its deterministic id."""

    def build(
        source: Event,
        target: str,
        type_: RelationType = RelationType.CAUSAL,
        *,
        subtype: str | None = None,
        confidence: float = 0.8,
        superseded_by: str | None = None,
        minutes: int = 0,
    ) -> Relation:
        relation = make_relation(source, target, type_, confidence, "because", subtype=subtype)
        return relation.model_copy(
            update={"created_at": STORE_TEST_T0 + timedelta(minutes=minutes), "superseded_by": superseded_by}
        )

    return build


@pytest.fixture
def cluster_builder() -> Callable[..., Cluster]:
    """``cluster_builder(member_events, cluster_id, label=...)``: a Cluster of those events' conversation."""

    def build(events: Sequence[Event], cluster_id: str, label: Sequence[str] = ("topic",)) -> Cluster:
        return Cluster(
            tenant=events[0].tenant,
            conversation_id=events[0].conversation_id,
            cluster_id=cluster_id,
            members=[e.event_id for e in events],
            centroid=[0.25] * 4,
            label=list(label),
        )

    return build


@pytest.fixture
def store_tenant() -> str:
    """A tenant name no other test uses, so tests can share one FalkorDB / shard without seeing each other."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def embedded_falkordb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFalkorDB]:
    """One embedded FalkorDB for the test session (tests isolate themselves by tenant)."""
    with EmbeddedFalkorDB(tmp_path_factory.mktemp("falkordb-session")) as server:
        yield server


@pytest.fixture
def own_falkordb_dir(tmp_path: Path) -> Path:
    """A data directory for a test that starts, kills and restarts its own FalkorDB."""
    return tmp_path / "falkordb"


# --- The real embedder (processor, pipeline and CLI tests) -------------------------------------------------


@pytest.fixture(scope="session")
def embedder():  # noqa: ANN201 - imported lazily so store tests load no model
    """The embedder the default settings choose: the one worker processes started by the tests use, so that
    in-process reference memories are built from the same vectors."""
    from compassmem.core.config import Settings
    from compassmem.embedding.embedders import make_embedder

    return make_embedder(Settings())


@pytest.fixture(scope="session")
def torch_embedder():  # noqa: ANN201
    """The sentence-transformers reference the onnx-int8 embedder is checked against."""
    from compassmem.embedding.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


# --- streaming worker: tests/test_streaming.py (real Tansu broker, real stores, worker processes) -----------
# Everything here starts real things: one dev broker per session on a free loopback port, a FalkorDB per run,
# worker subprocesses (`python -m compassmem.cli worker`) or an in-process worker thread. Every process is
# stopped by its PID in teardown.

import json as _json  # noqa: E402
import os as _os  # noqa: E402
import re as _re  # noqa: E402
import signal as _signal  # noqa: E402
import subprocess as _subprocess  # noqa: E402
import sys as _sys  # noqa: E402
import time as _time  # noqa: E402
from dataclasses import dataclass as _dataclass  # noqa: E402
from dataclasses import field as _field  # noqa: E402

STREAM_TOPICS: list[list[str]] = _json.loads((Path(__file__).parent / "data" / "topics.json").read_text())
STREAM_T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
# Group joins take about half the first member's session timeout.
STREAM_FAST_GROUP_ENV = {
    "COMPASSMEM_KAFKA_SESSION_TIMEOUT_S": "6",
    "COMPASSMEM_KAFKA_HEARTBEAT_INTERVAL_S": "1",
    "COMPASSMEM_KAFKA_REBALANCE_TIMEOUT_S": "6",
    "COMPASSMEM_KAFKA_COMMIT_INTERVAL_S": "0.5",
    "COMPASSMEM_KAFKA_PARTITIONS": "4",
    "COMPASSMEM_STREAM_BATCH_SIZE": "16",
    "COMPASSMEM_STREAM_BATCH_WITHIN_S": "0.1",
    "COMPASSMEM_IDLE_CLOSE_S": "2",
    "COMPASSMEM_METRICS_LAG_INTERVAL_S": "0.5",
    "COMPASSMEM_LOG_LEVEL": "INFO",
}


def wait_until(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.1,
               detail: Callable[[], str] | None = None) -> object:
    """Poll ``condition`` until it is truthy; fail with ``what`` (and ``detail()``) after ``timeout_s``."""
    deadline = _time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if _time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}{extra}")
        _time.sleep(interval_s)


def stream_conversation(conversation_id: str, index: int, tenant: str = "default", sessions: int = 3):
    """A deterministic conversation: per session two topics of tests/data/topics.json, four turns each, so the
    memory has topic boundaries, session boundaries and relations between events."""
    from compassmem.core.models import Turn

    turns = []
    for session in range(sessions):
        start = STREAM_T0 + timedelta(days=3 * session, minutes=index)
        texts = [text for k in (0, 1) for text in STREAM_TOPICS[(index * 5 + session * 2 + k) % len(STREAM_TOPICS)]]
        for offset, text in enumerate(texts, start=1):
            turns.append(Turn(
                tenant=tenant, conversation_id=conversation_id, turn_id=f"D{session + 1}:{offset}",
                speaker=("Ann", "Bob")[offset % 2], text=text,
                timestamp=start + timedelta(seconds=30 * offset), session_id=str(session + 1),
            ))
    return turns


def interleave(conversations, seed: int = 7):  # noqa: ANN001, ANN201 - lists of Turn
    """Mix conversations into one stream at random, keeping each conversation's own order."""
    import random

    rng = random.Random(seed)
    queues = [list(turns) for turns in conversations]
    mixed = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        mixed.append(queue.pop(0))
    return mixed


class _RecordingSink(Sink):
    """Keeps the latest version of every record the in-process pipeline writes (the reference memory)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], object] = {}

    def add(self, record) -> None:  # noqa: ANN001
        from compassmem.core.models import Cluster, Event, IndexedTurn, Relation

        if isinstance(record, Event):
            self.records[("event", record.event_id)] = record
        elif isinstance(record, Relation):
            self.records[("relation", record.relation_id)] = record
        elif isinstance(record, IndexedTurn):
            self.records[("turn", f"{record.tenant}/{record.conversation_id}/{record.turn_id}")] = record
        elif isinstance(record, Cluster):
            self.records[("cluster", record.cluster_id)] = record

    def flush(self) -> None:
        pass


def memory_snapshot(events, relations, turns) -> dict[str, object]:  # noqa: ANN001
    """What the guarantees compare: event ids with their turn membership, relation ids with their endpoints,
    type and supersession, and which event each turn points to."""
    return {
        "events": {e.event_id: (tuple(e.turn_ids), e.provisional, e.version, e.cluster_id) for e in events},
        "relations": {r.relation_id: (r.source, r.target, r.type.value, r.subtype, r.superseded_by)
                      for r in relations},
        "turns": {t.turn_id: t.event_id for t in turns},
    }


def reference_snapshots(turns, embedder, config=None) -> dict[str, dict[str, object]]:  # noqa: ANN001
    """The in-process pipeline's memory for the same turns (``compassmem ingest``), per tenant/conversation;
    ``config``: a PipelineConfig other than the default."""
    from compassmem.core.models import Event, IndexedTurn, Relation
    from compassmem.write.pipeline import MemoryPipeline

    sink = _RecordingSink()
    MemoryPipeline(embedder, [sink], config).ingest(turns, close_at_end=True)
    keys = sorted({t.key for t in turns})
    out = {}
    for key in keys:
        tenant, conversation_id = key.split("/", 1)

        def mine(record, kind):  # noqa: ANN001, ANN202
            return isinstance(record, kind) and record.tenant == tenant and record.conversation_id == conversation_id

        values = list(sink.records.values())
        out[key] = memory_snapshot([r for r in values if mine(r, Event)], [r for r in values if mine(r, Relation)],
                                   [r for r in values if mine(r, IndexedTurn)])
    return out


def graph_snapshot(graph, key: str) -> dict[str, object]:  # noqa: ANN001
    """Event ids (without stubs) and relations of a conversation as the graph store holds them."""
    tenant, conversation_id = key.split("/", 1)
    view = graph.conversation_graph(tenant, conversation_id)
    events = sorted(n for n, data in view.nodes(data=True) if data.get("kind") == "event" and not data.get("stub"))
    relations = {r.relation_id: (r.source, r.target, r.type.value, r.subtype, r.superseded_by)
                 for r in graph.relations(tenant, conversation_id)}
    return {"events": events, "relations": relations}


def stores_snapshot(vectors, graph, key: str) -> dict[str, object]:  # noqa: ANN001
    tenant, conversation_id = key.split("/", 1)
    snapshot = memory_snapshot(vectors.conversation_events(tenant, conversation_id),
                               graph.relations(tenant, conversation_id),
                               vectors.conversation_turns(tenant, conversation_id))
    snapshot["graph_events"] = graph_snapshot(graph, key)["events"]
    return snapshot


def expected_snapshot(reference: dict[str, object]) -> dict[str, object]:
    return {**reference, "graph_events": sorted(reference["events"])}


def describe_difference(expected: dict[str, object], actual: dict[str, object]) -> str:
    lines = []
    for part in expected:
        want, got = expected[part], actual.get(part)
        if want == got:
            continue
        if isinstance(want, dict) and isinstance(got, dict):
            missing = sorted(set(want) - set(got))[:5]
            extra = sorted(set(got) - set(want))[:5]
            changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])[:5]
            lines.append(f"{part}: missing {missing}, unexpected {extra}, "
                         f"differing {[(k, want[k], got[k]) for k in changed]}")
        else:
            lines.append(f"{part}: expected {want}, got {got}")
    return "\n".join(lines) or "(equal)"


class WorkerProcess:
    """``python -m compassmem.cli worker`` with its output in a log file that the test reads."""

    def __init__(self, label: str, env: dict[str, str], log_path: Path) -> None:
        self.label = label
        self.log_path = log_path
        self._log = log_path.open("ab")
        from compassmem.system.child_process import die_with_parent

        self.process = _subprocess.Popen(  # noqa: S603
            [_sys.executable, "-m", "compassmem.cli", "worker"], env=env, stdout=self._log,
            stderr=_subprocess.STDOUT, stdin=_subprocess.DEVNULL,
            # If pytest itself is killed (no teardown), the worker goes with it instead of lingering.
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return f"--- {self.label} (pid {self.pid}) log tail ---\n" + "\n".join(self.log().splitlines()[-lines:])

    def stacks(self) -> str:
        """Every thread's stack of a worker that seems stuck (SIGQUIT makes it print them), with its log tail."""
        if self.process.poll() is None:
            _os.kill(self.pid, _signal.SIGQUIT)
            _time.sleep(1.0)
        return self.tail(120)

    def batch_totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for line in self.log().splitlines():
            if "stream.batch " not in line:
                continue
            for name, value in _re.findall(r"(\w+)=(\d+)(?=\s|$)", line):
                totals[name] = totals.get(name, 0) + int(value)
        return totals

    def assigned_partitions(self) -> list[int] | None:
        found = _re.findall(r"stream\.partitions_assigned\s+partitions=\[([\d, ]*)\]", self.log())
        if not found:
            return None
        return [int(p) for p in found[-1].replace(" ", "").split(",") if p]

    def metrics_url(self) -> str:
        found = _re.findall(r"worker\.metrics\s+url=(\S+)", self.log())
        assert found, f"worker {self.label} logged no metrics endpoint\n{self.tail()}"
        return found[-1]

    def wait_assigned(self, timeout_s: float = 90.0) -> list[int]:
        def assigned() -> list[int] | None:
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.label} exited with {self.process.returncode}\n{self.tail()}")
            partitions = self.assigned_partitions()
            return partitions or None

        return wait_until(assigned, timeout_s, f"worker {self.label} to get partitions", 0.2, self.tail)

    def kill9(self) -> None:
        if self.process.poll() is None:
            _os.kill(self.pid, _signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (graceful: leaves the group, finishes the batch in flight), SIGKILL after ``timeout_s``."""
        if self.process.poll() is None:
            _os.kill(self.pid, _signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except _subprocess.TimeoutExpired:
                self.kill9()
        self._log.close()


@_dataclass
class StreamRun:
    """One isolated streaming setup on the session broker: its own topics, consumer group and FalkorDB."""

    name: str
    bootstrap: str
    root: Path
    falkordb: EmbeddedFalkorDB
    workers: list[WorkerProcess] = _field(default_factory=list)

    def env(self, data_dir: Path, app_id: str | None = None, **overrides: str) -> dict[str, str]:
        env = {key: value for key, value in _os.environ.items() if not key.startswith("COMPASSMEM_")}
        env.update(STREAM_FAST_GROUP_ENV)
        env.update({
            "COMPASSMEM_KAFKA_BOOTSTRAP": self.bootstrap,
            "COMPASSMEM_DATA_DIR": str(data_dir),
            "COMPASSMEM_FALKORDB_URL": self.falkordb.url,
            "COMPASSMEM_KAFKA_APP_ID": app_id or f"{self.name}-app",
            "COMPASSMEM_METRICS_PORT": "0",  # several workers share this machine
            **{f"COMPASSMEM_{topic.upper()}_TOPIC": f"{self.name}.{topic}"
               for topic in ("turns", "control", "events", "relations", "clusters", "dlq")},
        })
        env.update(overrides)
        return env

    def settings(self, data_dir: Path | None = None, **overrides: object):  # noqa: ANN201 - Settings
        from compassmem.core.config import Settings

        env = self.env(data_dir or self.root / "inproc")
        fields = {key[len("COMPASSMEM_"):].lower(): value for key, value in env.items()
                  if key.startswith("COMPASSMEM_")}
        fields.update(overrides)
        return Settings(_env_file=None, **fields)

    def start_worker(self, label: str, data_dir: Path, app_id: str | None = None, **overrides: str) -> WorkerProcess:
        worker = WorkerProcess(label, self.env(data_dir, app_id, **overrides), self.root / f"{label}.log")
        self.workers.append(worker)
        return worker

    def producer(self):  # noqa: ANN201 - TurnProducer
        from compassmem.publish.producer import TurnProducer

        settings = self.settings()
        return TurnProducer(self.bootstrap, settings.turns_topic, settings.control_topic)

    def ensure_topics(self) -> None:
        from compassmem.streams.topics import ensure_topics, topic_specs

        ensure_topics(self.bootstrap, topic_specs(self.settings()))

    def read_topic(self, topic: str, idle_s: float = 1.5) -> list:
        """Every record of a topic, read from the start without a consumer group."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=int(idle_s * 1000))
        try:
            partitions = consumer.partitions_for_topic(topic) or set()
            consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
            consumer.seek_to_beginning()
            return list(consumer)
        finally:
            consumer.close()

    def open_stores(self, data_dir: Path):  # noqa: ANN201 - Stores, for reading after the worker stopped
        from compassmem.sinks.factory import open_stores

        return open_stores(self.settings(data_dir))

    def stop_all(self) -> None:
        for worker in self.workers:
            try:
                worker.stop(timeout_s=15)
            except Exception:  # noqa: BLE001 - teardown must reach every process
                worker.kill9()


@pytest.fixture(scope="session")
def stream_broker(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - DevBroker
    """The memory-only Tansu dev broker on a free loopback port, for the whole session."""
    from compassmem.streams.broker import DevBroker

    with DevBroker(port=0, log_path=tmp_path_factory.mktemp("tansu") / "tansu.log") as broker:
        yield broker


@pytest.fixture
def stream_run(stream_broker, tmp_path: Path) -> Iterator[StreamRun]:  # noqa: ANN001
    """A fresh run: unique topics and group on the session broker, its own FalkorDB; all stopped afterwards."""
    name = f"run-{uuid.uuid4().hex[:8]}"
    with EmbeddedFalkorDB(tmp_path / "falkordb") as falkordb:
        run = StreamRun(name=name, bootstrap=stream_broker.bootstrap, root=tmp_path, falkordb=falkordb)
        run.ensure_topics()
        try:
            yield run
        finally:
            run.stop_all()


# --- the worker's batch step over real stores, without a broker: tests/test_redaction.py, tests/test_turn_ids.py


class ConversationLog:
    """One conversation's records on turns partition 0, applied as the worker's batch step applies them."""

    def __init__(self, tenant: str, conversation_id: str) -> None:
        self.tenant, self.conversation_id = tenant, conversation_id
        self.key = f"{tenant}/{conversation_id}".encode()

    def record(self, offset: int, value: bytes, control=None):  # noqa: ANN001, ANN201 - ControlKind, RawRecord
        from compassmem.streams.decoding import RawRecord
        from compassmem.core.contracts.stream_records import CONTROL_HEADER

        headers = ((CONTROL_HEADER, control.value.encode()),) if control else ()
        return RawRecord(topic="t.turns", partition=0, offset=offset, key=self.key, value=value, headers=headers)

    def idle_close(self, offset: int, after: int):  # noqa: ANN201 - RawRecord
        from compassmem.core.contracts.stream_records import ControlKind, IdleCloseMarker

        marker = IdleCloseMarker(tenant=self.tenant, conversation_id=self.conversation_id, after_offset=after,
                                 idle_s=1.0)
        return self.record(offset, marker.model_dump_json().encode(), ControlKind.IDLE_CLOSE)

    def apply(self, processor, records: list, state: bytes | None):  # noqa: ANN001, ANN201
        """The batch applied and flushed (``processor``: a MemoryStreamProcessor); the conversation's table state
        after it (the one given when the batch did not change it), and the batch's output."""
        from functools import partial

        from compassmem.streams.processor import BatchInput

        key = self.key.decode()
        batch = BatchInput(records=records, states={key: state} if state else {}, tombstones={})
        out = processor.sinks.write(partial(processor.process, batch))
        return out.states[key][0] if key in out.states else state, out


# --- `compassmem dev` as the HTTP server of the public clients: tests/test_client.py, tests/test_readme_usage.py,
# tests/test_typescript_client.py
# One child process for the session (worker, API, dev broker, embedded stores in a temporary directory), holding
# the sample conversation under tenant "default" and one turn of tenant "acme", which has an API key; an admin key
# may delete tenants (tests that do delete only tenants of their own).

SERVED_KEY_TENANT, SERVED_KEY = "acme", "acme-secret-served"
SERVED_ADMIN_KEY = "admin-secret-served"
SERVED_MAX_BODY_BYTES = 64 * 1024


@_dataclass(frozen=True)
class ServedMemory:
    url: str
    key_tenant: str = SERVED_KEY_TENANT
    key: str = SERVED_KEY
    admin_key: str = SERVED_ADMIN_KEY
    max_body_bytes: int = SERVED_MAX_BODY_BYTES


@pytest.fixture(scope="session")
def served_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedMemory]:
    import httpx
    from dev_process import FAST_STREAM_ENV, free_port, running_dev

    root = tmp_path_factory.mktemp("served-memory")
    env = {key: value for key, value in _os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update({**FAST_STREAM_ENV, "COMPASSMEM_DATA_DIR": str(root / "data"), "COMPASSMEM_DEV_BROKER_PORT": "0",
                "COMPASSMEM_API_PORT": str(free_port()),
                "COMPASSMEM_API_KEYS": _json.dumps({SERVED_KEY_TENANT: SERVED_KEY}),
                "COMPASSMEM_API_ADMIN_KEYS": _json.dumps([SERVED_ADMIN_KEY]),
                # Small enough that a client's test can send a body over it without flooding the socket.
                "COMPASSMEM_API_MAX_BODY_BYTES": str(SERVED_MAX_BODY_BYTES),
                # The cache of the `embedder` fixture's settings: the model is exported once per checkout.
                "COMPASSMEM_EMBEDDER_CACHE_DIR": str(Path(".compassmem", "models").resolve())})
    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
    turns = [_json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
    keyed = {"tenant": SERVED_KEY_TENANT, "conversation_id": "acme-1", "turn_id": "1", "speaker": "Zed",
             "text": "The greenhouse router drops the wifi every evening.", "timestamp": "2024-05-01T18:00:00+00:00"}
    with running_dev(env, root / "dev.log") as url:
        assert httpx.post(f"{url}/v1/turns", json=turns, timeout=30).status_code == 202
        assert httpx.post(f"{url}/v1/turns", json=keyed, headers={"Authorization": f"Bearer {SERVED_KEY}"},
                          timeout=30).status_code == 202
        questions = [({"conversation_id": "priya-tom", "question": "Why was the Atlas launch moved?"}, {}, "S2:2"),
                     ({"conversation_id": "acme-1", "question": "What drops?", "tenant": SERVED_KEY_TENANT},
                      {"Authorization": f"Bearer {SERVED_KEY}"}, "1")]

        def ingested() -> bool:
            answers = [httpx.post(f"{url}/v1/query", json=body, headers=headers, timeout=30)
                       for body, headers, _ in questions]
            # And every segment closed (idle), so that the listings count every turn in a stored event.
            listed = [httpx.get(f"{url}/v1/conversations", params={"tenant": tenant}, headers=headers,
                                timeout=30).json()["conversations"]
                      for tenant, headers in (("default", {}), (SERVED_KEY_TENANT, questions[1][1]))]
            return all(answer.status_code == 200 and turn_id in answer.json()["turn_ids"]
                       for answer, (_, _, turn_id) in zip(answers, questions, strict=True)) \
                and [sum(c["turns"] for c in page if not c["provisional_events"]) for page in listed] == [len(turns), 1]

        wait_until(ingested, 90, "the worker to make the turns queryable", 0.5,
                   lambda: (root / "dev.log").read_text()[-3000:])
        yield ServedMemory(url=url)


# --- a local server speaking the OpenAI chat protocol (tests/fake_chat_server.py), for the LLM steps -----------


@pytest.fixture(scope="module")
def fake_llm():  # noqa: ANN201 - Iterator[tuple[FakeChatServer, str]]
    from fake_chat_server import serving_fake_chat

    with serving_fake_chat() as served:
        yield served


# --- a real browser for the explorer's pages: Debian's chromium driven by Playwright (its own download cannot work) --

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium, one per test module."""
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`make tools`, or apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def new_tab(browser: Any) -> Iterator[Callable[..., Any]]:
    """``new_tab(url, key, size=(1280, 800))``: a tab of that size opened on ``url``, the key (for tenant ``default``)
    in its session storage when given, the page's errors collected in ``page.js_errors``; closed after the test."""
    contexts = []

    def opened(url: str, key: str | None, size: tuple[int, int] = (1280, 800)) -> Any:
        context = browser.new_context(viewport={"width": size[0], "height": size[1]})
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.js_errors = errors
        if key is not None:
            page.add_init_script("sessionStorage.setItem('compassmem.tenant', 'default');"
                                 f"sessionStorage.setItem('compassmem.key', {_json.dumps(key)});")
        page.goto(url)
        return page

    yield opened
    for context in contexts:
        context.close()


# --- a small stand-in HTTP server on loopback: tests/test_quiet_output.py, tests/test_http_client_process.py ------


@contextmanager
def serving_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) on a thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
