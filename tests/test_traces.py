"""OpenTelemetry traces (``compassmem/core/tracing.py``, docs/traces.md): the spans of a query, of an HTTP request, of
the worker's and the pipeline's batches, the trace ids in JSON log lines, and the OTLP export that
``COMPASSMEM_OTEL_ENDPOINT`` switches on.

Spans are read from the SDK's in-memory exporter, over the real engine, real embedded stores, a real uvicorn server
and a real worker on the test broker; the OTLP test runs ``compassmem ingest`` against a small local HTTP server that
takes the collector's part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id

from compassmem.core import tracing
from compassmem.core.config import Settings
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.request_id import REQUEST_ID_HEADER
from compassmem.query_api.server import BackgroundServer
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.streams.runner import InProcessWorker

from conftest import StreamRun, stream_conversation, wait_until

pytestmark = pytest.mark.timeout(240)

TENANT = "traces"
CONVERSATION = "traced-1"
# "zeppelin" is in no turn: found in an attribute, it could only have come from the question.
QUESTION = "What did Ann and Bob plan next, and was a zeppelin involved?"
QUERY_STAGES = ["query.embed", "query.load", "query.search", "query.navigate", "query.relevance"]


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    yield provider, finished
    provider.shutdown()


@pytest.fixture
def spans(traced: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[InMemorySpanExporter]:
    """Traces on for one test, into memory; off again afterwards."""
    provider, finished = traced
    finished.clear()
    tracing.start_tracing(provider)
    try:
        yield finished
    finally:
        tracing.stop_tracing()


@pytest.fixture(scope="module")
def turns() -> list[Turn]:
    return [turn.model_copy(update={"tenant": TENANT}) for turn in stream_conversation(CONVERSATION, 1)]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
           turns: list[Turn]) -> Iterator[Memory]:
    stores = Stores(vectors=EdgeVectorStore(tmp_path_factory.mktemp("traces-qdrant") / "qdrant", embedder.dim),
                    graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    try:
        held = Memory(Settings(_env_file=None), stores=stores, embedder=embedder)  # type: ignore[call-arg]
        held.add(turns)
        yield held
    finally:
        stores.close()


def by_name(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name == name]


def one(finished: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = by_name(finished, name)
    assert len(found) == 1, f"{name}: {len(found)} spans among {[span.name for span in finished]}"
    return found[0]


def children_of(finished: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [span for span in finished if span.parent is not None and span.parent.span_id == parent.context.span_id]


def children(finished: Sequence[ReadableSpan], parent: ReadableSpan) -> list[str]:
    return [span.name for span in children_of(finished, parent)]


def attribute_texts(finished: Sequence[ReadableSpan]) -> list[str]:
    return [str(value) for span in finished for value in (span.attributes or {}).values()]


def test_a_query_is_one_span_with_a_child_per_stage_and_no_text(memory: Memory, spans: InMemorySpanExporter,
                                                                turns: list[Turn]) -> None:
    answer = memory.query(QUESTION, conversation_id=CONVERSATION, tenant=TENANT, budget_turns=7)
    finished = spans.get_finished_spans()

    query = one(finished, "query")
    assert query.parent is None
    assert children(finished, query) == QUERY_STAGES
    assert dict(query.attributes or {}) == {
        "compassmem.tenant": TENANT, "compassmem.scope": f"conversation {CONVERSATION!r}",
        "compassmem.question_chars": len(QUESTION), "compassmem.budget_turns": 7, "compassmem.max_hops": 5,
        "compassmem.evidence_items": len(answer.evidence), "compassmem.turns": len(answer.turn_ids)}
    assert answer.evidence
    # The stages' spans are the response's timings (the same stopwatch).
    for name in QUERY_STAGES:
        stage = one(finished, name)
        assert stage.end_time is not None and stage.start_time is not None
        assert abs((stage.end_time - stage.start_time) / 1e6 - answer.timings_ms[name.removeprefix("query.")]) < 1
    texts = attribute_texts(finished)
    assert not [text for text in texts if "zeppelin" in text.lower() or QUESTION in text]
    assert not [text for text in texts for turn in turns if turn.text in text]


def test_an_http_query_is_a_server_span_parent_of_the_query_span(memory: Memory,
                                                                 spans: InMemorySpanExporter) -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    services = ApiServices(memory=memory, settings=settings, metrics=MemoryMetrics(process_collectors=False))
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with BackgroundServer(create_app(services)) as server:
        answer = httpx.post(f"{server.url}/v1/query", timeout=30,
                            json={"tenant": TENANT, "conversation_id": CONVERSATION, "question": QUESTION},
                            headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"})
    assert answer.status_code == 200, answer.text
    finished = spans.get_finished_spans()

    server_span = one(finished, "POST /v1/query")
    query = one(finished, "query")
    assert server_span.kind == SpanKind.SERVER
    # The caller's trace goes on: its span is the server span's parent.
    assert format_trace_id(server_span.context.trace_id) == caller_trace
    assert server_span.parent is not None and format_span_id(server_span.parent.span_id) == caller_span
    assert query.parent is not None and query.parent.span_id == server_span.context.span_id
    assert query.context.trace_id == server_span.context.trace_id
    assert children(finished, query) == QUERY_STAGES
    request_id = answer.headers[REQUEST_ID_HEADER]
    assert dict(server_span.attributes or {}) == {
        "compassmem.request_id": request_id, "http.request.method": "POST", "url.path": "/v1/query",
        "http.route": "/v1/query", "http.response.status_code": 200}
    assert (query.attributes or {})["compassmem.request_id"] == request_id
    assert not [text for text in attribute_texts(finished) if "zeppelin" in text.lower()]


def test_an_ingest_batch_is_one_span_with_a_child_per_stage(memory: Memory, spans: InMemorySpanExporter) -> None:
    more = [turn.model_copy(update={"tenant": TENANT}) for turn in stream_conversation("traced-2", 2)]
    memory.add(more)
    finished = spans.get_finished_spans()

    batch = one(finished, "ingest.batch")
    assert dict(batch.attributes or {}) == {"compassmem.turns": len(more), "compassmem.conversations": 1}
    stages = children(finished, batch)
    assert stages[0] == "batch.embed" and stages[-1] == "batch.store"
    assert {"batch.segment", "batch.merge", "batch.relate"} <= set(stages)
    # The end of the call closes the open segments: a span of its own, and no stage without its batch.
    assert children(finished, one(finished, "ingest.close")) == ["batch.store"]
    assert sorted(span.name for span in finished if span.parent is None) == ["ingest.batch", "ingest.close"]


def test_a_worker_batch_is_one_span_with_a_child_per_stage(stream_run: StreamRun, embedder: Any,
                                                           spans: InMemorySpanExporter) -> None:
    settings = stream_run.settings()
    sent = stream_conversation("traced-worker", 3)
    with open_stores(settings) as stores:
        worker = InProcessWorker(settings, stream_run.bootstrap, stores, embedder).start()
        try:
            wait_until(lambda: worker.streaming.assigned_partitions, 60, "the in-process worker's partitions")
            with stream_run.producer() as producer:
                producer.produce(sent)

            def applied() -> int:
                return sum((span.attributes or {}).get("compassmem.turns", 0)
                           for span in by_name(spans.get_finished_spans(), "worker.batch"))

            wait_until(lambda: applied() == len(sent), 90, "the worker's batches to apply every turn", 0.3,
                       lambda: str(applied()))
        finally:
            worker.stop()
    finished = spans.get_finished_spans()

    batches = [batch for batch in by_name(finished, "worker.batch") if (batch.attributes or {})["compassmem.turns"]]
    stages: set[str] = set()
    for batch in batches:
        assert batch.parent is None
        attributes = dict(batch.attributes or {})
        assert attributes["compassmem.conversations"] == 1 and attributes["compassmem.dead_letters"] == 0
        assert len(attributes["compassmem.partitions"]) == 1 and attributes["compassmem.records"] >= 1
        names = children(finished, batch)
        # The store thread's stages, then the commit's steps on the event loop.
        assert names[0] == "batch.embed" and names[-2:] == ["batch.store", "batch.commit"], names
        commit = one(children_of(finished, batch), "batch.commit")
        assert children(finished, commit) == ["batch.publish", "batch.state", "batch.offsets"]
        stages.update(names)
    assert {"batch.segment", "batch.merge", "batch.relate"} <= stages


# Run in a child process: logging is configured once per process, and the test suite's own is the console one.
_JSON_LOG_OF_A_TRACED_REQUEST = textwrap.dedent("""
    import json

    import structlog
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from compassmem.core import tracing
    from compassmem.core.logging_setup import configure_logging
    from compassmem.query_api.request_id import install_request_ids
    from compassmem.query_api.server_spans import ServerSpanMiddleware

    configure_logging("INFO", "json")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.start_tracing(provider)
    log = structlog.get_logger("probe")
    app = FastAPI()

    @app.get("/work")
    def work() -> dict:
        log.info("probe.working")
        return {}

    app.add_middleware(ServerSpanMiddleware)
    install_request_ids(app)
    TestClient(app, base_url="http://localhost").get("/work", headers={"X-Request-ID": "req-traced"})
    log.info("probe.outside")
    [span] = exporter.get_finished_spans()
    context = span.context
    print(json.dumps({"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x"),
                      "name": span.name}))
