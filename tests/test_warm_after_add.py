"""``Memory.add`` leaves the events it wrote in the query's hot tier (``warm``): the queries that follow a write are
served without loading their candidates from the stores, the tier stays within its bound, and nothing it holds
afterwards is older than the stores (real embedded stores)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from compassmem import Memory
from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.models import Event, Observation, TemporalInfo, Turn
from compassmem.sinks.batching import ConversationForgotten, ProvisionalRetired, WrittenEvents
from compassmem.write.importers import read_turns

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
QUESTION = QueryRequest(conversation_id="priya-tom", question="Why was the Atlas launch moved?")


def _counting_loads(memory: Memory) -> list[list[str]]:
    """Every load of the hot tier from the stores from now on: the event ids it read."""
    loads: list[list[str]] = []
    load = memory.hot._load

    def counted(tenant: str, event_ids: list[str], with_turns: bool = True):  # noqa: ANN202
        loads.append(list(event_ids))
        return load(tenant, event_ids, with_turns)

    memory.hot._load = counted  # type: ignore[method-assign]
    return loads


@pytest.mark.parametrize("warm", [True, False])
def test_the_queries_after_an_add_find_what_it_wrote_in_the_hot_tier(embedder, tmp_path: Path, warm: bool) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        turns = list(read_turns(SAMPLE))
        memory.add(turns, warm=warm)
        stored = memory.stores.vectors.conversation_events("default", "priya-tom")
        held_after_add = (memory.hot.turns, len(memory.hot))
        loads = _counting_loads(memory)
        answer = memory.query(QUESTION)
    assert answer.turn_ids
    if warm:
        assert held_after_add == (len(turns), len(stored))
        assert loads == []
    else:
        assert held_after_add == (0, 0)
        assert loads  # the same query reads its candidates from the stores


def _turns(conversation_id: str, count: int, start: datetime) -> list[Turn]:
    topics = ["the garden", "a bread recipe", "the bike repair", "a trip to Lyon", "the tax forms"]
    return [Turn(conversation_id=conversation_id, turn_id=f"t{n}", speaker=("Ann", "Bob")[n % 2],
                 text=f"About {topics[(n // 6) % len(topics)]}: note number {n} says something new.",
                 timestamp=start + timedelta(minutes=n), session_id=str(n // 60))
            for n in range(count)]


def test_warming_keeps_within_the_tiers_bound_and_takes_the_latest_events(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path, api_hot_turns=100), embedder=embedder) as memory:
        memory.add(_turns("long", 240, T0))
        held = {event_id for tenant, event_id in memory.hot._entries}
        stored = {e.event_id: e for e in memory.stores.vectors.conversation_events("default", "long")}
    assert 0 < memory.hot.turns <= 100
    latest = max(stored.values(), key=lambda e: e.temporal_info.end)
    earliest = min(stored.values(), key=lambda e: e.temporal_info.start)
    assert latest.event_id in held and earliest.event_id not in held


def test_what_the_tier_holds_after_a_later_add_is_what_the_stores_hold(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        first = _turns("grow", 60, T0)
        memory.add(first)
        memory.query(QueryRequest(conversation_id="grow", question="What about the bread recipe?"))
        # The same conversation goes on (its open segment was closed; merges may rewrite older events).
        later = [turn.model_copy(update={"turn_id": f"later-{turn.turn_id}",
                                         "timestamp": turn.timestamp + timedelta(days=1)}) for turn in first[:30]]
        memory.add(later)
        stored = {e.event_id: sorted(e.turn_ids) for e in memory.stores.vectors.conversation_events("default", "grow")}
        held = {event_id: sorted(entry.turn_ids) for (_, event_id), entry in memory.hot._entries.items()}
        assert held and all(stored.get(event_id) == turn_ids for event_id, turn_ids in held.items())
        # Every event of the later turns is held: the query about them needs no load.
        later_events = {e for e, ids in stored.items() if any(t.startswith("later-") for t in ids)}
        assert later_events <= set(held)


def _event(event_id: str, conversation_id: str = "c1", provisional: bool = False) -> Event:
    return Event(tenant="acme", event_id=event_id, conversation_id=conversation_id, summary=event_id,
                 observations=[Observation(turn_id=f"{event_id}-t{n}", speaker="Ann", text="hello", timestamp=T0)
                               for n in range(2)],
                 participants=["Ann"], temporal_info=TemporalInfo(start=T0, end=T0), provisional=provisional)


def test_written_events_are_those_flushed_latest_write_last() -> None:
    sink = WrittenEvents()
    for record in (_event("e1"), _event("e2"), _event("p1", provisional=True), _event("e1")):
        sink.add(record)
    assert sink.take() == []  # nothing flushed yet
    sink.flush()
    sink.add(_event("e3"))
    sink.discard()  # a failed flush: e3 was never written
    sink.add(_event("e4", conversation_id="c2"))
    sink.add(_event("e5"))
    sink.add(ProvisionalRetired(tenant="acme", conversation_id="c1", event_id="e5"))
    sink.flush()
    taken = sink.take()
    assert [(e.event_id, e.turns) for e in taken] == [("e2", 2), ("e1", 2), ("e4", 2)]
    assert sink.take() == []
    sink.add(_event("e6"))
    sink.add(_event("e7", conversation_id="c2"))
    sink.flush()
    sink.add(ConversationForgotten(tenant="acme", conversation_id="c2"))
    assert [e.event_id for e in sink.take()] == ["e6"]


def test_an_add_that_fails_part_way_leaves_nothing_cached_of_its_conversation(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    from compassmem.write.pipeline import PipelineConfig

    with Memory(Settings(data_dir=tmp_path), embedder=embedder, pipeline_config=PipelineConfig(batch_turns=20)) as memory:
        memory.add(_turns("part", 40, T0))
        assert any(event.conversation_id == "part" for event in memory.hot._entries.values())
        group = memory._writer().sink_group
        flush, calls = group.flush, []

        def failing_flush() -> None:
            calls.append(1)
            if len(calls) == 2:
                raise OSError("disk full")
            flush()

        group.flush = failing_flush  # type: ignore[method-assign]
        more = [t.model_copy(update={"turn_id": f"more-{t.turn_id}", "timestamp": t.timestamp + timedelta(days=1)})
                for t in _turns("part", 40, T0)]
        with pytest.raises(OSError, match="disk full"):
            memory.add(more)
        # The first batch was written: what the tier held of the conversation may be stale, so none of it is kept.
        assert not any(event.conversation_id == "part" for event in memory.hot._entries.values())
        group.flush = flush  # type: ignore[method-assign]
        # The next add writes what the failed one left pending, with its own: the tier then holds what the stores do.
        memory.add(_turns("other", 6, T0))
        stored = {e.event_id: sorted(e.turn_ids) for conversation in ("part", "other")
                  for e in memory.stores.vectors.conversation_events("default", conversation)}
        held = {event_id: sorted(entry.turn_ids) for (_, event_id), entry in memory.hot._entries.items()}
        assert {entry.conversation_id for entry in memory.hot._entries.values()} >= {"other"}
        assert all(stored.get(event_id) == turn_ids for event_id, turn_ids in held.items())


def test_a_forget_during_the_warming_leaves_no_word_of_it_cached(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    """Warming runs after the add's lock is released: a forget may come while it reads. What it read before the
    forget must not stay in the tier (canary word)."""
    canary = "zxqvortle"
    turns = [Turn(conversation_id="secret", turn_id=f"s{n}", speaker=("Ann", "Bob")[n % 2],
                  text=f"The {canary} plan, step {n}: we keep it between us.", timestamp=T0 + timedelta(minutes=n))
             for n in range(8)]
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        load, forgotten = memory.hot._load, []

        def load_then_forget(tenant: str, event_ids: list[str], with_turns: bool = True):  # noqa: ANN202
            read = load(tenant, event_ids, with_turns)  # read from the stores before the forget
            if not forgotten:
                forgotten.append(memory.forget("secret"))
            return read

        memory.hot._load = load_then_forget  # type: ignore[method-assign]
        memory.add(turns)
        memory.hot._load = load  # type: ignore[method-assign]
        assert forgotten and forgotten[0].events_deleted > 0
        held = [text for entry in memory.hot._entries.values() for text in entry.texts]
        assert not any(canary in text for text in held)
        assert memory.hot.turns == 0
        assert memory.stores.vectors.conversation_events("default", "secret") == []


@pytest.mark.parametrize("warm", [True, False])
def test_an_import_leaves_what_it_restored_in_the_hot_tier(embedder, tmp_path: Path, warm: bool) -> None:  # noqa: ANN001
    exported = tmp_path / "memory.jsonl"
    with Memory(Settings(data_dir=tmp_path / "source"), embedder=embedder) as source:
        source.add(list(read_turns(SAMPLE)), warm=False)
        source.add(_turns("other", 30, T0), warm=False)
        source.export(exported)
        stored = {cid: source.stores.vectors.conversation_events("default", cid) for cid in ("priya-tom", "other")}
    with Memory(Settings(data_dir=tmp_path / "target"), embedder=embedder) as target:
        target.import_(exported, warm=warm)
        held = {event_id for _, event_id in target.hot._entries}
        loads = _counting_loads(target)
        answer = target.query(QUESTION)
    assert answer.turn_ids
    if warm:
        assert held == {e.event_id for events in stored.values() for e in events}
        assert target.hot.turns == sum(len(e.observations) for events in stored.values() for e in events)
        assert loads == []
    else:
        assert held == set() and loads


def test_an_import_that_fails_part_way_leaves_nothing_in_the_hot_tier(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    from compassmem.transfer.records import ImportFailed

    exported = tmp_path / "memory.jsonl"
    with Memory(Settings(data_dir=tmp_path / "source"), embedder=embedder) as source:
        source.add(_turns("first", 30, T0), warm=False)
        source.add(_turns("second", 30, T0), warm=False)
        source.export(exported)
    with Memory(Settings(data_dir=tmp_path / "target"), embedder=embedder) as target:
        imported = target._conversation_imported

        def failing(tenant: str, conversation_id: str) -> None:  # as a store that stops answering after one
            imported(tenant, conversation_id)
            if conversation_id == "second":
                raise RuntimeError("the disk is full")

        target._conversation_imported = failing  # type: ignore[method-assign]
        with pytest.raises(ImportFailed, match="the stores hold nothing of the file"):
            target.import_(exported)
        assert target.hot.turns == 0 and len(target.hot) == 0
        assert target._written.take() == []  # nothing left over for the next add to warm
        assert target.stores.vectors.count("default") == 0
