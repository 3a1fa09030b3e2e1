"""The query API against a hostile client, over real HTTP: uvicorn on a loopback port, real embedded stores, the
session's Tansu dev broker behind POST /v1/turns.

Every item of the "tried as a hostile user" report has a regression test here: strings the stores cannot hold are
refused with 422 naming the field and the rule, oversized bodies get 413 naming the limit before they are read,
questions are bounded in length, subgoals and time, /metrics hides the conversation ids of key-protected tenants,
the OpenAPI schema states the rules, and (last, since it may write and delete) schemathesis runs over the whole
OpenAPI asserting that no request yields a 5xx. Model-level tests are in tests/test_models_limits.py.
"""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from compassmem.core.config import Settings
from compassmem.core.contracts.query import MAX_QUESTION_CHARS
from compassmem.library.memory import Memory
from compassmem.core.models import MAX_METADATA_BYTES, MAX_METADATA_DEPTH, Turn
from compassmem.monitoring.measured_stores import measure_stores
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.processors.conversation_memory import ConversationHealth
from compassmem.publish.publisher import KafkaTurnPublisher
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.openapi import openapi_document
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.retrieval.decomposition import MAX_SUBGOALS
from compassmem.retrieval.listing import CursorSigner
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.streams.topics import TopicSpec, ensure_topics
from prometheus_text import parse_samples

OPEN, LOCKED, KEY = "limits-open", "limits-locked", "limits-s3cret-0001"
# The server's cursor secret, so that the fuzzer can sign cursors of its own: those reach the check of their key.
CURSOR_SECRET = "limits-cursor-secret"
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
LINES = [("Priya", "The Atlas launch slipped because the client changed the requirements on Friday."),
         ("Tom", "So the data team re-planned the sprint over the weekend."),
         ("Priya", "We moved the launch to April 15 after the requirement change."),
         ("Tom", "I am adopting a beagle puppy called Biscuit next week.")]


def _memory(tenant: str, conversation_id: str) -> list[Turn]:
    return [Turn(tenant=tenant, conversation_id=conversation_id, turn_id=f"L1:{i}", speaker=speaker, text=text,
                 timestamp=T0 + timedelta(minutes=i), session_id="1")
            for i, (speaker, text) in enumerate(LINES, start=1)]


@pytest.fixture(scope="module")
def topics(stream_broker: Any) -> tuple[str, str]:
    name = f"limits-{uuid.uuid4().hex[:8]}"
    turns, control = f"{name}.turns", f"{name}.control"
    ensure_topics(stream_broker.bootstrap, [TopicSpec(turns, 2), TopicSpec(control, 1)])
    return turns, control


@pytest.fixture(scope="module")
def publisher(stream_broker: Any, topics: tuple[str, str]) -> Iterator[KafkaTurnPublisher]:
    made = KafkaTurnPublisher(stream_broker.bootstrap, *topics)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
             publisher: KafkaTurnPublisher, topics: tuple[str, str]) -> Iterator[ApiServices]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("limits-qdrant") / "qdrant", embedder.dim)
    graph = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    stores = Stores(vectors=vectors, graph=graph)
    try:
        settings = Settings(api_port=0, api_keys={LOCKED: KEY}, turns_topic=topics[0], control_topic=topics[1],
                            cursor_secret=CURSOR_SECRET)
        # Written before the API measures the stores, so its metrics count only its own store calls.
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            writer.add([*_memory(OPEN, "c1"), *_memory(LOCKED, "c1")])
        metrics = MemoryMetrics(process_collectors=False)
        yield build_services(settings, measure_stores(stores, metrics), embedder, metrics, turn_publisher=publisher,
                             control_publisher=publisher)
    finally:
        stores.close()


def _serve(services: ApiServices, **settings: Any) -> BackgroundServer:
    changed = replace(services, settings=services.settings.model_copy(update=settings)) if settings else services
    return BackgroundServer(create_app(changed))


@pytest.fixture(scope="module")
def server(services: ApiServices) -> Iterator[BackgroundServer]:
    with _serve(services) as running:
        yield running


