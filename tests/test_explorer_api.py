"""The explorer's endpoints over real HTTP: conversation and event listings (cursor pages, search, open segments),
the graph within server-side limits, the live stream fed by a real change-feed topic, the API key, the page's files.

Memory is built with ``Memory.add`` (the in-process pipeline) into the embedded stores; the change feed is the
session's Tansu broker, written to as the worker writes it (``compassmem/core/contracts/stream_records.py`` records).
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka import KafkaProducer
from pydantic import SecretStr

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import ForgetCommand, RedactCommand
from compassmem.library.memory import Memory
from compassmem.core.models import Event, Relation, RelationType, Turn, relation_id_for
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.batching import event_keyword_vector
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.core.contracts.stream_records import ChangeOp, EventChange, RelationChange
from compassmem.streams.topics import TopicSpec, ensure_topics

TENANT, LOCKED, KEY = "explorer", "explorer-locked", "open-sesame-explorer"
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
UI = Path(__file__).resolve().parent.parent / "compassmem" / "query_api" / "ui"
TOPICS = [
    [("Ann", "The Atlas launch slipped because the client changed the requirements."),
     ("Bob", "So the team re-planned the sprint over the weekend.")],
    [("Ann", "I adopted a beagle puppy called Biscuit last Saturday."),
     ("Bob", "Biscuit is a lovely name for a beagle.")],
    [("Ann", "We finally launched Atlas on April 15 after the delay."),
     ("Bob", "Great, the client liked the new invoices.")],
]


def _conversation(tenant: str, conversation_id: str, days: int, speakers: tuple[str, str] = ("Ann", "Bob"),
                  subject_id: str | None = None) -> list[Turn]:
    """Three sessions of two turns each, ``days`` apart: three events with relations between them."""
    turns = []
    for session, pairs in enumerate(TOPICS, start=1):
        for index, (speaker, text) in enumerate(pairs, start=1):
            name = speakers[0] if speaker == "Ann" else speakers[1]
            turns.append(Turn(tenant=tenant, conversation_id=conversation_id, turn_id=f"D{session}:{index}",
                              speaker=name, text=text.replace("Ann", name),
                              timestamp=T0 + timedelta(days=days * session, minutes=index),
                              session_id=str(session), subject_id=subject_id))
    return turns


# conv-a is updated last, conv-e first; conv-c is about subject cust-9 and between Zoe and Yann.
CONVERSATIONS = {f"conv-{c}": 5 - i for i, c in enumerate("abcde")}


@pytest.fixture(scope="module")
def feed_topics(stream_broker: Any) -> dict[str, str]:
    name = f"explorer-{uuid.uuid4().hex[:8]}"
    topics = {kind: f"{name}.{kind}" for kind in ("events", "relations", "clusters", "control")}
    ensure_topics(stream_broker.bootstrap, [TopicSpec(topic, 1 if kind == "control" else 2)
                                            for kind, topic in topics.items()])
    return topics


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any, stream_broker: Any,
             feed_topics: dict[str, str]) -> Iterator[ApiServices]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("explorer-qdrant") / "qdrant", embedder.dim)
    stores = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    turns = [t for conversation_id, days in CONVERSATIONS.items()
             for t in _conversation(TENANT, conversation_id, days,
                                    ("Zoe", "Yann") if conversation_id == "conv-c" else ("Ann", "Bob"),
                                    "cust-9" if conversation_id == "conv-c" else None)]
    try:
        settings = Settings(api_port=0, api_keys={LOCKED: KEY}, kafka_bootstrap=stream_broker.bootstrap,
                            events_topic=feed_topics["events"], relations_topic=feed_topics["relations"],
                            clusters_topic=feed_topics["clusters"], control_topic=feed_topics["control"])
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            writer.add([*turns, *_conversation(LOCKED, "secret", 1)])
        yield build_services(settings, stores, embedder, MemoryMetrics(process_collectors=False))
    finally:
        stores.close()


@pytest.fixture(scope="module")
def api(services: ApiServices) -> Iterator[httpx.Client]:
    with BackgroundServer(create_app(services)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _get(api: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    response = api.get(path, params={"tenant": TENANT, **params})
    assert response.status_code == 200, response.text
    return response.json()


def _problems(response: httpx.Response) -> list[tuple[str, str]]:
    assert response.status_code == 422, response.text
    return [(d["field"], d["message"]) for d in response.json()["detail"]]


# -- conversations --------------------------------------------------------------------------------------------


def test_conversations_are_listed_most_recent_first_with_their_counts(api: httpx.Client,
                                                                      services: ApiServices) -> None:
    page = _get(api, "/v1/conversations")
    assert [c["conversation_id"] for c in page["conversations"]] == list(CONVERSATIONS)
    assert page["total"] == len(CONVERSATIONS) and page["next_cursor"] is None
    for summary in page["conversations"]:
        graph = services.memory.stores.graph.conversation_graph(TENANT, summary["conversation_id"])
        events = [d for _, d in graph.nodes(data=True) if d["kind"] == "event" and not d["stub"]]
        assert summary["events"] == len(events) >= 2
        assert summary["turns"] == 6 and summary["provisional_events"] == 0
        assert summary["last_at"] == max(d["end"] for d in events).isoformat().replace("+00:00", "Z")
    assert page["conversations"][2]["participants"] == ["Yann", "Zoe"]
    assert page["conversations"][2]["subject_ids"] == ["cust-9"]
    assert [c["conversation_id"] for c in _get(api, "/v1/conversations", order="id")["conversations"]] == \
        sorted(CONVERSATIONS)


@pytest.mark.parametrize("order", ["recent", "id"])
def test_cursor_pages_cover_every_conversation_once(api: httpx.Client, order: str) -> None:
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = _get(api, "/v1/conversations", limit=2, order=order, **({"cursor": cursor} if cursor else {}))
        assert len(page["conversations"]) <= 2 and page["total"] == len(CONVERSATIONS)
        seen += [c["conversation_id"] for c in page["conversations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [c["conversation_id"] for c in _get(api, "/v1/conversations", order=order)["conversations"]]


def test_search_matches_ids_subjects_participants_and_summaries(api: httpx.Client) -> None:
    def found(q: str) -> list[str]:
        return [c["conversation_id"] for c in _get(api, "/v1/conversations", q=q, order="id")["conversations"]]

    assert found("CONV-B") == ["conv-b"]
    assert found("cust-9") == ["conv-c"]
    assert found("yann") == ["conv-c"]
    assert found("biscuit") == sorted(CONVERSATIONS)  # every conversation's summaries name the beagle
    assert found("no such words anywhere") == []


def test_listing_parameters_are_checked_and_named(api: httpx.Client) -> None:
    assert _problems(api.get("/v1/conversations", params={"limit": 0}))[0][0] == "limit"
    assert _problems(api.get("/v1/conversations", params={"limit": 201}))[0][0] == "limit"
    assert _problems(api.get("/v1/conversations", params={"q": "x" * 201}))[0][0] == "q"
    [(field, message)] = _problems(api.get("/v1/conversations", params={"q": "bad\x01"}))
    assert field == "q" and "control characters" in message
    [(field, message)] = _problems(api.get("/v1/conversations", params={"cursor": "not-a-cursor"}))
    assert field == "cursor" and "next_cursor" in message
    # A cursor of another listing (another order or search) is refused, not misread.
    cursor = _get(api, "/v1/conversations", limit=1, order="id")["next_cursor"]
    assert _problems(api.get("/v1/conversations", params={"tenant": TENANT, "cursor": cursor}))[0][0] == "cursor"
    assert _problems(api.get("/v1/conversations", params={"order": "size"}))[0][0] == "order"


def _unsigned(payload: dict[str, Any]) -> str:
    """A cursor as the API made them before they were signed: base64 of JSON, which anyone can write."""
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


@pytest.mark.parametrize(("path", "params", "payload"), [
    ("/v1/conversations", {"order": "recent"}, {"v": 1, "l": "conversations:recent:", "k": ["a", "b"]}),
    ("/v1/conversations", {"order": "id"}, {"v": 1, "l": "conversations:id:", "k": [None]}),
    ("/v1/conversations/conv-a/events", {}, {"v": 1, "l": "events:conv-a", "k": [1.0, "a", "b"]}),
    ("/v1/conversations/conv-a/events", {}, {"v": 1, "l": "events:conv-a", "k": [{"a`b": 1}, "x"]}),
])
def test_a_forged_cursor_is_a_422_naming_cursor(api: httpx.Client, path: str, params: dict[str, str],
                                                payload: dict[str, Any]) -> None:
    [(field, message)] = _problems(api.get(path, params={"tenant": TENANT, **params, "cursor": _unsigned(payload)}))
    assert field == "cursor" and "next_cursor" in message


def test_a_cursor_changed_by_the_client_is_refused(api: httpx.Client) -> None:
    cursor = _get(api, "/v1/conversations", limit=1, order="id")["next_cursor"]
    payload, _, signature = cursor.partition(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    changed = _unsigned({**data, "k": ["conv-d"]}) + "." + signature
    assert _problems(api.get("/v1/conversations", params={"tenant": TENANT, "order": "id", "cursor": changed})) \
        [0][0] == "cursor"


def test_a_cursor_is_good_wherever_the_cursor_secret_is_the_same(services: ApiServices, embedder: Any) -> None:
    def serving(secret: str) -> BackgroundServer:
        settings = services.settings.model_copy(update={"cursor_secret": SecretStr(secret)})
        return BackgroundServer(create_app(build_services(settings, services.memory.stores, embedder,
                                                          MemoryMetrics(process_collectors=False))))

    params = {"tenant": TENANT, "limit": 2}
    with serving("first-replica-secret") as one, serving("first-replica-secret") as replica, \
            serving("another-deployment") as other:
        cursor = httpx.get(f"{one.url}/v1/conversations", params=params, timeout=30).json()["next_cursor"]
        assert httpx.get(f"{replica.url}/v1/conversations", params={**params, "cursor": cursor},
                         timeout=30).status_code == 200
        [(field, message)] = _problems(httpx.get(f"{other.url}/v1/conversations",
                                                 params={**params, "cursor": cursor}, timeout=30))
        assert field == "cursor" and "COMPASSMEM_CURSOR_SECRET" in message


# -- events and the graph ---------------------------------------------------------------------------------------


def test_event_pages_follow_time_order(api: httpx.Client) -> None:
    graph = _get(api, "/v1/conversations/conv-a/graph")
    expected = sorted((n for n in graph["nodes"] if n["kind"] == "event"), key=lambda n: (n["start"], n["id"]))
    seen, cursor = [], None
    while True:
        page = _get(api, "/v1/conversations/conv-a/events", limit=1, **({"cursor": cursor} if cursor else {}))
        seen += page["events"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [e["id"] for e in seen] == [n["id"] for n in expected]
    assert all(e["summary"] and e["turn_ids"] for e in seen)
    missing = api.get("/v1/conversations/conv-zzz/events", params={"tenant": TENANT})
    assert missing.status_code == 404 and "conv-zzz" in missing.json()["detail"]


def test_graph_limits_keep_the_most_recent_events_and_their_relations(api: httpx.Client) -> None:
    full = _get(api, "/v1/conversations/conv-a/graph")
    events = sorted((n for n in full["nodes"] if n["kind"] == "event"), key=lambda n: n["start"])
    assert full["limits"] == {"max_nodes": None, "since": None, "events_total": len(events), "events_omitted": 0}
    limited = _get(api, "/v1/conversations/conv-a/graph", max_nodes=2)
    kept = {n["id"] for n in limited["nodes"] if n["kind"] == "event"}
    assert kept == {n["id"] for n in events[-2:]}
    assert limited["limits"]["events_omitted"] == len(events) - 2 and limited["counts"]["events"] == 2
    assert limited["edges"] and all(e["source"] in kept and e["target"] in kept for e in limited["edges"])
    assert {e["id"] for e in limited["edges"]} == {e["id"] for e in full["edges"]
                                                   if e["source"] in kept and e["target"] in kept}
    since = events[-1]["start"]
    recent = _get(api, "/v1/conversations/conv-a/graph", since=since)
    assert {n["id"] for n in recent["nodes"] if n["kind"] == "event"} == {events[-1]["id"]}
    far = _get(api, "/v1/conversations/conv-a/graph", since="2999-01-01T00:00:00+00:00")
    assert far["nodes"] == [] and far["limits"]["events_omitted"] == len(events)


def test_graph_limits_are_checked_and_named(api: httpx.Client) -> None:
    assert _problems(api.get("/v1/conversations/conv-a/graph", params={"max_nodes": 0}))[0][0] == "max_nodes"
    assert _problems(api.get("/v1/conversations/conv-a/graph", params={"max_nodes": 5001}))[0][0] == "max_nodes"
    [(field, message)] = _problems(api.get("/v1/conversations/conv-a/graph", params={"since": "2024-03-01T00:00"}))
    assert field == "since" and "timezone" in message
    assert api.get("/v1/conversations/conv-zzz/graph", params={"tenant": TENANT}).status_code == 404


def test_an_open_segment_shows_as_a_provisional_event_everywhere(api: httpx.Client, services: ApiServices,
                                                                 embedder: Any) -> None:
    turns = _conversation(TENANT, "conv-open", 1)[:2]
    vectors = embedder.embed([t.text for t in turns])
    event = _open_event(turns, vectors)
    services.memory.stores.vectors.upsert_events([event], [event_keyword_vector(event)])
    try:
        [summary] = _get(api, "/v1/conversations", q="conv-open")["conversations"]
        assert (summary["events"], summary["provisional_events"], summary["turns"]) == (1, 1, 2)
        [listed] = _get(api, "/v1/conversations/conv-open/events")["events"]
        assert listed["id"] == event.event_id and listed["provisional"] and listed["turn_ids"] == ["D1:1", "D1:2"]
        graph = _get(api, "/v1/conversations/conv-open/graph")
        assert graph["counts"]["events"] == 1 and graph["nodes"][0]["provisional"]
        # An open segment on top of closed events: counted with them, last in time.
        later = _open_event([t.model_copy(update={"conversation_id": "conv-a", "turn_id": f"X{i}",
                                                  "timestamp": T0 + timedelta(days=40, minutes=i)})
                             for i, t in enumerate(turns)], vectors)
        services.memory.stores.vectors.upsert_events([later], [event_keyword_vector(later)])
        graph = _get(api, "/v1/conversations/conv-a/graph")
        assert graph["limits"]["events_total"] == graph["counts"]["events"] and \
            [n["id"] for n in graph["nodes"] if n["provisional"]] == [later.event_id]
        assert _get(api, "/v1/conversations/conv-a/graph", max_nodes=1)["nodes"][0]["id"] == later.event_id
        assert _get(api, "/v1/conversations/conv-a/events", limit=50)["events"][-1]["id"] == later.event_id
        services.memory.stores.vectors.delete_events(TENANT, [later.event_id])
    finally:
        services.memory.stores.vectors.delete_conversation(TENANT, "conv-open")


def _open_event(turns: list[Turn], vectors: Any) -> Event:
    from compassmem.core.models import Observation, TemporalInfo, event_id_for

    return Event(tenant=turns[0].tenant, conversation_id=turns[0].conversation_id,
                 event_id=event_id_for(turns[0].tenant, turns[0].conversation_id, turns[0].turn_id),
                 observations=[Observation(turn_id=t.turn_id, speaker=t.speaker, text=t.text, timestamp=t.timestamp,
                                           session_id=t.session_id) for t in turns],
                 summary=f"{turns[0].speaker}: {turns[0].text}", participants=sorted({t.speaker for t in turns}),
                 temporal_info=TemporalInfo(start=turns[0].timestamp, end=turns[-1].timestamp),
                 embedding=[float(x) for x in vectors[0]], provisional=True)


# -- API keys -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/conversations", "/v1/conversations/secret/events",
                                  "/v1/conversations/secret/graph", "/v1/conversations/secret/live"])
def test_a_tenant_with_a_key_needs_it_on_every_explorer_endpoint(api: httpx.Client, path: str) -> None:
    params = {"tenant": LOCKED}
    assert api.get(path, params=params).status_code == 401
    assert api.get(path, params=params, headers={"Authorization": "Bearer wrong"}).status_code == 403
    if not path.endswith("/live"):
        assert api.get(path, params=params, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


# -- live -------------------------------------------------------------------------------------------------------------


class _Stream:
    """Reads server-sent events on a thread, so the test can write changes while it listens."""

    def __init__(self, api: httpx.Client, conversation_id: str, last_id: str | None = None,
                 tenant: str = TENANT) -> None:
        self._tenant = tenant
        self.events: list[dict[str, Any]] = []
        # A client of its own, closed by close(): an open stream would hold the server's shutdown.
        self._api = httpx.Client(base_url=api.base_url, timeout=30)
        self._headers = {"Last-Event-ID": last_id} if last_id else {}
        self._path = f"/v1/conversations/{conversation_id}/live"
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self._api.stream("GET", self._path, params={"tenant": self._tenant},
                                  headers=self._headers) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                message: dict[str, Any] = {}
                for line in response.iter_lines():
                    if not line:
                        if message:
                            self.events.append(message)
                        message = {}
                        continue
                    field, _, value = line.partition(": ")
                    message[field] = json.loads(value) if field == "data" else value
        except (httpx.TransportError, RuntimeError):
            return  # closed by close()

    def close(self) -> None:
        self._api.close()
        self._thread.join(5)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.events) >= count, f"got {self.events}"
        return self.events


def _publish(bootstrap: str, topic: str, records: list[Any]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for record in records:
            producer.send(topic, record.model_dump_json().encode())
        producer.flush()
    finally:
        producer.close()


def test_live_streams_the_conversations_changes_and_resumes_from_the_last_one(
        api: httpx.Client, services: ApiServices, stream_broker: Any, feed_topics: dict[str, str]) -> None:
    [event] = services.memory.stores.vectors.conversation_events(TENANT, "conv-b")[:1]
    stream = _Stream(api, "conv-b")
    [ready] = stream.wait_for(1)
    assert ready["event"] == "ready" and ready["data"]["ends_after_s"] > 0 and ready["id"]
    updated = event.model_copy(update={"summary": "A live update", "version": event.version + 1, "embedding": None})
    other = updated.model_copy(update={"conversation_id": "conv-d"})
    relation = Relation(tenant=TENANT, conversation_id="conv-b", source=event.event_id, target="elsewhere",
                        relation_id=relation_id_for(event.event_id, "elsewhere", RelationType.CAUSAL, None),
                        type=RelationType.CAUSAL, confidence=0.7, evidence="because of it", created_at=T0)
    _publish(stream_broker.bootstrap, feed_topics["events"], [
        EventChange(op=ChangeOp.UPSERT, tenant=TENANT, conversation_id="conv-d", event_id=other.event_id, event=other),
        EventChange(op=ChangeOp.UPSERT, tenant=TENANT, conversation_id="conv-b", event_id=event.event_id,
                    event=updated)])
    _publish(stream_broker.bootstrap, feed_topics["relations"], [RelationChange(relation=relation)])
    ready, first, second = stream.wait_for(3)[:3]
    changes = {c["data"]["node"]["summary"] if c["data"]["node"] else c["data"]["edge"]["evidence"]
               for c in (first, second)}
    assert changes == {"A live update", "because of it"}, "conv-d's change must not reach a conv-b stream"
    assert all(c["event"] == "change" and c["data"]["op"] == "upsert" for c in (first, second))
    # A reconnect with the id of the first change gets the second again, and no ready id of its own.
    resumed = _Stream(api, "conv-b", last_id=first["id"])
    ready_again, replayed = resumed.wait_for(2)[:2]
    assert ready_again["event"] == "ready" and "id" not in ready_again
    assert (replayed["id"], replayed["data"]) == (second["id"], second["data"])
    # An id this process never gave out: the page must reload the graph.
    stale = _Stream(api, "conv-b", last_id="0000-12")
    assert [e["event"] for e in stale.wait_for(2)] == ["ready", "resync"]
    for opened in (stream, resumed, stale):
        opened.close()


# A name only the redacted turn says, put into a change's summary as the worker would before the redaction.
REDACTED_WORD = "Zembla"
PURGED = "the conversation was redacted or forgotten"


def _buffered_secret(api: httpx.Client, services: ApiServices, stream_broker: Any, feed_topics: dict[str, str],
                     tenant: str, conversation_id: str) -> tuple[_Stream, str, str]:
    """A conversation of its own with a stream open on it and one change in the feed's buffer that quotes
    REDACTED_WORD; returns the stream, its ready id and the change's id."""
    services.memory.add(_conversation(tenant, conversation_id, 1))
    [event] = services.memory.stores.vectors.conversation_events(tenant, conversation_id)[:1]
    stream = _Stream(api, conversation_id, tenant=tenant)
    [ready] = stream.wait_for(1)
    said = event.model_copy(update={"summary": f"Ann went to {REDACTED_WORD}", "version": event.version + 1,
                                    "embedding": None})
    _publish(stream_broker.bootstrap, feed_topics["events"], [
        EventChange(op=ChangeOp.UPSERT, tenant=tenant, conversation_id=conversation_id, event_id=event.event_id,
                    event=said)])
    change = stream.wait_for(2)[1]
    assert REDACTED_WORD in change["data"]["node"]["summary"]
    return stream, ready["id"], change["id"]


