"""No user text leaves the process in a trace or a log line (docs/traces.md, "What is never recorded").

A canary word is put in every free-text place a caller has (a question, a listing's ``q``, a turn's text, speaker
and metadata, a setting's value) and every endpoint of the query API's OpenAPI document and every MCP tool is called
with it, with traces on as ``configure_tracing`` sets them up (``tracing.trace_to``, here into the SDK's in-memory
exporter). The canary must then be in no exported span's name, attribute, status, event or link, and in no log line
the server side wrote meanwhile. A span with what instrumentation records when left to itself (the URL's query, an
exception's message) shows the allow-list at work; uvicorn's access lines, as ``compassmem api`` writes them, are
checked in a child process (logging is configured once per process).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import SecretStr

from compassmem.core import tracing
from compassmem.core.config import Settings
from compassmem.core.contracts.commands import Command
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.mcp.server import build_server
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import BackgroundServer
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore

pytestmark = pytest.mark.timeout(300)

# In no id, tenant, setting key or route: found anywhere in a trace or a log line, it came from user text.
CANARY = "zanzibarquokka"
TENANT, DOOMED_TENANT = "canary-tenant", "canary-doomed"
CONVERSATION, FORGOTTEN = "canary-conv", "canary-gone"
ADMIN_KEY = "admin-key-for-the-canary-test-0123456789"
T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
MCP_TOOLS = {"remember", "recall", "list_conversations", "forget", "redact_turn"}


class Recorded:
    """Both publishers the API may have (turns and control commands), keeping what they were given."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.commands: list[Command] = []

    def publish_turns(self, turns: Sequence[Turn]) -> None:
        self.turns.extend(turns)

    def publish_command(self, command: Command) -> tuple[int, int]:
        self.commands.append(command)
        return 0, len(self.commands) - 1


def canary_turns(tenant: str, conversation_id: str) -> list[Turn]:
    lines = [(f"Ann {CANARY.title()}", f"My {CANARY} called Biscuit learned to fetch at the river park."),
             ("Bob", f"Lovely! Did the {CANARY} like the water?"),
             (f"Ann {CANARY.title()}", f"Yes, the {CANARY} swam until sunset and slept all evening.")]
    return [Turn(tenant=tenant, conversation_id=conversation_id, turn_id=f"t{index}", speaker=speaker, text=text,
                 timestamp=T0 + timedelta(minutes=index), metadata={"note": f"about the {CANARY}"})
            for index, (speaker, text) in enumerate(lines, start=1)]


class TracedSpans:
    """The spans a test's traces exported, and the provider that opens them."""

    def __init__(self, provider: TracerProvider, exported: InMemorySpanExporter) -> None:
        self.provider = provider
        self._exported = exported

    def finished(self) -> tuple[ReadableSpan, ...]:
        """Every span exported so far, once the batches on their way are in."""
        assert self.provider.force_flush()
        return self._exported.get_finished_spans()


@pytest.fixture
def spans() -> Iterator[TracedSpans]:
    """Traces on for one test as ``configure_tracing`` sets them up, exported into memory; off again afterwards."""
    exported = InMemorySpanExporter()
    provider = tracing.trace_to(exported, "compassmem-test")
    try:
        yield TracedSpans(provider, exported)
    finally:
        tracing.stop_tracing()
        provider.shutdown()