@pytest.fixture(scope="module")
def api(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _turn(turn_id: str = "n1", **change: Any) -> dict[str, Any]:
    return {"tenant": OPEN, "conversation_id": "c-new", "turn_id": turn_id, "speaker": "Priya",
            "text": f"turn {turn_id}", "timestamp": "2024-05-01T10:00:00+02:00", "session_id": "1", **change}


def _post_raw(api: httpx.Client, path: str, raw: str) -> httpx.Response:
    """Send JSON text as written (e.g. with "\\ud800" escapes that no encoder would produce)."""
    return api.post(path, content=raw.encode("ascii"), headers={"content-type": "application/json"})


def _errors(response: httpx.Response) -> list[tuple[str, str]]:
    assert response.status_code == 422, response.text
    return [(entry["field"], entry["message"]) for entry in response.json()["detail"]]


# -- strings the stores cannot hold ---------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "field"), [
    ({"text": "hello\u0000world"}, "text"),
    ({"text": "bell\u0007"}, "text"),
    ({"speaker": "Pri\u0000ya"}, "speaker"),
    ({"session_id": "\u0000"}, "session_id"),
    ({"attachments": [{"caption": "a\u0000dog"}]}, "attachments[0].caption"),
    ({"attachments": [{"caption": "dog", "url": "http://x.test/\u0000"}]}, "attachments[0].url"),
    ({"metadata": {"k": "v\u0000"}}, "metadata"),
    ({"metadata": {"k\u0000": 1}}, "metadata"),
])
def test_nul_is_refused_in_every_string_field(api: httpx.Client, change: dict[str, Any], field: str) -> None:
    [(where, message)] = _errors(api.post("/v1/turns", json=_turn(**change)))
    assert where == field and "control characters" in message
    # The same turn inside a list names its index.
    [(where, _)] = _errors(api.post("/v1/turns", json=[_turn("ok"), _turn(**change)]))
    assert where == f"[1].{field}"


@pytest.mark.parametrize(("raw_change", "field"), [
    ('"text": "a\\ud800b"', "text"),
    ('"speaker": "\\udfff"', "speaker"),
    ('"attachments": [{"caption": "x\\ud800"}]', "attachments[0].caption"),
    ('"metadata": {"k": "v\\ud800"}', "metadata"),
    ('"metadata": {"k\\udc00": "v"}', "metadata"),
    ('"\\ud800extra": 1', "body"),  # a key that is no string at all: the object is refused
])
def test_lone_surrogates_are_a_422_never_a_500(api: httpx.Client, raw_change: str, field: str) -> None:
    raw = json.dumps(_turn())[:-1] + ", " + raw_change + "}"
    response = _post_raw(api, "/v1/turns", raw)
    [(where, _)] = _errors(response)
    assert where == field


def test_a_lone_surrogate_in_a_question_is_a_422(api: httpx.Client) -> None:
    raw = json.dumps({"tenant": OPEN, "conversation_id": "c1", "question": "why?"})
    assert _errors(_post_raw(api, "/v1/query", raw.replace("why?", "why\\ud800?")))[0][0] == "question"
    assert _errors(api.post("/v1/query", json={"tenant": OPEN, "conversation_id": "c1",
                                               "question": "why\u0000?"}))[0][0] == "question"


def test_metadata_nesting_size_and_keys_are_bounded(api: httpx.Client) -> None:
    def nested(depth: int) -> str:
        return '{"a":' * (depth - 1) + '{"leaf": 1}' + "}" * (depth - 1)

    deepest = nested(MAX_METADATA_DEPTH)
    ok = _post_raw(api, "/v1/turns", json.dumps(_turn("deep-ok"))[:-1] + f', "metadata": {deepest}}}')
    assert ok.status_code == 202, ok.text
    [(field, message)] = _errors(_post_raw(api, "/v1/turns",
                                           json.dumps(_turn())[:-1] + f', "metadata": {nested(900)}}}'))
    assert field == "metadata" and f"the limit is {MAX_METADATA_DEPTH}" in message
    [(field, message)] = _errors(api.post("/v1/turns", json=_turn(metadata={"blob": "x" * MAX_METADATA_BYTES})))
    assert field == "metadata" and str(MAX_METADATA_BYTES) in message
    [(field, message)] = _errors(api.post("/v1/turns", json=_turn(metadata={f"k{i}": i for i in range(300)})))
    assert field == "metadata" and "256" in message