def _replayed(api: httpx.Client, tenant: str, conversation_id: str, last_id: str) -> list[dict[str, Any]]:
    """What a stream resumed from ``last_id`` sends (it ends after a resync)."""
    resumed = _Stream(api, conversation_id, last_id=last_id, tenant=tenant)
    try:
        return resumed.wait_for(2)
    finally:
        resumed.close()


def test_a_redaction_over_http_purges_the_conversations_buffered_changes(
        api: httpx.Client, services: ApiServices, stream_broker: Any, feed_topics: dict[str, str]) -> None:
    tenant = "explorer-redact"
    stream, ready_id, change_id = _buffered_secret(api, services, stream_broker, feed_topics, tenant, "conv-r")
    redacted = api.delete("/v1/conversations/conv-r/turns/D1:1", params={"tenant": tenant})
    assert redacted.status_code == 200, redacted.text
    # The open stream is told to reload the graph; its changes from before are not replayed to anyone.
    assert stream.wait_for(3)[2]["event"] == "resync"
    for last_id in (ready_id, change_id):
        events = _replayed(api, tenant, "conv-r", last_id)
        assert [e["event"] for e in events] == ["ready", "resync"] and PURGED in events[1]["data"]["reason"]
        assert REDACTED_WORD not in json.dumps(events)
    stream.close()


