"""The LangGraph store, LangChain retriever and chat message history (``compassmem[langchain]``) against the real
libraries and a real memory: ``Memory`` on embedded stores in a temporary data directory, and once over HTTP with
``Client`` against a running ``compassmem dev`` (``served_memory``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServedMemory
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from pydantic import ValidationError
from test_library import MODEL_CACHE, library_settings, sample_turns

from compassmem import Client, Memory
from compassmem.integrations.langchain import CompassmemChatMessageHistory, CompassmemRetriever
from compassmem.integrations.langgraph import CompassmemStore

TRIP = ("acme", "ana", "trip")
ATLAS = "Why was the Atlas launch moved, and when did it finally launch?"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langgraph_memory.py"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with Memory(library_settings(tmp_path_factory.mktemp("integrations"))) as opened:
        opened.add(sample_turns())  # tenant 'default', no subject: namespace ('default', '-', 'priya-tom')
        yield opened


@pytest.fixture(scope="module")
def store(memory: Memory) -> CompassmemStore:
    store = CompassmemStore(memory)
    store.batch([
        PutOp(TRIP, "1", {"text": "We moved the Lisbon trip to May because Ben's passport expired.", "speaker": "Ana",
                          "timestamp": "2024-03-04T09:15:00+00:00"}),
        PutOp(TRIP, "2", {"text": "The new passport arrives on April 20, so May works.", "speaker": "Ben",
                          "timestamp": "2024-03-04T09:16:00+00:00", "session_id": "s1"}),
    ])
    return store


# -- The LangGraph store ------------------------------------------------------------------------------------------


def test_put_then_get_reads_the_turn_back(store: CompassmemStore) -> None:
    item = store.get(TRIP, "2")
    assert item is not None
    assert (item.namespace, item.key) == (TRIP, "2")
    assert {k: v for k, v in item.value.items() if k != "event_id"} == {
        "text": "The new passport arrives on April 20, so May works.", "speaker": "Ben",
        "timestamp": "2024-03-04T09:16:00+00:00", "session_id": "s1"}
    assert item.value["event_id"]
    assert item.created_at.isoformat() == "2024-03-04T09:16:00+00:00"
    assert store.get(TRIP, "missing") is None
    assert store.get(("acme", "bob", "trip"), "2") is None  # the turn belongs to subject 'ana'
    assert store.get(("default", "-", "priya-tom"), "S1:1").value["speaker"] == "Priya"  # type: ignore[union-attr]


def test_search_with_a_query_returns_the_ranked_turns_with_their_evidence(store: CompassmemStore) -> None:
    items = store.search(("default",), query=ATLAS, limit=8)
    assert {"S2:2", "S3:1"} <= {item.key for item in items}
    assert [item.value["rank"] for item in items] == list(range(1, len(items) + 1))
    for item in items:
        assert item.namespace == ("default", "-", "priya-tom")
        assert item.score == item.value["event_score"]
        assert item.key in item.value["event_turn_ids"]
        assert item.value["event_id"] and item.value["subgoal"]
        assert item.value["text"] == store.get(item.namespace, item.key).value["text"]  # type: ignore[union-attr]

    trip = store.search(("acme", "ana"), query="Why was the trip moved?", limit=2)
    assert trip[0].key == "1"
    assert {item.namespace for item in trip} == {TRIP}
    assert store.search(("acme", "bob"), query="Why was the trip moved?") == []  # a subject with no memory
    assert store.search(("acme", "ana"), query="Why was the trip moved?", filter={"speaker": "Ben"})[0].key == "2"
    assert store.search(TRIP, query="trip", offset=1, limit=1)[0].value["rank"] == 2


def test_search_without_a_query_lists_the_turns_in_order(store: CompassmemStore) -> None:
    assert [item.key for item in store.search(TRIP)] == ["1", "2"]
    assert [item.key for item in store.search(("acme",), filter={"speaker": {"$ne": "Ana"}})] == ["2"]
    listed = store.search(("default", "-"), offset=2, limit=3)
    assert [item.key for item in listed] == [turn["turn_id"] for turn in sample_turns()[2:5]]
    assert all(item.score is None for item in listed)
    with pytest.raises(ValueError, match="operator '\\$gt' is not supported"):
        store.search(TRIP, filter={"speaker": {"$gt": "A"}})


def test_list_namespaces_of_a_tenant(store: CompassmemStore) -> None:
    assert store.list_namespaces(prefix=("acme",)) == [TRIP]
    assert store.list_namespaces(prefix=("acme",), max_depth=2) == [("acme", "ana")]
    assert store.list_namespaces(prefix=("default", "*", "priya-tom")) == [("default", "-", "priya-tom")]
    assert store.list_namespaces(prefix=("acme",), suffix=("priya-tom",)) == []
    assert store.list_namespaces(prefix=("nobody",)) == []
    with pytest.raises(InvalidNamespaceError, match="needs a prefix whose first label is the tenant"):
        store.list_namespaces(suffix=("trip",))


def test_put_replaces_a_turn_and_delete_redacts_it(store: CompassmemStore) -> None:
    place = ("acme", "cid", "notes")
    store.put(place, "a", {"text": "The boiler is serviced every October.", "speaker": "Cid"})
    store.put(place, "b", {"text": "The landlord pays for the boiler service.", "speaker": "Cid"})
    first = store.get(place, "a")
    assert first is not None and first.value["text"].startswith("The boiler")

    store.put(place, "a", {"text": "The boiler is serviced every November now.", "speaker": "Cid"})
    assert store.get(place, "a").value["text"] == "The boiler is serviced every November now."  # type: ignore[union-attr]
    assert [item.key for item in store.search(place)] == ["b", "a"]  # the new turn is the later one

    store.delete(place, "a")
    assert store.get(place, "a") is None
    assert [item.key for item in store.search(place, query="When is the boiler serviced?")] == ["b"]
    store.delete(place, "a")  # deleting what is gone does nothing
    store.delete(("acme", "other", "notes"), "b")  # nor does deleting under another subject
    assert store.get(place, "b") is not None
    with pytest.raises(ValueError, match="holds that turn under subject 'cid'"):
        store.put(("acme", "other", "notes"), "b", {"text": "Mine now.", "speaker": "Eve"})


@pytest.mark.parametrize(("namespace", "rule"), [
    (("acme", "ana"), "has 2 labels, not three labels: namespaces are \\(tenant, subject, conversation\\)"),
    (("acme", "ana", "trip", "extra"), "has 4 labels"),
    (("Acme", "ana", "trip"), "the tenant 'Acme' does not match"),
    (("acme", " ", "trip"), "the subject ' ' must hold only ASCII letters.*U\\+0020"),
    (("acme", "ana", "a\u200bb"), "the conversation 'a.*b' must hold only ASCII letters.*U\\+200B"),
    # One id, one conversation: what a store would trim or a reader could not tell from 'trip' is refused.
    (("acme", "ana", "trip "), "the conversation 'trip ' must hold only ASCII letters.*U\\+0020"),
    (("acme", "ana", "tr\u0456p"), "the conversation 'tr.p' must hold only ASCII letters.*U\\+0456"),
    (("acme", "an\u3164a", "trip"), "the subject 'an.a' must hold only ASCII letters.*HANGUL"),
    (("acme", "ana", "x.y"), "cannot contain periods"),
])
def test_a_bad_namespace_is_refused_naming_it_and_the_rule(store: CompassmemStore, namespace: tuple[str, ...],
                                                           rule: str) -> None:
    with pytest.raises(InvalidNamespaceError, match=rule):
        store.put(namespace, "k", {"text": "hello", "speaker": "Ana"})
    with pytest.raises(InvalidNamespaceError, match=rule):
        store.get(namespace, "k")


@pytest.mark.parametrize(("value", "rule"), [
    ({"text": "hello"}, "speaker: Field required"),
    ({"text": "hello", "speaker": "Ana", "mood": "glad"}, "mood: Extra inputs are not permitted"),
    ({"text": "hello", "speaker": "Ana", "timestamp": 1714000000}, "timestamp"),
    ({"text": "hello", "speaker": "Ana", "timestamp": "2024-05-01T10:00:00"}, "timestamp: must carry a UTC offset"),
    ({"text": "   ", "speaker": "Ana"}, "text: must not be empty"),
])
def test_a_bad_value_is_refused_and_a_batch_with_it_writes_nothing(store: CompassmemStore, value: dict[str, object],
                                                                  rule: str) -> None:
    place = ("acme", "ana", "refused")
    good = PutOp(place, "ok", {"text": "This one is fine.", "speaker": "Ana"})
    with pytest.raises(ValueError, match=f"put 'bad' in namespace .*{rule}"):
        store.batch([good, PutOp(place, "bad", value)])
    assert store.get(place, "ok") is None


def test_ttl_and_index_are_refused(store: CompassmemStore) -> None:
    with pytest.raises(NotImplementedError, match="TTL is not supported"):
        store.put(TRIP, "t", {"text": "hi", "speaker": "Ana"}, ttl=5)
    with pytest.raises(ValueError, match="compassmem indexes every turn"):
        store.put(TRIP, "t", {"text": "hi", "speaker": "Ana"}, index=False)


def test_a_batch_runs_in_order_and_abatch_alike(store: CompassmemStore) -> None:
    place = ("acme", "dee", "batch")
    results = store.batch([GetOp(place, "x"), PutOp(place, "x", {"text": "Dee likes tea.", "speaker": "Dee"}),
                           GetOp(place, "x")])
    assert results[0] is None and results[1] is None
    assert results[2].value["text"] == "Dee likes tea."  # type: ignore[union-attr]
    item = asyncio.run(store.aget(place, "x"))
    assert item is not None and item.value["speaker"] == "Dee"
    assert [i.key for i in asyncio.run(store.asearch(place, query="What does Dee like?"))] == ["x"]


# -- The LangChain retriever and chat message history ---------------------------------------------------------


def test_the_retriever_returns_documents_with_the_evidence(memory: Memory) -> None:
    # Every ranked turn (the default, AGENT_MIN_RELEVANCE, is tests/test_min_relevance_surfaces.py's).
    retriever = CompassmemRetriever(memory=memory, conversation_id="priya-tom", budget_turns=8, min_relevance=0)
    documents = retriever.invoke(ATLAS)
    response = memory.query(ATLAS, conversation_id="priya-tom", budget_turns=8)
    assert [d.metadata["turn_id"] for d in documents] == response.turn_ids
    turns = {turn["turn_id"]: turn for turn in sample_turns()}
    evidence = {turn.turn_id: item for item in response.evidence for turn in item.turns}
    for rank, document in enumerate(documents, start=1):
        turn = turns[document.metadata["turn_id"]]
        assert document.page_content == turn["text"]
        assert document.metadata["speaker"] == turn["speaker"]
        assert document.metadata["timestamp"] == turn["timestamp"]
        assert document.metadata["conversation_id"] == "priya-tom" and document.metadata["tenant"] == "default"
        assert document.metadata["event_id"] == evidence[turn["turn_id"]].event_id
        assert document.metadata["score"] == evidence[turn["turn_id"]].score
        assert document.metadata["rank"] == rank
        assert document.metadata["relevance"] == response.turn_refs[rank - 1].relevance
        assert document.metadata["answerable_probability"] == response.answerable_probability
        assert turn["turn_id"] in document.metadata["event_turn_ids"]
    assert {"S2:2", "S3:1"} <= {d.metadata["turn_id"] for d in documents}

    assert CompassmemRetriever(memory=memory, conversation_id="nobody").invoke("Anything?") == []
    with pytest.raises(ValidationError, match="give exactly one scope"):
        CompassmemRetriever(memory=memory)
    with pytest.raises(ValidationError, match="question"):
        retriever.invoke("   ")


def test_the_chat_history_round_trips_and_clears(memory: Memory) -> None:
    history = CompassmemChatMessageHistory(memory, "chat-1", tenant="acme", subject_id="ana")
    assert history.messages == []
    history.add_messages([SystemMessage("You plan trips."), HumanMessage("Book Lisbon for May.", id="h1"),
                          AIMessage("Booked: Lisbon, May 3 to 10.")])
    history.add_messages([HumanMessage("Ben is coming too.", name="Ben")])
    messages = history.messages
    assert [(type(m), m.content) for m in messages] == [
        (SystemMessage, "You plan trips."), (HumanMessage, "Book Lisbon for May."),
        (AIMessage, "Booked: Lisbon, May 3 to 10."), (HumanMessage, "Ben is coming too.")]
    assert messages[1].id == "h1" and messages[3].name == "Ben" and messages[1].name is None
    assert CompassmemStore(memory).list_namespaces(prefix=("acme", "ana", "chat-1")) == [("acme", "ana", "chat-1")]

    with pytest.raises(ValueError, match="message 0 is a 'tool' message"):
        history.add_messages([ToolMessage("42", tool_call_id="c1")])
    with pytest.raises(ValueError, match="message 1 \\(ai\\) has no text"):
        history.add_messages([HumanMessage("and?"), AIMessage("")])
    assert len(history.messages) == 4

    history.clear()
    assert history.messages == []
    with pytest.raises(ValidationError, match="conversation_id"):
        CompassmemChatMessageHistory(memory, "a/b")


# -- Over HTTP, and the example -------------------------------------------------------------------------------


def test_the_adapters_work_over_http_with_the_client(served_memory: ServedMemory) -> None:
    with Client(served_memory.url) as client:
        store = CompassmemStore(client)
        item = store.get(("default", "-", "priya-tom"), "S1:1")
        assert item is not None and item.value["speaker"] == "Priya"
        assert "S2:2" in [i.key for i in store.search(("default", "-", "priya-tom"), query=ATLAS, limit=8)]
        documents = CompassmemRetriever(memory=client, conversation_id="priya-tom", budget_turns=8,
                                        min_relevance=0).invoke(ATLAS)
        assert "S2:2" in [d.metadata["turn_id"] for d in documents]
        messages = CompassmemChatMessageHistory(client, "priya-tom", human_speaker="Priya", ai_speaker="Tom").messages
        assert [m.id for m in messages] == [turn["turn_id"] for turn in sample_turns()]
        assert {type(m) for m in messages} == {HumanMessage, AIMessage}


def test_the_langgraph_example_stores_and_recalls(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMPASSMEM_")}
    env.update({"COMPASSMEM_DATA_DIR": str(tmp_path / "memory"), "COMPASSMEM_EMBEDDER_CACHE_DIR": str(MODEL_CACHE)})
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["said"] for line in lines] == [
        "I'm allergic to peanuts.", "My sister Maya lives in Porto.", "Where does my sister live?"]
    assert lines[-1]["recalled"][0]["text"] == "My sister Maya lives in Porto."
    assert lines[-1]["recalled"][0]["namespace"] == ["default", "user-1", "chat-1"]
    assert lines[-1]["stored"] == 3