def test_json_nested_past_the_parsers_recursion_limit_is_a_4xx(api: httpx.Client) -> None:
    response = _post_raw(api, "/v1/turns", "[" * 200_000 + "]" * 200_000)
    assert 400 <= response.status_code < 500, response.text


@pytest.mark.parametrize("timestamp", [1700000000, 1714550400000, 1.7e9, "1714550400"])
def test_numeric_timestamps_are_refused(api: httpx.Client, timestamp: object) -> None:
    [(field, message)] = _errors(api.post("/v1/turns", json=_turn(timestamp=timestamp)))
    assert field == "timestamp" and "ISO 8601" in message


@pytest.mark.parametrize("bad", [" ", ".", ".."])
def test_blank_and_dot_ids_are_refused_in_bodies(api: httpx.Client, bad: str) -> None:
    fields = {f for f, _ in _errors(api.post("/v1/turns", json=_turn(turn_id=bad, conversation_id=bad)))}
    assert fields == {"conversation_id", "turn_id"}
    assert _errors(api.post("/v1/query", json={"conversation_id": bad, "question": "why?"}))[0][0] == \
        "conversation_id"


@pytest.mark.parametrize(("change", "field"), [({"speaker": "Priya\u200b"}, "speaker"),
                                               ({"conversation_id": "c\u202enew"}, "conversation_id"),
                                               ({"session_id": "\u20661"}, "session_id")])
def test_a_name_with_an_invisible_format_character_is_a_422(api: httpx.Client, change: dict[str, Any],
                                                           field: str) -> None:
    [(where, message)] = _errors(api.post("/v1/turns", json=_turn(**change)))
    assert where == field and "invisible format character" in message


def test_ids_in_paths_and_queries_are_read_as_they_are_stored(api: httpx.Client) -> None:
    # "ｃ１" is stored as "c1" (NFKC), so asking for it by either spelling finds the same memory.
    fullwidth = "\uff43\uff11"
    graph = api.get(f"/v1/conversations/{fullwidth}/graph", params={"tenant": OPEN})
    assert graph.status_code == 200 and graph.json()["conversation_id"] == "c1"
    answer = api.post("/v1/query", json={"tenant": OPEN, "conversation_id": fullwidth, "question": "Why?"})
    assert answer.status_code == 200 and {r["conversation_id"] for r in answer.json()["turn_refs"]} == {"c1"}
    [(field, message)] = _errors(api.get("/v1/conversations/c\u200b1/graph", params={"tenant": OPEN}))
    assert field == "conversation_id" and "U+200B" in message


@pytest.mark.parametrize("raw_id", ["%20", ".", "..", "%2E%2E", "%2e"])
def test_blank_and_dot_ids_are_refused_in_paths(server: BackgroundServer, raw_id: str) -> None:
    # http.client sends the path as written: no client-side dot-segment normalisation.
    for method, path in [("GET", f"/v1/conversations/{raw_id}/graph"), ("DELETE", f"/v1/conversations/{raw_id}"),
                         ("GET", f"/v1/events/{raw_id}")]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            body = json.loads(response.read())
        finally:
            connection.close()
        assert response.status == 422, (method, path, body)
        assert [d["field"] for d in body["detail"]] in (["conversation_id"], ["event_id"])


# -- body size ------------------------------------------------------------------------------------------------


def _raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        received = b""
        while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < _length(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head_text, _, payload = received.partition(b"\r\n\r\n")
    lines = head_text.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, payload


def _length(received: bytes) -> int:
    for line in received.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b": ")
        if name.lower() == b"content-length":
            return int(value)
    return 1 << 30


def test_a_declared_200_mb_body_is_refused_before_it_is_read(server: BackgroundServer) -> None:
    head = (b"POST /v1/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000000\r\n\r\n")
    status, headers, payload = _raw_request(server.port, head, b"[" * 1000)  # and not one byte more
    assert status == 413
    assert "4194304" in json.loads(payload)["detail"] and headers.get("connection") == "close"