""")


def test_the_json_log_line_of_a_traced_request_carries_its_trace_and_span_ids() -> None:
    done = subprocess.run([sys.executable, "-c", _JSON_LOG_OF_A_TRACED_REQUEST], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    span = json.loads(done.stdout)
    lines = {line["event"]: line for line in map(json.loads, done.stderr.splitlines()) if "event" in line}

    assert span["name"] == "GET /work"
    working = lines["probe.working"]
    assert (working["request_id"], working["trace_id"], working["span_id"]) == (
        "req-traced", span["trace_id"], span["span_id"])
    assert "trace_id" not in lines["probe.outside"]


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector's traces endpoint: keeps each request's decoded body."""

    received: list[tuple[str, ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append((self.path, request))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass


def test_the_setting_sends_the_spans_of_a_command_to_the_collector(tmp_path: Path) -> None:
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, name="otlp-collector", daemon=True).start()
    sample = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("COMPASSMEM_", "OTEL_"))}
    env.update({"COMPASSMEM_DATA_DIR": str(tmp_path / "data"),
                "COMPASSMEM_OTEL_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
                # The cache of the `embedder` fixture's settings: the model is exported once per checkout.
                "COMPASSMEM_EMBEDDER_CACHE_DIR": str(Path(".compassmem", "models").resolve())})
    try:
        done = subprocess.run([sys.executable, "-m", "compassmem.cli", "ingest", str(sample)], env=env,
                              capture_output=True, text=True, timeout=180, check=False)
    finally:
        collector.shutdown()
        collector.server_close()
    assert done.returncode == 0, done.stderr[-3000:]

    assert _Collector.received, "no OTLP request reached the collector"
    assert {path for path, _ in _Collector.received} == {tracing.TRACES_PATH}
    services, names = set(), []
    for _, request in _Collector.received:
        for resource_spans in request.resource_spans:
            services.update(a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name")
            names.extend(span.name for scope in resource_spans.scope_spans for span in scope.spans)
    assert services == {"compassmem-ingest"}
    assert "ingest.batch" in names and {"batch.embed", "batch.segment", "batch.store"} <= set(names)


def test_unset_sets_up_nothing_and_a_bad_endpoint_is_refused() -> None:
    unset = Settings(_env_file=None)  # type: ignore[call-arg]
    assert tracing.configure_tracing(unset, service="compassmem-test") is False
    assert not tracing.enabled()
    with tracing.span("nothing", tenant="t") as opened, tracing.stage("nothing either") as took:
        assert opened is None
    assert took.seconds >= 0
    assert Settings(_env_file=None, otel_endpoint=" ").otel_endpoint is None  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="otel_endpoint"):
        Settings(_env_file=None, otel_endpoint="collector:4318")  # type: ignore[call-arg]
    assert tracing.traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert tracing.traces_url("https://collector/otlp/v1/traces") == "https://collector/otlp/v1/traces"
