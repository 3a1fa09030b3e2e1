"""The commit order of a batch (``streams.checkpoint.Checkpoint`` and ``sinks.sink_group.SinkGroup``).

Every participant here is a recording fake: these tests are about the ordering object itself, so each fake only
writes down when it was called (and from which thread), or raises where a test needs a step to fail. The
guarantees the order exists for (kill -9 mid-stream, two workers, forget after replay) are tested end to end on a
real broker and real stores in test_stream_delivery.py, test_streaming.py and test_stream_state.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest

from compassmem.core.contracts.dead_letters import DeadLetter, DeadLetterReason, DeadLetterStage
from compassmem.core.models import Event, IndexedTurn, Observation, Relation, RelationType, TemporalInfo
from compassmem.processors.conversation_memory import MemoryUpdate
from compassmem.sinks.batching import (
    ConversationForgotten,
    GraphSink,
    ProvisionalEvent,
    ProvisionalRetired,
    ProvisionalSink,
    Record,
    Sink,
    VectorSink,
)
from compassmem.sinks.sink_group import SinkGroup
from compassmem.streams.checkpoint import (
    Checkpoint,
    OutgoingRecord,
    OutputTopic,
    StateTable,
    TableWrite,
    outgoing_records,
    table_writes,
)
from compassmem.core.contracts.stream_records import ChangeOp, EventChange
from compassmem.streams.processor import BatchOutput

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


class Boom(RuntimeError):
    """The failure a fake was told to raise."""


class Journal:
    """What happened, in order, with the thread it happened on."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []

    def write(self, what: str) -> None:
        self.entries.append((what, threading.current_thread().name))

    @property
    def steps(self) -> list[str]:
        return [what for what, _ in self.entries]

    def thread_of(self, prefix: str) -> set[str]:
        return {thread for what, thread in self.entries if what.startswith(prefix)}


class FakeSink(Sink):
    def __init__(self, name: str, journal: Journal, fail: bool = False) -> None:
        self.name, self.journal, self.fail = name, journal, fail
        self.added: list[Record] = []
        self.flushed: list[Record] = []

    def add(self, record: Record) -> None:
        self.added.append(record)

    def flush(self) -> None:
        self.journal.write(f"flush {self.name}")
        if self.fail:
            raise Boom(f"{self.name} refused")
        self.flushed.extend(self.added)
        self.added = []

    def discard(self) -> None:
        self.journal.write(f"discard {self.name}")
        self.added = []


class FakeProducer:
    """Sends return a future the broker resolves (or fails) when ``acked`` runs, as a real producer's would."""

    def __init__(self, journal: Journal, fail_send: bool = False, fail_ack: bool = False) -> None:
        self.journal, self.fail_send, self.fail_ack = journal, fail_send, fail_ack

    async def send(self, record: OutgoingRecord) -> Awaitable[object]:
        self.journal.write(f"send {record.topic.value}")
        if self.fail_send:
            raise Boom("send failed")

        async def acked() -> None:
            await asyncio.sleep(0)
            self.journal.write(f"acked {record.topic.value}")
            if self.fail_ack:
                raise Boom("the broker did not acknowledge")

        return asyncio.ensure_future(acked())


class FakeTable:
    def __init__(self, journal: Journal, fail: bool = False) -> None:
        self.journal, self.fail = journal, fail
        self.writes: list[TableWrite] = []

    async def write(self, write: TableWrite) -> None:
        self.journal.write(f"table {write.table.value} {write.key.decode()}")
        if self.fail:
            raise Boom("changelog write failed")
        self.writes.append(write)


class FakeStages:
    def __init__(self) -> None:
        self.stages: list[str] = []
        self.updates: list[MemoryUpdate] = []

    def stage(self, stage: str, seconds: float, turns: int | None = None) -> None:
        self.stages.append(stage)

    def memory_update(self, update: MemoryUpdate) -> None:
        self.updates.append(update)


def event(event_id: str, conversation_id: str = "c1", tenant: str = "acme", provisional: bool = False) -> Event:
    return Event(tenant=tenant, event_id=event_id, conversation_id=conversation_id, summary=event_id,
                 observations=[Observation(turn_id=f"{event_id}-t", speaker="Ann", text="hello", timestamp=T0)],
                 participants=["Ann"], temporal_info=TemporalInfo(start=T0, end=T0), provisional=provisional)


def turn(turn_id: str, event_id: str, conversation_id: str = "c1") -> IndexedTurn:
    return IndexedTurn(tenant="acme", conversation_id=conversation_id, turn_id=turn_id, event_id=event_id,
                       speaker="Ann", text="hello", timestamp=T0)