def test_a_chunked_body_is_counted_and_refused_past_the_limit(services: ApiServices) -> None:
    limit = 64 * 1024
    with _serve(services, api_max_body_bytes=limit) as small, httpx.Client(base_url=small.url, timeout=30) as client:
        def chunks() -> Iterator[bytes]:
            yield b'{"text": "'
            for _ in range(10):
                yield b"x" * 8192

        response = client.post("/v1/turns", content=chunks(), headers={"content-type": "application/json"})
        assert response.status_code == 413 and str(limit) in response.json()["detail"]
        assert "COMPASSMEM_API_MAX_BODY_BYTES" in response.json()["detail"]
        # Under the limit, the body is read and validated as usual.
        fine = client.post("/v1/turns", json=_turn("small-ok"))
        assert fine.status_code == 202, fine.text
        too_long = client.post("/v1/query", content=b" " * (limit + 1), headers={"content-type": "application/json"})
        assert too_long.status_code == 413


def test_a_record_the_producer_refuses_is_a_413_naming_the_limit(api: httpx.Client,
                                                                 publisher: KafkaTurnPublisher) -> None:
    # The schema keeps every turn far below Kafka's 1 MB; a producer configured lower still must not yield a 500.
    config = publisher._producer._producer.config  # noqa: SLF001 - the kafka-python client's own settings
    before = config["max_request_size"]
    config["max_request_size"] = 2000
    try:
        response = api.post("/v1/turns", json=_turn("big", text="x" * 5000))
    finally:
        config["max_request_size"] = before
    assert response.status_code == 413, response.text
    assert "max_request_size" in response.json()["detail"]
    assert api.post("/v1/turns", json=_turn("after-big")).status_code == 202


# -- the Host header: a web page that rebinds its own name to 127.0.0.1 must not reach the API ----------------------


def _get_with_host(port: int, path: str, host: str | None) -> tuple[int, dict[str, Any]]:
    head = f"GET {path} HTTP/1.1\r\n" + (f"Host: {host}\r\n" if host is not None else "") + "Connection: close\r\n\r\n"
    status, _, payload = _raw_request(port, head.encode("latin-1"))
    return status, json.loads(payload)


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LocalHost", "127.0.0.1", "127.0.0.1:1", "[::1]",
                                  "[::1]:8080"])
def test_loopback_host_names_are_served(server: BackgroundServer, host: str) -> None:
    status, body = _get_with_host(server.port, f"/v1/conversations?tenant={OPEN}", host)
    assert status == 200 and body["conversations"], body


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "0.0.0.0", "", None])
def test_any_other_host_name_is_refused_with_the_setting_to_change(server: BackgroundServer, host: str | None) -> None:
    status, body = _get_with_host(server.port, f"/v1/conversations?tenant={OPEN}", host)
    assert status == 400 and "conversations" not in body
    assert "COMPASSMEM_API_ALLOWED_HOSTS" in body["detail"] and "DNS rebinding" in body["detail"]


def test_allowed_hosts_names_more_and_a_star_admits_any(services: ApiServices) -> None:
    with _serve(services, api_allowed_hosts=["memory.internal"]) as listed:
        assert _get_with_host(listed.port, "/healthz", "memory.internal:8080")[0] == 200
        assert _get_with_host(listed.port, "/healthz", "localhost")[0] == 200
        assert _get_with_host(listed.port, "/healthz", "evil.example")[0] == 400
    with _serve(services, api_allowed_hosts=["*"]) as anything:
        assert _get_with_host(anything.port, "/healthz", "evil.example")[0] == 200


# -- query cost -----------------------------------------------------------------------------------------------


def test_a_long_question_is_a_422_naming_the_limit(api: httpx.Client) -> None:
    question = "Why did the launch slip? " * 60
    [(field, message)] = _errors(api.post("/v1/query", json={"tenant": OPEN, "conversation_id": "c1",
                                                             "question": question}))
    assert field == "question" and str(MAX_QUESTION_CHARS) in message