@pytest.mark.parametrize("command", ["redact", "forget", "forget-tenant"])
def test_a_command_on_the_control_topic_purges_the_buffer_of_every_api_process(
        api: httpx.Client, services: ApiServices, stream_broker: Any, feed_topics: dict[str, str],
        command: str) -> None:
    # Written by another API process (or `compassmem redact`/`forget`): this one learns of it from the topic.
    tenant = f"explorer-{command}"
    stream, ready_id, _ = _buffered_secret(api, services, stream_broker, feed_topics, tenant, "conv-c")
    record = {"redact": RedactCommand(tenant=tenant, conversation_id="conv-c", turn_id="D1:1"),
              "forget": ForgetCommand(tenant=tenant, conversation_id="conv-c"),
              "forget-tenant": ForgetCommand(tenant=tenant)}[command]
    _publish(stream_broker.bootstrap, feed_topics["control"], [record])
    assert stream.wait_for(3)[2]["event"] == "resync"
    events = _replayed(api, tenant, "conv-c", ready_id)
    assert [e["event"] for e in events] == ["ready", "resync"] and REDACTED_WORD not in json.dumps(events)
    stream.close()


def test_a_last_event_id_must_be_a_position_given_to_this_conversation(
        api: httpx.Client, services: ApiServices, stream_broker: Any, feed_topics: dict[str, str]) -> None:
    tenant = "explorer-positions"
    stream, ready_id, change_id = _buffered_secret(api, services, stream_broker, feed_topics, tenant, "conv-p")
    other = _Stream(api, "conv-q", tenant=tenant)
    other_ready_id = other.wait_for(1)[0]["id"]
    # The start of the buffer, a number alone, another conversation's position: none replays the buffer.
    for forged in (f"{ready_id.rpartition('-')[0]}-0", "0", f"0.{ready_id.partition('.')[2]}", other_ready_id):
        events = _replayed(api, tenant, "conv-p", forged)
        assert [e["event"] for e in events] == ["ready", "resync"], forged
        assert REDACTED_WORD not in json.dumps(events)
    # Its own position still gets what came after it.
    resumed = _Stream(api, "conv-p", last_id=ready_id, tenant=tenant)
    assert resumed.wait_for(2)[1]["id"] == change_id
    for opened in (stream, other, resumed):
        opened.close()


