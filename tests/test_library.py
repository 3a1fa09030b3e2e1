"""``from compassmem import Memory``: the library surface over real embedded stores (qdrant-edge, FalkorDB) in a
temporary data directory, with the embedder the settings choose."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from compassmem import BadRequest, Memory, NotFound
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.models import Turn
from compassmem.write.pipeline import PipelineConfig
from compassmem.retrieval.engine import EngineConfig, RankingConfig

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
# The cache the `embedder` fixture's default settings use: the ONNX export is made once per checkout, not per test.
MODEL_CACHE = Path(".compassmem", "models").resolve()


def library_settings(data_dir: Path) -> Settings:
    return Settings(_env_file=None, data_dir=data_dir, embedder_cache_dir=MODEL_CACHE)


def sample_turns() -> list[dict[str, object]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with Memory(library_settings(tmp_path_factory.mktemp("library"))) as opened:
        opened.add(sample_turns())
        yield opened


def test_add_then_query_answers_with_the_evidence_turns(memory: Memory) -> None:
    response = memory.query("Why was the Atlas launch moved, and when did it finally launch?",
                            conversation_id="priya-tom", budget_turns=8)
    assert isinstance(response, QueryResponse)
    assert {"S2:2", "S3:1"} <= set(response.turn_ids)
    evidence_turns = {turn.turn_id for item in response.evidence for turn in item.turns}
    assert set(response.turn_ids) <= evidence_turns
    # The same request model as POST /v1/query gives the same ranking.
    request = QueryRequest(conversation_id="priya-tom", budget_turns=8,
                           question="Why was the Atlas launch moved, and when did it finally launch?")
    assert memory.query(request).turn_ids == response.turn_ids


def test_evidence_events_are_readable_and_the_graph_holds_them(memory: Memory) -> None:
    response = memory.query("When did Priya adopt Biscuit?", conversation_id="priya-tom")
    event_ids = [item.event_id for item in response.evidence]
    events = memory.get_events(event_ids)
    assert {event.event_id for event in events} == set(event_ids)
    graph = memory.graph("priya-tom")
    assert graph.counts.events >= len(set(event_ids))
    assert set(event_ids) <= {node.id for node in graph.nodes}
    assert graph.counts.relations == len(graph.edges) > 0


def test_one_event_is_read_as_the_client_reads_it(memory: Memory) -> None:
    response = memory.query("When did Priya adopt Biscuit?", conversation_id="priya-tom")
    item = response.evidence[0]
    event = memory.event(item.event_id)
    assert event.event_id == item.event_id and event.conversation_id == "priya-tom"
    assert {turn.turn_id for turn in item.turns} <= {o.turn_id for o in event.observations}
    with pytest.raises(NotFound, match=f"no event {item.event_id!r} for tenant 'someone-else'"):
        memory.event(item.event_id, tenant="someone-else")


def test_scopes_other_than_one_conversation(memory: Memory) -> None:
    assert memory.query("Who is Biscuit?", all_conversations=True).turn_ids
    assert memory.query("Who is Biscuit?", conversation_ids=["priya-tom", "nobody"]).turn_ids


def test_conversations_and_events_are_listed_page_by_page(memory: Memory) -> None:
    page = memory.conversations()
    priya = next(c for c in page.conversations if c.conversation_id == "priya-tom")
    assert priya.turns == len(sample_turns()) and priya.events > 1
    assert {"Priya", "Tom"} <= set(priya.participants)
    assert [c.conversation_id for c in memory.conversations(query="PRIYA").conversations] == ["priya-tom"]
    assert memory.conversations(tenant="someone-else").conversations == []

    seen: list[str] = []
    cursor = None
    while True:
        events = memory.events("priya-tom", limit=2, cursor=cursor)
        assert len(events.events) <= 2
        seen.extend(node.id for node in events.events)
        cursor = events.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == priya.events
    starts = [node.start for node in memory.events("priya-tom", limit=100).events]
    assert starts == sorted(starts)
    with pytest.raises(ValueError, match="cursor"):
        memory.events("priya-tom", cursor="not-a-cursor")
    with pytest.raises(ValueError, match="limit"):
        memory.conversations(limit=0)


def test_a_forged_cursor_is_a_value_error_naming_the_cursor(memory: Memory) -> None:
    def forged(payload: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")

    with pytest.raises(ValueError, match="^cursor "):
        memory.events("priya-tom", cursor=forged({"v": 1, "l": "events:priya-tom", "k": [1.0, "a", "b"]}))
    with pytest.raises(ValueError, match="^cursor "):
        memory.conversations(cursor=forged({"v": 1, "l": "conversations:recent:", "k": ["a", "b"]}))
    # A real cursor of one listing is refused by another.
    events_cursor = memory.events("priya-tom", limit=1).next_cursor
    assert events_cursor is not None
    with pytest.raises(ValueError, match="^cursor belongs to another listing"):
        memory.conversations(cursor=events_cursor)


def test_the_graph_can_be_limited_to_the_most_recent_events(memory: Memory) -> None:
    whole = memory.graph("priya-tom")
    recent = memory.graph("priya-tom", max_nodes=2)
    assert recent.counts.events == 2
    assert recent.limits.events_total == whole.counts.events
    assert recent.limits.events_omitted == whole.counts.events - 2


def test_no_memory_is_not_found(memory: Memory) -> None:
    with pytest.raises(NotFound, match="no memory for conversation 'nobody'"):
        memory.query("anything?", conversation_id="nobody")
    with pytest.raises(NotFound):
        memory.graph("nobody")
    with pytest.raises(NotFound):
        memory.events("nobody")
    with pytest.raises(NotFound):
        memory.query("Who is Biscuit?", conversation_id="priya-tom", tenant="someone-else")


def test_bad_arguments_name_the_rule(memory: Memory) -> None:
    with pytest.raises(BadRequest, match="give exactly one scope"):
        memory.query("Who?", conversation_id="priya-tom", subject_id="cust-1")
    with pytest.raises(BadRequest, match="question"):
        memory.query("   ", conversation_id="priya-tom")
    with pytest.raises(TypeError, match="not both"):
        memory.query(QueryRequest(question="Who?", conversation_id="priya-tom"), budget_turns=3)
    with pytest.raises(BadRequest, match="timestamp"):
        memory.add({"conversation_id": "c", "turn_id": "1", "speaker": "A", "text": "hi", "timestamp": 5})
    with pytest.raises(BadRequest, match="conversation_id: .*'/'"):
        memory.forget("a/b")


def test_forget_deletes_the_conversation_and_it_can_be_added_again(memory: Memory) -> None:
    turns = [Turn(conversation_id="short-lived", turn_id=f"T{i}", speaker=speaker, text=text,
                  timestamp=f"2024-05-01T10:0{i}:00+00:00")
             for i, (speaker, text) in enumerate([("Ann", "My sister Jo moves to Lisbon in June."),
                                                  ("Bob", "Lisbon! Is she taking the cat?")])]
    memory.add(turns)
    assert memory.query("Where is Jo moving?", conversation_id="short-lived").turn_ids
    result = memory.forget("short-lived")
    assert result.events_deleted > 0 and not result.forget_published
    with pytest.raises(NotFound):
        memory.query("Where is Jo moving?", conversation_id="short-lived")
    assert memory.forget("short-lived").events_deleted == 0
    memory.add(turns[0])
    assert memory.query("Where is Jo moving?", conversation_id="short-lived").turn_ids == ["T0"]


def test_close_releases_the_embedded_stores(tmp_path: Path) -> None:
    settings = library_settings(tmp_path)
    with Memory(settings) as first:
        first.add(sample_turns()[:4])
    # An embedded store belongs to one process and object at a time: reopening works only after close.
    with Memory(settings) as second:
        assert second.query("What did the client change?", conversation_id="priya-tom").turn_ids
    second.close()  # twice is fine


def test_an_engine_and_a_pipeline_config_replace_what_the_settings_choose(memory: Memory) -> None:
    """An experiment's own query engine and write path over the stores another Memory holds (which stay open)."""
    turns = [Turn(conversation_id="configured", turn_id=f"T{i}", speaker=("Ann", "Bob")[i % 2],
                  text=f"Day {i} of the Lisbon trip: we walked to the tram museum.",
                  timestamp=f"2024-05-0{i + 1}T10:00:00+00:00") for i in range(5)]
    batches: list[int] = []
    with Memory(memory.settings, stores=memory.stores, embedder=memory.embedder,
                engine_config=EngineConfig(ranking=RankingConfig(walk_weight=0.0)),
                pipeline_config=PipelineConfig(batch_turns=2)) as experiment:
        experiment.add(turns, progress=batches.append)
        assert batches == [2, 2, 1]
        assert experiment.engine.config.ranking.walk_weight == 0.0
        assert memory.engine.config.ranking.walk_weight > 0.0
        assert experiment.query("Where did we walk?", conversation_id="configured").turn_ids
    assert memory.query("Where did we walk?", conversation_id="configured").turn_ids
    memory.forget("configured")