def batch_output() -> BatchOutput:
    out = BatchOutput()
    out.dead_letters.append(DeadLetter(stage=DeadLetterStage.DECODE, reason_code=DeadLetterReason.NOT_JSON,
                                       reason="not json", topic="t.turns", partition=0, offset=3,
                                       original_base64="e30=", original_key_base64="YWNtZS9jMQ=="))
    out.event_changes.append(EventChange(op=ChangeOp.DELETE, tenant="acme", conversation_id="c1", event_id="e9"))
    out.states["acme/c1"] = (b"state", 0)
    out.states["acme/gone"] = (None, 0)
    out.tombstones["0|acme/gone"] = (7, 0)
    return out


class Run:
    """One checkpoint over recording fakes; ``commit`` runs it on a fresh event loop."""

    def __init__(self, store_thread: ThreadPoolExecutor, *, fail_sink: str | None = None, fail_apply: bool = False,
                 fail_send: bool = False, fail_ack: bool = False, fail_table: bool = False,
                 fail_offsets: bool = False) -> None:
        self.journal = Journal()
        self.sinks = [FakeSink(name, self.journal, fail=name == fail_sink)
                      for name in ("vector", "graph", "provisional")]
        self.discarded_state = 0
        self.sink_group = SinkGroup(self.sinks, on_discard=self._on_discard)
        self.producer = FakeProducer(self.journal, fail_send=fail_send, fail_ack=fail_ack)
        self.table = FakeTable(self.journal, fail=fail_table)
        self.stages = FakeStages()
        self.checkpoint = Checkpoint(self.sink_group, store_thread, producer=self.producer, table=self.table,
                                     observer=self.stages)
        self.fail_apply, self.fail_offsets = fail_apply, fail_offsets

    def _on_discard(self) -> None:
        self.discarded_state += 1

    def apply(self) -> BatchOutput:
        self.journal.write("apply")
        self.sink_group.add(event("e1"))
        if self.fail_apply:
            raise Boom("processing failed")
        return batch_output()

    async def acknowledge(self) -> None:
        self.journal.write("ack offsets")
        if self.fail_offsets:
            raise Boom("ack failed")

    def commit(self) -> BatchOutput:
        return asyncio.run(self.checkpoint.commit(self.apply, self.acknowledge))


@pytest.fixture
def store_thread() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="store") as executor:
        yield executor


# -- the order -------------------------------------------------------------------------------------------------


def test_a_commit_flushes_every_sink_then_produces_then_writes_the_table_then_acknowledges(
        store_thread: ThreadPoolExecutor) -> None:
    run = Run(store_thread)
    run.commit()
    assert run.journal.steps == [
        "apply", "flush vector", "flush graph", "flush provisional",
        # every record handed to the producer, then every broker acknowledgement awaited
        "send dead_letters", "send events", "acked dead_letters", "acked events",
        "table memory acme/c1", "table memory acme/gone", "table tombstones 0|acme/gone",
        "ack offsets",
    ]
    assert all(sink.flushed == [event("e1")] for sink in run.sinks)
    assert run.stages.stages == ["publish", "state"]


def test_the_stores_step_runs_on_the_store_thread_and_the_rest_on_the_event_loop(
        store_thread: ThreadPoolExecutor) -> None:
    run = Run(store_thread)
    loop_thread = threading.current_thread().name  # asyncio.run runs the loop on this thread
    run.commit()
    assert run.journal.thread_of("apply") == run.journal.thread_of("flush") == {"store_0"}
    for step in ("send", "acked", "table", "ack offsets"):
        assert run.journal.thread_of(step) == {loop_thread}, step


# -- a failure at each step stops every later one -------------------------------------------------------------------


def failing(store_thread: ThreadPoolExecutor, **fail: object) -> Run:
    run = Run(store_thread, **fail)  # type: ignore[arg-type]
    with pytest.raises(Boom):
        run.commit()
    return run


def test_a_sink_that_fails_to_flush_means_nothing_is_produced_no_table_write_and_no_ack(
        store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_sink="graph")
    assert run.journal.steps == ["apply", "flush vector", "flush graph",
                                 "discard vector", "discard graph", "discard provisional"]
    # The batch will be applied again from its starting state: nothing of this attempt is left to flush.
    assert run.discarded_state == 1 and not any(sink.added for sink in run.sinks)


def test_a_batch_that_fails_to_apply_flushes_nothing(store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_apply=True)
    assert run.journal.steps == ["apply", "discard vector", "discard graph", "discard provisional"]
    assert run.discarded_state == 1


def test_a_produce_that_fails_means_no_table_write_and_no_ack(store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_send=True)
    assert run.journal.steps[-1] == "send dead_letters"
    assert not [step for step in run.journal.steps if step.startswith(("table", "ack offsets"))]