def test_live_says_so_when_there_is_no_change_feed(services: ApiServices) -> None:
    alone = replace(services, settings=services.settings.model_copy(update={"kafka_bootstrap": None}))
    with BackgroundServer(create_app(alone)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.get("/v1/conversations/conv-a/live", params={"tenant": TENANT})
    assert response.status_code == 200
    assert response.text.startswith("event: unavailable\n") and "COMPASSMEM_KAFKA_BOOTSTRAP" in response.text


# -- the page's files -------------------------------------------------------------------------------------------------


def test_the_page_is_served_with_a_policy_that_keeps_it_on_this_api(api: httpx.Client) -> None:
    page = api.get("/ui/")
    assert page.status_code == 200 and "<title>compassmem explorer</title>" in page.text
    policy = page.headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "script-src 'self'" in policy
    assert api.get("/ui", follow_redirects=True).status_code == 200
    library = api.get("/ui/vendor/cytoscape.esm.min.js")
    assert library.status_code == 200 and "javascript" in library.headers["content-type"]
    assert library.text.startswith("/*! cytoscape.js") and "MIT" in library.text[:300]


def test_every_module_the_page_imports_is_there() -> None:
    modules = list((UI / "js").glob("*.js"))
    assert modules
    for module in modules:
        for target in re.findall(r'from "(\.[^"]+)"', module.read_text()):
            assert (module.parent / target).resolve().is_file(), f"{module.name} imports missing {target}"
    for asset in re.findall(r'(?:src|href)="([^":]+)"', (UI / "index.html").read_text()):
        assert (UI / asset).is_file(), f"index.html refers to missing {asset}"