def test_a_question_of_many_conjunctions_gets_at_most_the_subgoal_cap(api: httpx.Client) -> None:
    question = ("What did Priya say about the launch and what did Tom say about the sprint "
                "and when did Atlas ship and why did the client change the requirements " * 5)[:MAX_QUESTION_CHARS]
    response = api.post("/v1/query", json={"tenant": OPEN, "conversation_id": "c1", "question": question})
    assert response.status_code == 200, response.text
    assert 1 < len(response.json()["subgoals"]) <= MAX_SUBGOALS


def test_a_query_past_its_deadline_is_a_503(services: ApiServices) -> None:
    before = parse_samples(_metrics_text(services))
    with _serve(services, api_query_deadline_s=1e-9) as hurried, \
            httpx.Client(base_url=hurried.url, timeout=30) as client:
        response = client.post("/v1/query", json={"tenant": OPEN, "conversation_id": "c1",
                                                  "question": "Why did the Atlas launch slip?"})
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "1"
        assert "COMPASSMEM_API_QUERY_DEADLINE_S" in response.json()["detail"]
    after = parse_samples(_metrics_text(services))
    key = ("compassmem_queries_total", frozenset({("outcome", "error")}))
    assert after[key] == before[key] + 1


def _metrics_text(services: ApiServices) -> str:
    from prometheus_client import generate_latest

    return generate_latest(services.metrics.registry).decode()


# -- /metrics and key-protected tenants -----------------------------------------------------------------------


def test_metrics_never_show_a_protected_tenants_conversation_ids(api: httpx.Client, services: ApiServices) -> None:
    services.metrics.conversations_changed({f"{LOCKED}/secret-board-meeting": ConversationHealth(events=2, relations=1),
                                            f"{OPEN}/open-chat": ConversationHealth(events=2, relations=1)})
    text = api.get("/metrics").text
    assert "secret-board-meeting" not in text and LOCKED not in text
    labels = {dict(labels).get("conversation") for (name, labels) in parse_samples(text)
              if name == "compassmem_conversation_average_degree"}
    assert f"{OPEN}/open-chat" in labels
    hidden = {label for label in labels if label and label.startswith("hidden-")}
    assert len(hidden) == 1
    # Stable: the same key and conversation give the same label in any process with the same keys.
    assert MemoryMetrics(process_collectors=False, api_keys={LOCKED: KEY}).conversation_label(
        f"{LOCKED}/secret-board-meeting") in hidden
    services.metrics.conversations_changed({f"{LOCKED}/secret-board-meeting": None, f"{OPEN}/open-chat": None})


def test_series_made_before_the_keys_were_known_are_relabelled() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    metrics.conversations_changed({f"{LOCKED}/early": ConversationHealth(events=4, relations=4)})
    metrics.protect_tenants({LOCKED: KEY})
    labels = {dict(labels)["conversation"] for (name, labels) in parse_samples(_text(metrics))
              if name == "compassmem_conversation_average_degree"}
    assert len(labels) == 1 and next(iter(labels)).startswith("hidden-")
    metrics.conversations_changed({f"{LOCKED}/early": None})
    assert not [n for (n, _) in parse_samples(_text(metrics)) if n == "compassmem_conversation_average_degree"]