def test_records_the_broker_does_not_acknowledge_mean_no_table_write_and_no_ack(
        store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_ack=True)
    assert "acked dead_letters" in run.journal.steps
    assert not [step for step in run.journal.steps if step.startswith(("table", "ack offsets"))]


def test_a_table_write_that_fails_means_no_ack(store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_table=True)
    assert run.journal.steps[-1] == "table memory acme/c1"
    assert "ack offsets" not in run.journal.steps


def test_a_failed_ack_is_the_last_thing_that_happens(store_thread: ThreadPoolExecutor) -> None:
    run = failing(store_thread, fail_offsets=True)
    assert run.journal.steps[-1] == "ack offsets"
    assert len(run.table.writes) == 3


def test_without_a_producer_or_table_the_stores_still_come_before_the_ack(store_thread: ThreadPoolExecutor) -> None:
    journal = Journal()
    sinks = SinkGroup([FakeSink("vector", journal)])

    async def acknowledge() -> None:
        journal.write("ack offsets")

    def apply() -> BatchOutput:
        sinks.add(event("e1"))
        return batch_output()

    asyncio.run(Checkpoint(sinks, store_thread).commit(apply, acknowledge))
    assert journal.steps == ["flush vector", "ack offsets"]


# -- what crosses to the broker --------------------------------------------------------------------------------


def test_the_records_and_table_writes_of_a_batch() -> None:
    out = batch_output()
    records = outgoing_records(out)
    assert [(r.topic, r.key) for r in records] == [(OutputTopic.DEAD_LETTERS, b"acme/c1"),
                                                   (OutputTopic.EVENTS, b"acme/c1")]
    assert DeadLetter.model_validate_json(records[0].value) == out.dead_letters[0]
    assert [(w.table, w.key, w.value, w.partition) for w in table_writes(out)] == [
        (StateTable.MEMORY, b"acme/c1", b"state", 0), (StateTable.MEMORY, b"acme/gone", None, 0),
        (StateTable.TOMBSTONES, b"0|acme/gone", b"7", 0)]


# -- the store side: SinkGroup ----------------------------------------------------------------------------


def test_sinks_flush_in_the_order_given_and_the_update_is_reported_once_flushed() -> None:
    journal, stages = Journal(), FakeStages()
    sinks = SinkGroup([FakeSink("vector", journal), FakeSink("graph", journal)], stages)
    update = MemoryUpdate()
    update.events.append(event("e1"))
    update.stage_seconds["merge"] = 0.01
    sinks.add_update(update)
    assert stages.updates == [] and stages.stages == []
    sinks.flush()
    assert journal.steps == ["flush vector", "flush graph"]
    assert stages.stages == ["store", "merge"] and stages.updates == [update]
    sinks.flush()  # nothing added since: no store stage
    assert journal.steps == ["flush vector", "flush graph"] and stages.stages == ["store", "merge"]


def test_a_discarded_update_is_never_reported() -> None:
    journal, stages = Journal(), FakeStages()
    sinks = SinkGroup([FakeSink("vector", journal, fail=True)], stages)
    update = MemoryUpdate()
    update.events.append(event("e1"))
    with pytest.raises(Boom):
        sinks.write(lambda: sinks.add_update(update))
    sinks.flush()
    assert stages.updates == [] and journal.steps == ["flush vector", "discard vector"]