def _said(turn_id: str, text: str, minute: int) -> Turn:
    return Turn(conversation_id="one-id-one-turn", turn_id=turn_id, speaker="Ann", text=text,
                timestamp=f"2024-05-01T10:{minute:02d}:00+00:00")


def test_a_turn_id_names_one_turn_and_the_same_turn_again_changes_nothing(memory: Memory) -> None:
    """A turn under an id its conversation has for another turn is refused (in the same call or after memory has
    the first), naming the turn and nothing written; the same turn again, in the call or later, changes nothing."""
    red, price = _said("t1", "I bought a red bike today.", 1), _said("t2", "It cost 300 dollars.", 2)
    blue = _said("t1", "I bought a blue bike today.", 3)
    with pytest.raises(BadRequest) as refused:
        memory.add([red, price, blue])
    assert [e.field for e in refused.value.errors] == ["[2].turn_id"]
    assert "[0] has another turn under this id" in refused.value.errors[0].message
    with pytest.raises(NotFound):
        memory.events("one-id-one-turn")

    memory.add([red, price, red])

    def stored() -> tuple[list[list[str]], dict[str, str]]:
        events = [e.turn_ids for e in memory.stores.vectors.conversation_events("default", "one-id-one-turn")]
        turns = {t.turn_id: t.text for t in memory.stores.vectors.conversation_turns("default", "one-id-one-turn")}
        return events, turns

    before = stored()
    assert before == ([["t1", "t2"]], {"t1": red.text, "t2": price.text})
    with pytest.raises(BadRequest, match="'t1' of conversation 'one-id-one-turn': memory has another turn"):
        memory.add([_said("t3", "It has a basket.", 4), blue])
    assert stored() == before
    memory.add([price, red])
    assert stored() == before
    # A resend stamped with the time it was sent (as a client or the MCP tool may stamp it) is the same turn.
    memory.add([red.model_copy(update={"timestamp": red.timestamp.replace(year=2030)})])
    assert stored() == before
    memory.forget("one-id-one-turn")