def _text(metrics: MemoryMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


# -- the OpenAPI schema states the rules ----------------------------------------------------------------------


def test_openapi_states_the_id_and_text_rules(api: httpx.Client) -> None:
    spec = api.get("/openapi.json").json()
    turn = spec["components"]["schemas"]["Turn"]["properties"]
    for name in ("conversation_id", "turn_id"):
        assert {"pattern", "minLength", "maxLength", "description"} <= set(turn[name])
    assert {"pattern", "minLength", "maxLength", "description"} <= set(turn["text"])
    assert turn["timestamp"]["type"] == "string" and turn["timestamp"]["format"] == "date-time"
    for path, name in [("/v1/conversations/{conversation_id}/graph", "conversation_id"),
                       ("/v1/events/{event_id}", "event_id")]:
        method = "get"
        [param] = [p for p in spec["paths"][path][method]["parameters"] if p["name"] == name]
        assert {"pattern", "minLength", "maxLength"} <= set(param["schema"]) and param["description"]
    query = spec["components"]["schemas"]["QueryRequest"]["properties"]
    assert query["question"]["maxLength"] == MAX_QUESTION_CHARS
    assert "413" in spec["paths"]["/v1/turns"]["post"]["responses"]
    assert "503" in spec["paths"]["/v1/query"]["post"]["responses"]


# -- schemathesis over the whole OpenAPI: no request may yield a 5xx (last: it writes and deletes) ---------------

try:
    import schemathesis
    from hypothesis import strategies as st
except ImportError:  # the test extra installs it
    schemathesis = None

_STATUSES: Counter[tuple[str, int]] = Counter()
EXAMPLES_PER_OPERATION = 40


@pytest.fixture(scope="module")
def status_counts() -> Iterator[Counter[tuple[str, int]]]:
    yield _STATUSES
    lines = [f"  {label} -> {code}: {count}" for (label, code), count in sorted(_STATUSES.items())]
    print(f"\nschemathesis: {sum(_STATUSES.values())} requests, "
          f"{sum(c for (_, code), c in _STATUSES.items() if code >= 500)} with a 5xx\n" + "\n".join(lines))


if schemathesis is None:
    def test_no_request_yields_a_server_error() -> None:
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
else:
    # Built at import time: schemathesis parametrizes from a schema at collection (its fixture-based lazy loader
    # does not work with pytest 9).
    openapi_schema = schemathesis.openapi.from_dict(openapi_document())
    openapi_schema.config.generation.update(
        modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
        max_examples=EXAMPLES_PER_OPERATION, deterministic=True)

    _LISTINGS = {"/v1/conversations", "/v1/conversations/{conversation_id}/events"}
    _JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                     max_size=3), max_leaves=6)
    # What a client could send as a cursor: keys of any JSON shape under real-looking listing names, signed with the
    # server's own secret (so that they pass the signature and reach the check of the key), unsigned as cursors
    # were before, or with a signature of another secret.
    _LISTING_NAMES = st.sampled_from([f"conversations:{OPEN}:recent:", f"conversations:{OPEN}:id:",
                                      f"events:{OPEN}/c1", "events:c1", "conversations:recent:"]) | st.text(max_size=20)
    _KEYS = st.tuples(_LISTING_NAMES, st.lists(_JSON, max_size=4).map(tuple))
    _CURSORS = st.one_of(
        _KEYS.map(lambda made: CursorSigner(CURSOR_SECRET).encode(*made)),
        _KEYS.map(lambda made: CursorSigner("another-deployment-secret").encode(*made)),
        _KEYS.map(lambda made: CursorSigner(CURSOR_SECRET).encode(*made).partition(".")[0]),
    )

    @openapi_schema.hook
    def flatmap_query(context: Any, query: dict[str, Any] | None) -> Any:
        """The listings' cursor parameter gets made-up cursors as often as schemathesis's own strings."""
        if context.operation is None or context.operation.path not in _LISTINGS:
            return st.just(query)
        return st.one_of(st.just(query), _CURSORS.map(lambda cursor: {**(query or {}), "cursor": cursor}))

    @openapi_schema.parametrize()
    def test_no_request_yields_a_server_error(case: Any, server: BackgroundServer,
                                              status_counts: Counter[tuple[str, int]]) -> None:
        response = case.call(base_url=server.url, timeout=60)
        cursor = " with a cursor" if isinstance(case.query, dict) and "cursor" in case.query else ""
        status_counts[(case.operation.label + cursor, response.status_code)] += 1
        assert response.status_code < 500, f"{case.operation.label} -> {response.status_code}: {response.text[:500]}"
        if case.operation.label == "POST /v1/turns" and response.status_code == 202:
            # What was accepted must be storable: no U+0000 (FalkorDB refuses it), all of it encodable as UTF-8.
            sent = json.dumps(case.body, ensure_ascii=False)
            assert "\x00" not in sent, sent[:500]
            sent.encode("utf-8")