class RecordingVectors:
    """The vector store calls a sink makes, by name and argument."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        self.calls.append(("delete_conversation", (tenant, conversation_id)))

    def upsert_events(self, events: list[Event], sparse: object) -> None:
        self.calls.append(("upsert_events", [(e.event_id, e.provisional) for e in events]))

    def upsert_turns(self, turns: list[IndexedTurn], sparse: object) -> None:
        self.calls.append(("upsert_turns", [(t.turn_id, t.event_id) for t in turns]))

    def delete_events(self, tenant: str, event_ids: list[str]) -> None:
        self.calls.append(("delete_events", list(event_ids)))

    def flush(self) -> None:
        self.calls.append(("flush", None))


class RecordingGraph:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        self.calls.append(("delete_conversation", (tenant, conversation_id)))

    def upsert_events(self, events: list[Event]) -> None:
        self.calls.append(("upsert_events", [e.event_id for e in events]))

    def upsert_clusters(self, clusters: list[object]) -> None:
        self.calls.append(("upsert_clusters", len(clusters)))

    def upsert_relations(self, relations: list[Relation]) -> None:
        self.calls.append(("upsert_relations", [r.relation_id for r in relations]))


def test_a_forget_in_a_batch_drops_what_came_before_it_and_deletes_before_what_comes_after() -> None:
    vectors, graph = RecordingVectors(), RecordingGraph()
    provisional = ProvisionalSink(vectors)  # type: ignore[arg-type]
    sinks = SinkGroup([VectorSink(vectors), GraphSink(graph), provisional])  # type: ignore[arg-type]
    relation = Relation(tenant="acme", conversation_id="c1", relation_id="r1", source="before", target="other",
                        type=RelationType.TEMPORAL, confidence=0.5, evidence="adjacency", created_at=T0)
    for record in (event("before"), turn("t1", "before"), relation, event("kept", conversation_id="c2"),
                   ConversationForgotten(tenant="acme", conversation_id="c1"),
                   event("after"), ProvisionalEvent(event=event("open", provisional=True),
                                                    turns=(turn("t2", "open"),)),
                   ProvisionalRetired(tenant="acme", conversation_id="c2", event_id="stale")):
        sinks.add(record)
    sinks.flush()
    assert [call for call in vectors.calls if call[0] != "flush"] == [
        ("delete_conversation", ("acme", "c1")),
        ("upsert_events", [("kept", False), ("after", False)]),
        # the provisional sink, after the vector sink: no flush of its own
        ("upsert_events", [("open", True)]), ("upsert_turns", [("t2", "open")]),
        ("delete_events", ["stale"]),
    ]
    # One store flush, started once the vector sink's own writes were made (it may end after the provisional ones).
    assert vectors.calls.count(("flush", None)) == 1 and vectors.calls.index(("flush", None)) >= 2
    assert graph.calls == [("delete_conversation", ("acme", "c1")), ("upsert_events", ["kept", "after"])]


class SlowFlushVectors(RecordingVectors):
    """A vector store whose flush (the disk's part) takes until the graph has been written, or fails once."""

    def __init__(self, graph_written: threading.Event, fail_once: bool = False) -> None:
        super().__init__()
        self.graph_written = graph_written
        self.fail_once = fail_once
        self.overlapped: list[bool] = []
        self.finished = threading.Event()

    def flush(self) -> None:
        self.calls.append(("flush", None))
        self.overlapped.append(self.graph_written.wait(timeout=10))
        if self.fail_once:
            self.fail_once = False
            raise Boom("disk full")
        self.finished.set()


class SignallingGraph(RecordingGraph):
    def __init__(self, written: threading.Event) -> None:
        super().__init__()
        self.written = written

    def upsert_events(self, events: list[Event]) -> None:
        super().upsert_events(events)
        self.written.set()


def test_the_vector_stores_flush_runs_while_the_graph_is_written_and_the_checkpoint_waits_for_it() -> None:
    written = threading.Event()
    vectors, graph = SlowFlushVectors(written), SignallingGraph(written)
    sinks = SinkGroup([VectorSink(vectors), GraphSink(graph)])  # type: ignore[arg-type]
    sinks.write(lambda: [sinks.add(record) for record in (event("e1"), turn("t1", "e1"))])
    # The store's flush saw the graph written while it ran (a flush in line would have waited out its 10 s), and
    # the batch counted as stored only once that flush had ended.
    assert vectors.overlapped == [True] and vectors.finished.is_set()
    assert graph.calls == [("upsert_events", ["e1"])]


def test_a_vector_store_flush_that_fails_fails_the_batch_and_the_redo_writes_it_again() -> None:
    written = threading.Event()
    vectors, graph = SlowFlushVectors(written, fail_once=True), SignallingGraph(written)
    sinks = SinkGroup([VectorSink(vectors), GraphSink(graph)])  # type: ignore[arg-type]
    batch = (event("e1"), turn("t1", "e1"))
    with pytest.raises(Boom, match="disk full"):
        sinks.write(lambda: [sinks.add(record) for record in batch])
    assert not vectors.finished.is_set()
    sinks.write(lambda: [sinks.add(record) for record in batch])
    assert vectors.finished.is_set()
    writes = [call for call in vectors.calls if call[0] != "flush"]
    assert writes == [("upsert_events", [("e1", False)]), ("upsert_turns", [("t1", "e1")])] * 2
    # Nothing of the failed batch was left behind to be written a third time.
    sinks.flush()
    assert vectors.calls.count(("flush", None)) == 2


def test_a_checkpoint_commit_can_run_again_after_a_failed_flush(store_thread: ThreadPoolExecutor) -> None:
    """What the worker does after a store failure: the same commit, from the start."""
    run = Run(store_thread, fail_sink="graph")
    with pytest.raises(Boom):
        run.commit()
    run.sinks[1].fail = False
    run.journal.entries.clear()
    run.commit()
    assert run.journal.steps[:4] == ["apply", "flush vector", "flush graph", "flush provisional"]
    assert run.journal.steps[-1] == "ack offsets"
    assert all(sink.flushed == [event("e1")] for sink in run.sinks[1:])
