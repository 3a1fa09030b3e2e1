"""Deleting one turn (redaction) and a whole tenant: over HTTP against a real API over real embedded stores, through
``Memory``, and through the real broker and worker, where a replay of the turns topic must not bring a redacted
turn back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import numpy as np
import pytest

from compassmem import AsyncClient, Client, Forbidden, Memory, NotFound, Unauthorized
from compassmem.core.config import Settings
from compassmem.core.contracts.commands import RedactCommand
from compassmem.core.contracts.dead_letters import DeadLetter
from compassmem.core.contracts.records import RedactResult
from compassmem.core.models import RelationType, Turn
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.publish.producer import encode_turn
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.write.redaction import redact_stored_turn
from compassmem.sinks.factory import Stores, open_stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.streams.decoding import RawRecord
from compassmem.core.contracts.stream_records import ControlKind, RedactMarker
from compassmem.streams.processor import MemoryStreamProcessor
from compassmem.streams.state import decode_header, decode_record
from conftest import ConversationLog, StreamRun, reference_snapshots, stream_conversation, wait_until
from test_streaming import graph_matches, replayed

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
MODEL_CACHE = Path(".compassmem", "models").resolve()
ACME_KEY, GLOBEX_KEY, ADMIN_KEY = "acme-secret-key-0001", "globex-secret-key-0001", "operator-admin-key-0001"
# A turn of the sample conversation that shares its event with others, and words only it says.
REDACTED, REDACTED_WORDS = "S1:3", "multi-currency invoices"


def _settings(data_dir: Path, **fields: object) -> Settings:
    return Settings(_env_file=None, data_dir=data_dir, embedder_cache_dir=MODEL_CACHE, **fields)


# A made-up name that only the redacted turn says: in a sentence that becomes a causal relation's quoted evidence
# (", so" after a clause restating the first session's event) and goes into its event's summary and keywords.
SECRET = "Zembla"


def _traced_turns(tenant: str, conversation_id: str) -> list[dict[str, object]]:
    said = [("1", "Ann", "The Quaxoria bridge collapsed during the storm on Monday night.", "2024-03-04T20:00:00"),
            ("2", "Bob", "Was anyone hurt when the Quaxoria bridge collapsed?", "2024-03-04T20:01:00"),
            ("3", "Ann", "Nobody was hurt, but the whole bridge collapsed into the river.", "2024-03-04T20:02:00"),
            ("4", "Ann", f"The Quaxoria bridge collapsed in the storm, so I drive the {SECRET} detour every morning.",
             "2024-03-06T08:00:00"),
            ("5", "Bob", "How long does the commute take you now?", "2024-03-06T08:01:00"),
            ("6", "Ann", "About forty minutes each way, twice as long as my commute was before.",
             "2024-03-06T08:02:00")]
    return [{"tenant": tenant, "conversation_id": conversation_id, "turn_id": turn_id, "speaker": speaker,
             "text": text, "timestamp": f"{at}+00:00", "session_id": "s1" if turn_id < "4" else "s2"}
            for turn_id, speaker, text, at in said]


def _stored_text(stores: Stores, tenant: str) -> str:
    """Everything the stores hold for a tenant, as text: every event, provisional event and turn payload in the
    vector store, and every node and edge attribute of every conversation in the graph store."""
    conversations = {c.conversation_id for c in stores.graph.conversation_stats(tenant)}
    conversations |= {e.conversation_id for e in stores.vectors.provisional_events(tenant)}
    parts = [e.model_dump_json() for e in stores.vectors.provisional_events(tenant)]
    for conversation_id in sorted(conversations):
        parts += [e.model_dump_json() for e in stores.vectors.conversation_events(tenant, conversation_id)]
        parts += [t.model_dump_json() for t in stores.vectors.conversation_turns(tenant, conversation_id)]
        graph = stores.graph.conversation_graph(tenant, conversation_id)
        parts += [json.dumps([node, data], default=str) for node, data in graph.nodes(data=True)]
        parts += [json.dumps(data, default=str) for _, _, data in graph.edges(data=True)]
    return "\n".join(parts)


def _quoting_relations(stores: Stores, tenant: str, conversation_id: str) -> list[str]:
    return [r.evidence for r in stores.graph.relations(tenant, conversation_id)
            if r.type is RelationType.CAUSAL and SECRET in r.evidence]


def _sample() -> list[dict[str, object]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def _acme_turns(conversation_id: str) -> list[dict[str, object]]:
    return [{"tenant": "acme", "conversation_id": conversation_id, "turn_id": str(n), "speaker": "Zed",
             "text": text, "timestamp": f"2024-05-01T18:0{n}:00+00:00"}
            for n, text in enumerate(["The greenhouse router drops the wifi every evening.",
                                      "It started after the firmware update last week."], start=1)]


@dataclass
class Served:
    memory: Memory
    client: httpx.Client
    services: object


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    settings = _settings(tmp_path_factory.mktemp("redaction"), api_keys={"acme": ACME_KEY, "globex": GLOBEX_KEY},
                         api_admin_keys=[ADMIN_KEY])
    with Memory(settings) as memory:
        memory.add(_sample())
        memory.add(_acme_turns("router"))
        services = build_services(settings, memory.stores, memory.embedder, MemoryMetrics())
        with BackgroundServer(create_app(services)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            yield Served(memory, client, services)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_redacted_turn_leaves_its_event_the_turns_and_the_answers(served: Served) -> None:
    vectors = served.memory.stores.vectors
    turn = vectors.get_turn("default", "priya-tom", REDACTED)
    assert turn is not None
    [before] = vectors.get_events("default", [turn.event_id])
    others = [o.turn_id for o in before.observations if o.turn_id != REDACTED]
    assert others, "the chosen turn must share its event"

    response = served.client.delete(f"/v1/conversations/priya-tom/turns/{REDACTED}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body == {"tenant": "default", "conversation_id": "priya-tom", "turn_id": REDACTED,
                    "event_id": turn.event_id, "event_deleted": False, "redaction_published": False}

    assert vectors.get_turn("default", "priya-tom", REDACTED) is None
    [after] = vectors.get_events("default", [turn.event_id])
    assert [o.turn_id for o in after.observations] == others
    assert REDACTED_WORDS not in after.model_dump_json()
    assert after.version == before.version + 1
    assert not np.allclose(after.embedding, before.embedding), "the event was not re-embedded"
    assert [t.turn_id for t in vectors.turns_of_events("default", [turn.event_id])] == others
    graph_event = served.client.get(f"/v1/events/{turn.event_id}").json()
    assert REDACTED_WORDS not in json.dumps(graph_event)
    answer = served.client.post("/v1/query", json={"conversation_id": "priya-tom",
                                                    "question": "Which invoices need multi-currency support?"})
    assert answer.status_code == 200
    assert REDACTED not in answer.json()["turn_ids"]
    assert REDACTED_WORDS not in answer.text

    # Gone now: asking again, or for a turn that never was, is a 404.
    assert served.client.delete(f"/v1/conversations/priya-tom/turns/{REDACTED}").status_code == 404
    assert served.client.delete("/v1/conversations/priya-tom/turns/nope").status_code == 404


def test_another_tenants_key_cannot_redact(served: Served) -> None:
    url = "/v1/conversations/router/turns/1?tenant=acme"
    assert served.client.delete(url).status_code == 401
    assert served.client.delete(url, headers=_bearer(GLOBEX_KEY)).status_code == 403
    # Globex asking for the same ids in its own tenant finds nothing of acme's.
    assert served.client.delete("/v1/conversations/router/turns/1?tenant=globex",
                                headers=_bearer(GLOBEX_KEY)).status_code == 404
    assert served.memory.stores.vectors.get_turn("acme", "router", "1") is not None


def test_a_redacted_turn_leaves_no_trace_in_the_stores(served: Served) -> None:
    stores = served.memory.stores
    served.memory.add(_traced_turns("globex", "bridge"))
    # What makes the test mean something: the words are in a relation's evidence and in their event.
    assert _quoting_relations(stores, "globex", "bridge"), "no relation quotes the turn"
    turn = stores.vectors.get_turn("globex", "bridge", "4")
    assert turn is not None
    [event] = stores.vectors.get_events("globex", [turn.event_id])
    assert SECRET in event.summary and SECRET.lower() in event.keywords
    assert SECRET in _stored_text(stores, "globex")

    with Client(str(served.client.base_url), api_key=GLOBEX_KEY) as client:
        result = client.redact_turn("bridge", "4", tenant="globex")
    assert result == RedactResult(tenant="globex", conversation_id="bridge", turn_id="4", event_id=turn.event_id,
                                  event_deleted=False, redaction_published=False)
    assert SECRET.lower() not in _stored_text(stores, "globex").lower()
    assert not _quoting_relations(stores, "globex", "bridge")
    # The relations that hold no text of the turn stay (the two sessions' events still follow each other).
    assert [r for r in stores.graph.relations("globex", "bridge") if r.target == turn.event_id]


def test_the_client_redacts_and_deletes_tenants_under_the_apis_rules(served: Served) -> None:
    url = str(served.client.base_url)
    served.memory.add([{**turn, "tenant": "initech"} for turn in _acme_turns("printer")])
    with Client(url) as anonymous, pytest.raises(Unauthorized) as unauthorized:
        anonymous.redact_turn("router", "1", tenant="acme")
    assert unauthorized.value.status == 401
    with Client(url, api_key=GLOBEX_KEY) as globex:
        with pytest.raises(Forbidden, match="globex") as refused:
            globex.redact_turn("router", "1", tenant="acme")
        assert refused.value.status == 403
        with pytest.raises(NotFound):
            globex.redact_turn("router", "1", tenant="globex")
        with pytest.raises(Forbidden, match="not an admin key"):
            globex.delete_tenant("initech")
    assert served.memory.stores.vectors.get_turn("acme", "router", "1") is not None
    with Client(url, api_key=ADMIN_KEY) as admin:
        assert admin.delete_tenant("nobody-here").events_deleted == 0

    async def main() -> None:
        async with AsyncClient(url) as client:
            result = await client.redact_turn("printer", "2", tenant="initech")
            assert (result.tenant, result.turn_id, result.event_deleted) == ("initech", "2", False)
            with pytest.raises(NotFound):
                await client.redact_turn("printer", "2", tenant="initech")
            with pytest.raises(Unauthorized):
                await client.delete_tenant("initech")
        async with AsyncClient(url, api_key=ADMIN_KEY) as admin:
            deleted = await admin.delete_tenant("initech")
            assert deleted.tenant == "initech" and deleted.events_deleted > 0 and not deleted.forget_published

    asyncio.run(main())
    assert served.memory.stores.vectors.count("initech") == 0


def test_the_last_turn_of_an_event_takes_the_event_with_it(served: Served) -> None:
    served.memory.add({"tenant": "acme", "conversation_id": "single", "turn_id": "only", "speaker": "Zed",
                       "text": "A lone remark about the boiler.", "timestamp": "2024-06-01T10:00:00+00:00"})
    result = served.memory.redact_turn("single", "only", tenant="acme")
    assert result.event_deleted and result.turn_id == "only"
    assert served.memory.stores.vectors.count("acme", "single") == 0
    assert served.memory.stores.graph.conversation_graph("acme", "single").number_of_nodes() == 0
    with pytest.raises(NotFound):
        served.memory.redact_turn("single", "only", tenant="acme")


def test_a_redacted_turn_is_not_written_back_by_later_adds(tmp_path: Path) -> None:
    with Memory(_settings(tmp_path)) as memory:
        memory.add(_acme_turns("later"))
        memory.redact_turn("later", "1", tenant="acme")
        memory.add({"tenant": "acme", "conversation_id": "later", "turn_id": "3", "speaker": "Zed",
                    "text": "Rebooting the router fixed the wifi for now.", "timestamp": "2024-05-01T18:03:00+00:00"})
        events = memory.stores.vectors.conversation_events("acme", "later")
        assert "1" not in [o.turn_id for event in events for o in event.observations]
        assert "greenhouse" not in " ".join(event.model_dump_json() for event in events)


def test_tenant_delete_needs_an_admin_key(served: Served) -> None:
    served.memory.add(_acme_turns("doomed"))
    assert served.client.delete("/v1/tenants/acme").status_code == 401
    assert served.client.delete("/v1/tenants/acme", headers=_bearer(ACME_KEY)).status_code == 403
    assert served.client.delete("/v1/tenants/acme", headers=_bearer(GLOBEX_KEY)).status_code == 403
    assert served.memory.stores.vectors.count("acme") > 0

    # No admin key configured: nobody may, whatever they send.
    no_admin = replace(served.services, settings=Settings(_env_file=None, api_keys={"acme": ACME_KEY}))
    with BackgroundServer(create_app(no_admin)) as server:
        assert httpx.delete(f"{server.url}/v1/tenants/acme", headers=_bearer(ADMIN_KEY), timeout=30).status_code == 403

    response = served.client.delete("/v1/tenants/acme", headers=_bearer(ADMIN_KEY))
    assert response.status_code == 200, response.text
    assert response.json()["events_deleted"] > 0 and response.json()["forget_published"] is False
    assert served.memory.stores.vectors.count("acme") == 0
    assert served.memory.stores.graph.conversation_stats("acme") == []
    assert served.memory.stores.vectors.count("default") > 0, "another tenant was touched"


def test_an_admin_key_may_not_be_a_tenant_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="COMPASSMEM_API_ADMIN_KEYS entry 0 is also tenant .acme..s key"):
        _settings(tmp_path, api_keys={"acme": ACME_KEY}, api_admin_keys=[ACME_KEY])


def test_memory_delete_tenant(tmp_path: Path) -> None:
    with Memory(_settings(tmp_path)) as memory:
        memory.add(_acme_turns("a"))
        memory.add(_acme_turns("b"))
        assert memory.delete_tenant("acme").events_deleted > 0
        assert memory.stores.vectors.count("acme") == 0
        assert memory.delete_tenant("acme").events_deleted == 0


# -- through the broker and the worker ------------------------------------------------------------------------


def test_the_worker_keeps_no_trace_of_a_redacted_turn_in_its_state(tmp_path: Path, embedded_falkordb,  # noqa: ANN001
                                                                     embedder) -> None:  # noqa: ANN001
    """The worker's batch step over real stores, as the control topic drives it: the control agent redacts the
    stores at once, then the marker reaches the conversation, whose table state still holds the turn's event and
    the relation quoting it; after the marker, neither the state nor anything a later batch writes has them."""
    tenant, conversation_id = "umbra", "bridge"
    conversation = ConversationLog(tenant, conversation_id)
    turns = [Turn.model_validate(turn) for turn in _traced_turns(tenant, conversation_id)]

    with open_stores(_settings(tmp_path, falkordb_url=embedded_falkordb.url)) as stores:
        processor = MemoryStreamProcessor(embedder, stores)

        def run(records: list[RawRecord], state: bytes | None) -> bytes:
            return conversation.apply(processor, records, state)[0]

        records = [conversation.record(n, encode_turn(turn)[1]) for n, turn in enumerate(turns)]
        state = run([*records, conversation.idle_close(6, 5)], None)
        assert _quoting_relations(stores, tenant, conversation_id), "no relation quotes the turn"
        assert SECRET in decode_record(state).model_dump_json()

        redact_stored_turn(stores, tenant, conversation_id, "4")  # the control agent, at once
        marker = RedactMarker(redact=RedactCommand(tenant=tenant, conversation_id=conversation_id, turn_id="4"),
                              source_partition=0, source_offset=0)
        state = run([conversation.record(7, marker.model_dump_json().encode(), ControlKind.REDACT)], state)
        assert SECRET.lower() not in decode_record(state).model_dump_json().lower()

        # A later turn about the same detour: merged or related, nothing written from the state brings it back.
        later = Turn.model_validate({**_traced_turns(tenant, conversation_id)[5], "turn_id": "7",
                                     "text": "The detour adds a lot of miles, so I drive slowly.",
                                     "timestamp": "2024-03-06T08:03:00+00:00"})
        state = run([conversation.record(8, encode_turn(later)[1]), conversation.idle_close(9, 8)], state)
        assert SECRET.lower() not in decode_record(state).model_dump_json().lower()
        assert SECRET.lower() not in _stored_text(stores, tenant).lower()
        assert "7" in [t.turn_id for t in stores.vectors.conversation_turns(tenant, conversation_id)]


def test_a_redaction_in_an_open_segment_lists_its_event_once(tmp_path: Path, embedded_falkordb,  # noqa: ANN001
                                                             embedder) -> None:  # noqa: ANN001
    """Three turns still in the worker's open segment (a provisional event, which only the vector store holds), one
    redacted through ``Memory`` and one over HTTP: the listings show the rebuilt event once, provisional, with the
    turns that are left (the redaction used to write it into the graph store too, so it was listed twice)."""
    tenant, conversation_id = "opal", "open"  # a tenant of its own: the graph server is the session's
    conversation = ConversationLog(tenant, conversation_id)
    turns = [Turn.model_validate(turn) for turn in _traced_turns(tenant, conversation_id)]
    settings = _settings(tmp_path, falkordb_url=embedded_falkordb.url)

    def listed(memory: Memory, client: httpx.Client) -> list[tuple[int, int, int, list[list[str]]]]:
        """(events, provisional events, turns, each listed event's turn ids) from the library and over HTTP."""
        [summary] = memory.conversations(tenant=tenant).conversations
        events = [e.turn_ids for e in memory.events(conversation_id, tenant=tenant).events]
        [body] = client.get("/v1/conversations", params={"tenant": tenant}).json()["conversations"]
        page = client.get(f"/v1/conversations/{conversation_id}/events", params={"tenant": tenant}).json()
        return [(summary.events, summary.provisional_events, summary.turns, events),
                (body["events"], body["provisional_events"], body["turns"], [e["turn_ids"] for e in page["events"]])]

    with open_stores(settings) as stores:
        # The first session closes into an event when the second (another day) opens a segment of its own.
        conversation.apply(MemoryStreamProcessor(embedder, stores),
                           [conversation.record(n, encode_turn(turn)[1]) for n, turn in enumerate(turns)], None)
        [opened] = stores.vectors.provisional_events(tenant, conversation_id)
        assert opened.turn_ids == ["4", "5", "6"], "the second session should be the open segment"
        with Memory(settings, stores=stores, embedder=embedder) as memory, \
                BackgroundServer(create_app(build_services(settings, stores, embedder, MemoryMetrics()))) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            memory.redact_turn(conversation_id, "5", tenant=tenant)
            assert listed(memory, client) == [(2, 1, 5, [["1", "2", "3"], ["4", "6"]])] * 2
            response = client.delete(f"/v1/conversations/{conversation_id}/turns/6", params={"tenant": tenant})
            assert response.status_code == 200, response.text
            assert listed(memory, client) == [(2, 1, 4, [["1", "2", "3"], ["4"]])] * 2
            assert stores.graph.conversation_stats(tenant)[0].events == 1, "the graph store holds the open segment"


def test_a_redaction_survives_a_replay_of_the_turns_topic(stream_run: StreamRun, embedder) -> None:  # noqa: ANN001
    turns = stream_conversation("talk", 1, tenant="acme")
    reference = reference_snapshots(turns, embedder)
    event_id, members = next((e, m[0]) for e, m in reference["acme/talk"]["events"].items() if len(m[0]) >= 2)
    redacted = members[1]
    redacted_text = next(t.text for t in turns if t.turn_id == redacted)
    data_dir = stream_run.root / "worker-data"
    worker = stream_run.start_worker("redact", data_dir)
    worker.wait_assigned()
    with stream_run.producer() as producer:
        producer.produce(turns)
        graph = FalkorDBGraphStore.from_embedded(stream_run.falkordb)
        try:
            wait_until(lambda: graph_matches(graph, reference), 90, "the memory before the redaction", 0.5,
                       worker.tail)
        finally:
            graph.close()
        producer.send_command(RedactCommand(tenant="acme", conversation_id="talk", turn_id=redacted))
    wait_until(lambda: "stream.turn_redacted" in worker.log(), 60, "the worker to reach the redaction marker", 0.3,
               worker.tail)
    worker.stop()

    def check(stores) -> None:  # noqa: ANN001
        turn_ids = [t.turn_id for t in stores.vectors.conversation_turns("acme", "talk")]
        assert redacted not in turn_ids, "the redacted turn is back"
        assert len(turn_ids) == len(turns) - 1, "other turns went missing"
        events = stores.vectors.conversation_events("acme", "talk")
        assert redacted_text not in " ".join(e.model_dump_json() for e in events)
        [event] = [e for e in events if e.event_id == event_id]
        assert [o.turn_id for o in event.observations] == [m for m in members if m != redacted]

    with stream_run.open_stores(data_dir) as stores:
        check(stores)

    # The replay: a new consumer group with empty tables and empty stores reads the turns topic from the start;
    # the turn comes in again before the marker, and the marker takes it out again at its position.
    with replayed(stream_run, "redact-replay") as (stores, replay):
        assert replay.batch_totals().get("redactions", 0) >= 1, replay.tail()
        check(stores)


def test_an_idle_close_requested_before_stale_markers_were_applied_still_closes(
        tmp_path: Path, embedded_falkordb, embedder) -> None:  # noqa: ANN001
    """After a restart with a backlog a worker requests idle closes for conversations whose turns are still on
    their way (their last turn looks old): those markers land behind the turns and come stale. A marker requested
    once the last turn was applied, placed after the stale ones, must still close the segment; when markers moved
    the position it was compared with, it came stale too and the close waited for another round."""
    conversation = ConversationLog("umbra", "idle")
    turns = [Turn.model_validate(turn) for turn in _traced_turns(conversation.tenant, conversation.conversation_id)]

    with open_stores(_settings(tmp_path, falkordb_url=embedded_falkordb.url)) as stores:
        processor = MemoryStreamProcessor(embedder, stores)
        last = len(turns) - 1
        records = [conversation.record(n, encode_turn(turn)[1]) for n, turn in enumerate(turns)]
        state, out = conversation.apply(processor, records, None)
        assert out.stats.idle_closed == 0 and decode_header(state).open_turns > 0
        # Two markers requested while the first turns were still to come, then the one requested after the last.
        markers = [conversation.idle_close(last + 1, 1), conversation.idle_close(last + 2, 3),
                   conversation.idle_close(last + 3, last)]
        state, out = conversation.apply(processor, markers, state)
        header = decode_header(state)
        assert out.stats.idle_closed == 1
        assert header.open_turns == 0
        assert header.last_offset == last + 3 and header.content_offset == last


def test_a_redaction_of_a_turn_never_seen_is_refused_and_a_dropped_turn_is_visible(stream_run: StreamRun) -> None:
    """`compassmem redact` of a turn the stores do not hold is refused, as the API's DELETE answers 404 (it used to
    block that id for good: a turn of that id posted later was accepted and silently dropped); `--unseen` blocks
    one on purpose, and the turn of that id that comes later is dropped with a dead letter and a counter."""
    data_dir = stream_run.root / "worker-data"
    worker = stream_run.start_worker("unseen", data_dir)
    worker.wait_assigned()
    turns = stream_conversation("talk", 1, tenant="acme")
    later = [turns[-1].model_copy(update={"turn_id": turn_id, "text": f"One more thing about the launch ({turn_id})."})
             for turn_id in ("late-1", "late-2")]
    env = stream_run.env(data_dir)

    def redact(turn_id: str, *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compassmem.cli", "redact", "talk", turn_id, "--tenant", "acme",
                               *options], env=env, capture_output=True, text=True, timeout=120, check=False)

    def applied() -> int:
        return worker.batch_totals().get("applied", 0)

    with stream_run.producer() as producer:
        producer.produce(turns)
        wait_until(lambda: applied() == len(turns), 90, "the conversation to be applied", 0.3, worker.tail)
        refused = redact("late-1")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "refused" in refused.stderr and "no turn 'late-1'" in refused.stderr
        blocked = redact("late-2", "--unseen")
        assert blocked.returncode == 0, blocked.stdout + blocked.stderr
        assert "done" in blocked.stdout
        producer.produce(later)
    wait_until(lambda: applied() == len(turns) + 1 and worker.batch_totals().get("redacted_dropped") == 1, 60,
               "late-1 to be applied and late-2 to be dropped", 0.3, worker.tail)

    letters = [DeadLetter.model_validate_json(record.value)
               for record in stream_run.read_topic(stream_run.settings().dlq_topic)]
    reasons = {(letter.stage.value, letter.reason_code.value): letter for letter in letters}
    assert set(reasons) == {("control", "unknown_turn"), ("route", "redacted_turn")}
    dropped = reasons["route", "redacted_turn"]
    assert "late-2" in dropped.reason and dropped.original_base64 == "", "a redacted turn's words were copied"
    scraped = httpx.get(worker.metrics_url(), timeout=10).text
    for stage, reason in reasons:
        assert f'compassmem_dead_letters_total{{reason="{reason}",stage="{stage}"}} 1.0' in scraped
    worker.stop()
    with stream_run.open_stores(data_dir) as stores:
        stored = {t.turn_id for t in stores.vectors.conversation_turns("acme", "talk")}
    assert "late-1" in stored and "late-2" not in stored