@pytest.fixture(scope="module")
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
           recorded: Recorded) -> Iterator[Memory]:
    stores = Stores(vectors=EdgeVectorStore(tmp_path_factory.mktemp("canary-qdrant") / "qdrant", embedder.dim),
                    graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    settings = Settings(_env_file=None, api_admin_keys=[SecretStr(ADMIN_KEY)])  # type: ignore[call-arg]
    try:
        yield Memory(settings, stores=stores, embedder=embedder, control=recorded)
    finally:
        stores.close()


def canary_places(finished: Sequence[ReadableSpan]) -> list[str]:
    """Where in the spans the canary is: 'span name: place' for each."""
    found = []
    for span in finished:
        texts = {"name": span.name, "status": span.status.description or ""}
        texts.update({f"attribute {key}": str(value) for key, value in (span.attributes or {}).items()})
        for event in span.events:
            texts[f"event {event.name}"] = event.name
            texts.update({f"event {event.name} {key}": str(value) for key, value in (event.attributes or {}).items()})
        for link in span.links:
            texts.update({f"link {key}": str(value) for key, value in (link.attributes or {}).items()})
        found.extend(f"{span.name}: {place}" for place, text in texts.items() if CANARY in text.lower())
    return found


def logged_lines(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines written meanwhile: structlog's (printed) and the standard library's records (uvicorn, the MCP SDK),
    with their tracebacks; not the test's HTTP client's, which name the URLs it asks for."""
    printed = capsys.readouterr()
    records = [caplog.handler.format(record) for record in caplog.records
               if not record.name.startswith(("httpx", "httpcore"))]
    return [*printed.out.splitlines(), *printed.err.splitlines(), *records]


def with_canary(lines: Sequence[str]) -> list[str]:
    return [line for line in lines if CANARY in line.lower()]


def drive_every_endpoint(client: httpx.Client) -> set[tuple[str, str]]:
    """Each endpoint of the document called with the canary wherever it takes free text; the (method, route) pairs
    called."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    tenant = {"tenant": TENANT}
    called: set[tuple[str, str]] = set()

    def call(method: str, route: str, path: str, **kwargs: Any) -> httpx.Response:
        response = client.request(method, path, **kwargs)
        assert response.status_code < 500, response.text
        called.add((method, route))
        return response

    question = f"What did the {CANARY} do at the river park?"
    answered = call("POST", "/v1/query", "/v1/query",
                    json={"tenant": TENANT, "conversation_id": CONVERSATION, "question": question})
    assert answered.status_code == 200 and answered.json()["evidence"], answered.text
    # The same words refused (a control character) and asked of a conversation without memory.
    assert call("POST", "/v1/query", "/v1/query", json={"tenant": TENANT, "conversation_id": CONVERSATION,
                                                        "question": f"{question}\x01"}).status_code == 422
    assert call("POST", "/v1/query", "/v1/query", json={"tenant": TENANT, "conversation_id": "canary-none",
                                                        "question": question}).status_code == 404
    turn = canary_turns(TENANT, "canary-posted")[0]
    assert call("POST", "/v1/turns", "/v1/turns", json=turn.model_dump(mode="json")).status_code == 202
    listed = call("GET", "/v1/conversations", "/v1/conversations", params={**tenant, "q": CANARY})
    assert listed.status_code == 200 and listed.json()["conversations"], listed.text
    call("GET", "/v1/conversations", "/v1/conversations", params={**tenant, "q": f"{CANARY} river", "limit": 1})
    events = call("GET", "/v1/conversations/{conversation_id}/events", f"/v1/conversations/{CONVERSATION}/events",
                  params=tenant)
    call("GET", "/v1/events/{event_id}", f"/v1/events/{events.json()['events'][0]['id']}", params=tenant)
    call("GET", "/v1/conversations/{conversation_id}/graph", f"/v1/conversations/{CONVERSATION}/graph",
         params=tenant)
    call("GET", "/v1/conversations/{conversation_id}/graph", f"/v1/conversations/{CONVERSATION}/graph",
         params={**tenant, "unclustered": "true", "event": events.json()["events"][0]["id"]})
    call("GET", "/v1/conversations/{conversation_id}/overview", f"/v1/conversations/{CONVERSATION}/overview",
         params={**tenant, "types": ["causal", "temporal"], "min_confidence": 0.5})
    call("GET", "/v1/health/memory", "/v1/health/memory", params={**tenant, "conversation": CONVERSATION})
    call("GET", "/v1/conversations/{conversation_id}/live", f"/v1/conversations/{CONVERSATION}/live",
         params=tenant)
    assert call("DELETE", "/v1/conversations/{conversation_id}/turns/{turn_id}",
                f"/v1/conversations/{CONVERSATION}/turns/t2", params=tenant).status_code == 200
    assert call("DELETE", "/v1/conversations/{conversation_id}", f"/v1/conversations/{FORGOTTEN}",
                params=tenant).status_code == 200
    call("GET", "/v1/config", "/v1/config", headers=admin)
    assert call("PUT", "/v1/config/{key}", "/v1/config/ranking.fitted", headers=admin,
                json={"value": CANARY}).status_code == 422
    assert call("DELETE", "/v1/tenants/{tenant}", f"/v1/tenants/{DOOMED_TENANT}", headers=admin).status_code == 200
    call("GET", "/healthz", "/healthz")
    call("GET", "/metrics", "/metrics")
    return called


def documented_endpoints(client: httpx.Client) -> set[tuple[str, str]]:
    document = client.get("/openapi.json").json()
    return {(method.upper(), path) for path, operations in document["paths"].items() for method in operations}


def test_no_endpoint_puts_user_text_in_a_span_or_a_log_line(memory: Memory, recorded: Recorded,
                                                             spans: TracedSpans, capsys: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for tenant, conversation_id in ((TENANT, CONVERSATION), (TENANT, FORGOTTEN), (DOOMED_TENANT, CONVERSATION)):
        memory.add(canary_turns(tenant, conversation_id))
    services = ApiServices(memory=memory, settings=memory.settings, metrics=MemoryMetrics(process_collectors=False),
                           turn_publisher=recorded)
    with BackgroundServer(create_app(services)) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        called = drive_every_endpoint(client)
        documented = documented_endpoints(client)
    finished = spans.finished()

    assert called == documented, "an endpoint of the document is not driven here: add it to drive_every_endpoint"
    # compassmem's spans alone: FastAPI's own instrumentation (a server span with the URL's query) makes none.
    assert {span.instrumentation_scope.name for span in finished if span.instrumentation_scope} == {"compassmem"}
    served = {span.name for span in finished}
    assert {f"{method} {route}" for method, route in called} <= served
    assert {"query", "ingest.batch", "batch.segment"} <= served
    assert recorded.turns and CANARY in recorded.turns[0].text
    assert not canary_places(finished)
    assert not with_canary(logged_lines(capsys, caplog))


def test_no_mcp_tool_puts_user_text_in_a_span_or_a_log_line(memory: Memory, spans: TracedSpans,
                                                             capsys: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    conversation = "canary-mcp"
    turns = [{"speaker": turn.speaker, "text": turn.text, "turn_id": turn.turn_id,
              "timestamp": turn.timestamp.isoformat()} for turn in canary_turns(TENANT, conversation)]

    async def drive(client: Client) -> set[str]:
        calls = [("remember", {"conversation_id": conversation, "turns": turns, "tenant": TENANT}),
                 ("recall", {"question": f"Where did the {CANARY} swim?", "conversation_id": conversation,
                             "tenant": TENANT}),
                 # The same words where they are refused: no memory there, control characters in a turn.
                 ("recall", {"question": f"Where did the {CANARY} swim?", "conversation_id": "canary-none",
                             "tenant": TENANT}),
                 ("remember", {"conversation_id": conversation, "tenant": TENANT,
                               "turns": [{"speaker": f"\x01{CANARY}", "text": f"{CANARY}\x01"}]}),
                 ("list_conversations", {"tenant": TENANT, "query": CANARY}),
                 ("redact_turn", {"conversation_id": conversation, "turn_id": "t2", "tenant": TENANT}),
                 ("forget", {"conversation_id": conversation, "tenant": TENANT})]
        outcomes: dict[str, list[bool]] = {}
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            outcomes.setdefault(name, []).append(result.is_error)
        assert outcomes == {"remember": [False, True], "recall": [False, True], "list_conversations": [False],
                            "redact_turn": [False], "forget": [False]}, outcomes
        return {tool.name for tool in (await client.list_tools()).tools}

    async def main() -> set[str]:
        with anyio.fail_after(120):
            async with Client(build_server(memory)) as client:
                return await drive(client)

    listed = anyio.run(main)
    finished = spans.finished()

    assert listed == MCP_TOOLS, "a tool is not driven here: add it to drive"
    # compassmem's spans alone: the MCP SDK's own (an exception's message as the status) are not made.
    assert {span.instrumentation_scope.name for span in finished if span.instrumentation_scope} == {"compassmem"}
    assert {"query", "ingest.batch", "batch.store"} <= {span.name for span in finished}
    assert not canary_places(finished)
    assert not with_canary(logged_lines(capsys, caplog))


def test_only_allowed_attributes_leave_whatever_instrumentation_made_the_span(spans: TracedSpans) -> None:
    foreign = spans.provider.get_tracer("some.instrumentation")
    with foreign.start_as_current_span("GET /v1/conversations", attributes={
            "http.request.method": "GET", "url.path": "/v1/conversations", "url.query": f"q={CANARY}",
            "url.full": f"http://api/v1/conversations?q={CANARY}", "http.target": f"/v1/conversations?q={CANARY}",
            "http.url": f"http://api/v1/conversations?q={CANARY}", "http.request.body": CANARY}) as opened:
        opened.add_event("request.read", {"body": CANARY})
        opened.record_exception(ValueError(f"no conversation matches {CANARY!r}"))
        opened.set_status(StatusCode.ERROR, f"no conversation matches {CANARY!r}")
    with pytest.raises(KeyError), tracing.span("query", tenant=TENANT, question_chars=12):
        raise KeyError(CANARY)
    finished = spans.finished()

    assert not canary_places(finished)
    outside = next(span for span in finished if span.name == "GET /v1/conversations")
    assert dict(outside.attributes or {}) == {"http.request.method": "GET", "url.path": "/v1/conversations"}
    assert not outside.events
    assert outside.status.status_code == StatusCode.ERROR and outside.status.description is None
    own = next(span for span in finished if span.name == "query")
    assert dict(own.attributes or {}) == {"compassmem.tenant": TENANT, "compassmem.question_chars": 12,
                                          "error.type": "KeyError"}
    assert own.status.status_code == StatusCode.ERROR and own.status.description is None


def test_every_attribute_that_may_leave_is_named_in_the_guide() -> None:
    guide = (Path(__file__).resolve().parent.parent / "docs" / "traces.md").read_text()
    named = set(re.findall(r"`([a-z_.]+)`", guide))
    assert {name.removeprefix("compassmem.") for name in tracing.ALLOWED_ATTRIBUTES} <= named


# uvicorn's access lines as `compassmem api` writes them (run_api: its LOGGING_CONFIG through
# library_logging_config), in both log formats, in a child process: logging is configured once per process.
_ACCESS_LINES = textwrap.dedent("""
    import socket, sys, threading, time

    import httpx, uvicorn
    from fastapi import FastAPI
    from uvicorn.config import LOGGING_CONFIG

    from compassmem.core.logging_setup import configure_logging, library_logging_config

    configure_logging("INFO", sys.argv[1])
    app = FastAPI()

    @app.get("/v1/conversations")
    def listing(q: str = "") -> dict:
        return {}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="info", log_config=library_logging_config(LOGGING_CONFIG)))
    serving = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    serving.start()
    while not server.started:
        time.sleep(0.01)
    port = sock.getsockname()[1]
    assert httpx.get(f"http://127.0.0.1:{port}/v1/conversations", params={"q": "CANARY river"}).status_code == 200
    server.should_exit = True
    serving.join(10)
""")


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_an_access_line_leaves_the_query_string_out(log_format: str) -> None:
    done = subprocess.run([sys.executable, "-c", _ACCESS_LINES.replace("CANARY", CANARY), log_format],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = (done.stdout + done.stderr).splitlines()
    access = [line for line in lines if "GET /v1/conversations" in line]
    assert len(access) == 1, lines
    assert not with_canary(lines)
    if log_format == "json":
        assert json.loads(access[0])["logger"] == "uvicorn.access"
