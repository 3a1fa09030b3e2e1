"""The worker's batch step without Kafka: raw turns-topic records + table state in, store writes + new state out.

The memory is built by the in-process ``MemoryPipeline`` (the same ``ingest``/``write`` code and the same
``ConversationMemory`` as ``compassmem ingest``); this module only adds what a stream needs around it:

- **Exactly-once effect on the state, at-least-once delivery.** Each conversation's table record carries the
  offset of the last turns-topic record it reflects. After a kill -9 the table may be ahead of the committed
  offsets; redelivered records at or below that offset are skipped, the rest are applied. The stores are
  written (and flushed) before the new state is handed back, and the state is written before the offsets are
  committed (the Faust agent does that), so every crash point leads to the same final memory.
- **Markers in the log.** Idle closes and forgets are records of the turns topic (see ``messages.py``), applied in
  log order, so a replay reproduces them exactly.
- **Freshness.** After each batch a conversation's open segment is upserted to the vector store as a provisional
  event (``provisional=True``, the id its final event will have); a provisional event whose segment was merged
  into an older event is deleted.
- **Poison turns.** If the processors raise, the batch is redone from its starting state one turn at a time; a
  turn that raises again goes to the dead-letter topic and its conversation continues without it. Store errors
  are not a turn's fault: they propagate, so the worker stops and the batch is redelivered.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from compassmem.embedding import Embedder
from compassmem.models import Cluster, Event, IndexedTurn, Relation, partition_key
from compassmem.pipeline import MemoryPipeline, PipelineConfig, PipelineObserver
from compassmem.processors.conversation_memory import ConversationHealth, ConversationMemory
from compassmem.processors.event_frames import build_event, indexed_turns
from compassmem.processors.segmentation import BoundaryReason, Segment
from compassmem.sinks.batching import GraphSink, Record, Sink, VectorSink, event_keyword_vector, turn_keyword_vector
from compassmem.sinks.factory import Stores
from compassmem.sinks.failures import is_store_unavailable
from compassmem.streams.decoding import ForgetItem, IdleCloseItem, RawRecord, TurnItem, decode_turns_record
from compassmem.streams.messages import (
    CONTROL_HEADER,
    ChangeOp,
    ControlKind,
    ClusterChange,
    DeadLetter,
    DeadLetterReason,
    DeadLetterStage,
    EventChange,
    ForgetCommand,
    RelationChange,
)
from compassmem.streams.state import ConversationRecord, RecordHeader, decode_header, decode_record, encode_record

log = structlog.get_logger(__name__)


class StoreWriteError(RuntimeError):
    """A store rejected a write: not the fault of any one turn's content as far as the processors can tell, so
    it must not send turns to the dead-letter topic at stage ``process``."""


class StoreUnavailableError(StoreWriteError):
    """A store could not be reached (connection refused, timed out, still loading): wait and retry the batch."""


def store_write_error(store: str, error: Exception) -> StoreWriteError:
    kind = StoreUnavailableError if is_store_unavailable(error) else StoreWriteError
    return kind(f"{store} write failed: {error!r}")


def tombstone_key(partition: int, tenant: str, conversation_id: str | None = None) -> str:
    """Key of the tombstones table: forgets are per turns-topic partition, at the marker's offset there."""
    scope = partition_key(tenant, conversation_id) if conversation_id else tenant
    return f"{partition}|{scope}"


def forget_source_key(partition: int, source_partition: int, source_offset: int) -> str:
    """Key of the tombstones table: the offset where a control-topic command's marker took effect in a partition,
    so a second broadcast of the same command (after a crash of the control agent) changes nothing."""
    return f"{partition}|@{source_partition}:{source_offset}"


class _GuardedSink(Sink):
    """Marks store failures as such (see StoreWriteError)."""

    def __init__(self, inner: Sink, name: str) -> None:
        self._inner = inner
        self._name = name

    def add(self, record: Record) -> None:
        self._inner.add(record)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except Exception as error:
            raise store_write_error(self._name, error) from error

    def discard(self) -> None:
        self._inner.discard()


class ChangeFeed(Sink):
    """Collects what the pipeline wrote, to publish on the change-feed topics once the stores have it."""

    def __init__(self) -> None:
        self.events: dict[str, EventChange] = {}
        self.relations: dict[str, RelationChange] = {}
        self.clusters: dict[str, ClusterChange] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self.upsert_event(record)
        elif isinstance(record, Relation):
            self.relations[record.relation_id] = RelationChange(relation=record)
        elif isinstance(record, Cluster):
            self.clusters[record.cluster_id] = ClusterChange(cluster=record.model_copy(update={"centroid": []}))

    def upsert_event(self, event: Event) -> None:
        self.events[f"event:{event.event_id}"] = EventChange(
            op=ChangeOp.UPSERT, tenant=event.tenant, conversation_id=event.conversation_id,
            event_id=event.event_id, event=event.model_copy(update={"embedding": None}),
        )

    def wrote_event(self, event_id: str) -> bool:
        """Whether this batch upserted a final (not provisional) version of the event."""
        change = self.events.get(f"event:{event_id}")
        return change is not None and change.event is not None and not change.event.provisional

    def delete_event(self, tenant: str, conversation_id: str, event_id: str) -> None:
        self.events[f"event:{event_id}"] = EventChange(
            op=ChangeOp.DELETE, tenant=tenant, conversation_id=conversation_id, event_id=event_id
        )

    def forget(self, command: ForgetCommand, conversation_id: str) -> None:
        self.events[f"forget:{command.tenant}/{conversation_id}"] = EventChange(
            op=ChangeOp.FORGET, tenant=command.tenant, conversation_id=conversation_id
        )

    def flush(self) -> None:
        """Nothing to write: the records are taken by ``take()`` after the batch."""

    def take(self) -> tuple[list[EventChange], list[RelationChange], list[ClusterChange]]:
        taken = list(self.events.values()), list(self.relations.values()), list(self.clusters.values())
        self.events, self.relations, self.clusters = {}, {}, {}
        return taken


@dataclass
class BatchInput:
    records: Sequence[RawRecord]
    # Table values (encoded ConversationRecord) for the batch's conversations, and for forgets in the batch every
    # conversation of their tenant that the table holds.
    states: dict[str, bytes]
    # Tombstones table: tombstone_key(...) -> offset of the forget marker in that partition.
    tombstones: dict[str, int]


@dataclass
class BatchStats:
    records: int = 0
    applied_turns: int = 0
    replayed_skipped: int = 0
    forgotten_dropped: int = 0
    idle_closed: int = 0
    forgets: int = 0
    dead_letters: int = 0
    careful_mode: bool = False


@dataclass
class BatchOutput:
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # key -> (new table value or None to delete, the partition the key lives on)
    states: dict[str, tuple[bytes | None, int]] = field(default_factory=dict)
    tombstones: dict[str, tuple[int, int]] = field(default_factory=dict)
    event_changes: list[EventChange] = field(default_factory=list)
    relation_changes: list[RelationChange] = field(default_factory=list)
    cluster_changes: list[ClusterChange] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    # Health counts of the conversations the batch changed (None: forgotten), for the memory-health metrics.
    health: dict[str, ConversationHealth | None] = field(default_factory=dict)


@dataclass
class _Live:
    """A conversation during a batch: its header (mutated as records apply) and the table bytes it came from."""

    header: RecordHeader
    source: bytes | None
    touched: bool = False


class MemoryStreamProcessor:
    """Applies batches of turns-topic records. Not thread-safe: the worker calls it from one thread at a time."""

    def __init__(self, embedder: Embedder, stores: Stores, config: PipelineConfig | None = None,
                 clock: Callable[[], float] = time.time, max_cached_conversations: int = 256,
                 observer: PipelineObserver | None = None) -> None:
        self.stores = stores
        self.feed = ChangeFeed()
        self._vector_sink = _GuardedSink(VectorSink(stores.vectors), "vector store")
        self._graph_sink = _GuardedSink(GraphSink(stores.graph), "graph store")
        self.pipeline = MemoryPipeline(embedder, [self._vector_sink, self._graph_sink, self.feed], config, observer)
        self._clock = clock
        # key -> the table bytes its live ConversationMemory in pipeline.memories was built from. A table value
        # that is another object (recovered after a rebalance, or deleted) makes the memory stale.
        self._sources: dict[str, bytes | None] = {}
        # Least recently used first. Live memories are a cache of the table: bounded, because each costs memory
        # and the pipeline's per-batch summary walks all of them.
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._max_cached = max_cached_conversations

    # -- batch ---------------------------------------------------------------------------------------------------

    def process(self, batch: BatchInput) -> BatchOutput:
        try:
            try:
                return self._process(batch, careful=False)
            except StoreWriteError:
                raise
            except Exception as error:
                log.warning("stream.batch_failed_retrying_turn_by_turn", error=repr(error),
                            records=len(batch.records))
                self.feed.take()
                return self._process(batch, careful=True)
        except StoreWriteError:
            self._reset_after_store_failure()
            raise

    def _reset_after_store_failure(self) -> None:
        """The batch comes again from its starting state: drop half-built memories and unwritten records."""
        for key in list(self.pipeline.memories):
            self._forget_live(key)
        for sink in self.pipeline.sinks:
            sink.discard()
        self.feed.take()

    def process_isolating(self, batch: BatchInput, attempts: int = 3, backoff_s: float = 0.5,
                          sleep: Callable[[float], None] = time.sleep) -> BatchOutput:
        """A batch the stores keep refusing, one conversation at a time: whatever a store still refuses after
        ``attempts`` tries goes to the dead-letter topic at stage ``store`` (its conversation's memory stays as it
        was, and both stores are brought to agree on which of its events exist), the rest is applied.

        Forget markers keep their place: the records between two of them form one group, split by key.
        An unavailable store propagates (``StoreUnavailableError``): the worker waits for it instead.
        """
        out = BatchOutput()
        states, tombstones = dict(batch.states), dict(batch.tombstones)
        for group in _isolation_groups(batch.records):
            part = BatchInput(records=group, states=states, tombstones=tombstones)
            for attempt in range(1, attempts + 1):
                try:
                    result = self.process(part)
                    break
                except StoreUnavailableError:
                    raise
                except StoreWriteError as error:
                    if attempt < attempts:
                        sleep(backoff_s * 2 ** (attempt - 1))
                        continue
                    result = self._store_refused(part, error)
            _merge_output(out, result, states, tombstones)
        return out

    def _store_refused(self, part: BatchInput, error: StoreWriteError) -> BatchOutput:
        """Dead-letter one conversation's turns the stores refused, and move its position past them."""
        out = BatchOutput()
        out.stats.records = len(part.records)
        turns: list[TurnItem] = []
        for record in part.records:
            item = decode_turns_record(record)
            if isinstance(item, DeadLetter):
                out.dead_letters.append(item)
            elif isinstance(item, TurnItem):
                turns.append(item)
                out.dead_letters.append(record.dead_letter(
                    DeadLetterStage.STORE, DeadLetterReason.STORE_REJECTED,
                    f"the stores refused this conversation's writes ({error}); its memory stays as it was before",
                ))
        out.stats.dead_letters = len(out.dead_letters)
        if not turns:
            return out
        turn, partition = turns[0].turn, turns[0].record.partition
        source = part.states.get(turn.key)
        record = decode_record(source) if source is not None else ConversationRecord(
            header=RecordHeader(tenant=turn.tenant, conversation_id=turn.conversation_id, partition=partition))
        if record.header.partition == partition:
            record.header.last_offset = max(record.header.last_offset, *(item.record.offset for item in turns))
            out.states[turn.key] = (encode_record(record), partition)
            self._forget_live(turn.key)
        self._reconcile(turn.tenant, turn.conversation_id)
        log.error("stream.store_refused_conversation", key=turn.key, turns=len(turns), error=repr(error))
        return out

    def _reconcile(self, tenant: str, conversation_id: str) -> None:
        """Delete the events that only one store holds: a half-written batch must not leave them disagreeing."""
        vector_ids = {e.event_id for e in self.stores.vectors.conversation_events(tenant, conversation_id)}
        graph_ids = {node for node, data in self.stores.graph.conversation_graph(tenant, conversation_id)
                     .nodes(data=True) if data.get("kind") == "event"}
        only_one = sorted(vector_ids ^ graph_ids)
        if only_one:
            self.stores.vectors.delete_events(tenant, only_one)
            self.stores.graph.delete_events(tenant, conversation_id, only_one)
            for event_id in only_one:
                self.feed.delete_event(tenant, conversation_id, event_id)
            log.warning("stream.stores_reconciled", tenant=tenant, conversation_id=conversation_id,
                        deleted_events=len(only_one))

    def _process(self, batch: BatchInput, careful: bool) -> BatchOutput:
        # A private copy: a forget removes entries from it (so a later turn of the same conversation in this batch
        # starts a new memory), and a careful retry must start again from the original.
        batch = BatchInput(records=batch.records, states=dict(batch.states), tombstones=dict(batch.tombstones))
        out = BatchOutput()
        out.stats.records = len(batch.records)
        out.stats.careful_mode = careful
        live: dict[str, _Live] = {}
        tombstones = batch.tombstones
        if careful:
            # Start over from the batch's starting state: the failed attempt may have half-changed memories.
            for key in list(self.pipeline.memories):
                self._forget_live(key)
        run: list[TurnItem] = []
        for record in batch.records:
            item = decode_turns_record(record)
            if isinstance(item, DeadLetter):
                out.dead_letters.append(item)
                continue
            if isinstance(item, TurnItem):
                self._queue_turn(item, batch, live, tombstones, run, out)
                continue
            self._apply_run(run, live, out, careful)
            if isinstance(item, IdleCloseItem):
                self._idle_close(item, batch, live, out)
            else:
                self._forget(item, batch, live, tombstones, out)
        self._apply_run(run, live, out, careful)
        self._provisional_events(live)
        for key, entry in live.items():
            if entry.touched:
                memory = self.pipeline.memories.get(key)
                # In the header too: the worker's health gauges cover every conversation it owns, read from the
                # table without decoding whole states (after a restart or a rebalance as well).
                entry.header.health = memory.health() if memory else ConversationHealth()
                value = encode_record(ConversationRecord(header=entry.header,
                                                         memory=memory.to_state() if memory else None))
                out.states[key] = (value, entry.header.partition)
                self._sources[key] = value
                out.health[key] = entry.header.health if memory else None
            if key in self.pipeline.memories:
                self._recent[key] = None
                self._recent.move_to_end(key)
        while len(self._recent) > self._max_cached:
            self._forget_live(next(iter(self._recent)))
        out.event_changes, out.relation_changes, out.cluster_changes = self.feed.take()
        out.stats.dead_letters = len(out.dead_letters)
        return out

    # -- conversations -------------------------------------------------------------------------------------------

    def _live(self, key: str, tenant: str, conversation_id: str, partition: int, batch: BatchInput,
              live: dict[str, _Live]) -> _Live:
        entry = live.get(key)
        if entry is not None:
            return entry
        source = batch.states.get(key)
        if source is None:
            header = RecordHeader(tenant=tenant, conversation_id=conversation_id, partition=partition)
            self._forget_live(key)
        else:
            header = decode_header(source)
            if self._sources.get(key) is not source or key not in self.pipeline.memories:
                self._load(key, source)
        entry = live[key] = _Live(header=header, source=source)
        return entry

    def _load(self, key: str, source: bytes) -> None:
        record = decode_record(source)
        memory = self.pipeline.memory_for(record.header.tenant, record.header.conversation_id)
        if record.memory is not None:
            memory.restore(record.memory)
        self._sources[key] = source

    def _forget_live(self, key: str) -> None:
        self.pipeline.memories.pop(key, None)
        self._sources.pop(key, None)
        self._recent.pop(key, None)

    def _queue_turn(self, item: TurnItem, batch: BatchInput, live: dict[str, _Live], tombstones: dict[str, int],
                    run: list[TurnItem], out: BatchOutput) -> None:
        turn, record = item.turn, item.record
        for scope in (tombstone_key(record.partition, turn.tenant),
                      tombstone_key(record.partition, turn.tenant, turn.conversation_id)):
            if record.offset < tombstones.get(scope, -1):
                # Before a forget in the log: only a replay gets here, and the forget must win.
                out.stats.forgotten_dropped += 1
                return
        entry = self._live(turn.key, turn.tenant, turn.conversation_id, record.partition, batch, live)
        if entry.header.partition != record.partition:
            out.dead_letters.append(record.dead_letter(
                DeadLetterStage.ROUTE, DeadLetterReason.WRONG_PARTITION,
                f"conversation {turn.key!r} lives on partition {entry.header.partition}, this turn came on "
                f"partition {record.partition}; its order relative to the rest cannot be guaranteed",
            ))
            return
        if record.offset <= entry.header.last_offset:
            out.stats.replayed_skipped += 1  # already in the state: redelivered after a crash
            return
        entry.header.last_offset = record.offset
        entry.header.last_turn_id = turn.turn_id
        entry.header.updated_at = self._clock()
        entry.touched = True
        run.append(item)

    def _apply_run(self, run: list[TurnItem], live: dict[str, _Live], out: BatchOutput, careful: bool) -> None:
        if not run:
            return
        turns = [item.turn for item in run]
        if not careful:
            self.pipeline.ingest(turns, close_at_end=False)
            out.stats.applied_turns += len(turns)
        else:
            for item in run:
                if self._ingest_one(item, out):
                    out.stats.applied_turns += 1
        run.clear()

    def _ingest_one(self, item: TurnItem, out: BatchOutput) -> bool:
        turn = item.turn
        memory = self.pipeline.memories.get(turn.key)
        before = memory.to_state().model_copy(deep=True) if memory is not None else None
        try:
            self.pipeline.ingest([turn], close_at_end=False)
            return True
        except StoreWriteError:
            raise
        except Exception as error:
            log.error("stream.turn_failed", key=turn.key, turn_id=turn.turn_id, error=repr(error))
            out.dead_letters.append(item.record.dead_letter(
                DeadLetterStage.PROCESS, DeadLetterReason.PROCESSING_ERROR, f"processing turn {turn.turn_id!r} raised {error!r}"
            ))
            if before is None:
                self.pipeline.memories.pop(turn.key, None)
            else:
                self.pipeline.memories[turn.key].restore(before)
            return False

    # -- markers -------------------------------------------------------------------------------------------------

    def _idle_close(self, item: IdleCloseItem, batch: BatchInput, live: dict[str, _Live], out: BatchOutput) -> None:
        marker, record = item.marker, item.record
        if marker.key not in live and marker.key not in batch.states:
            return  # forgotten meanwhile, or never seen: nothing is open
        entry = self._live(marker.key, marker.tenant, marker.conversation_id, record.partition, batch, live)
        if entry.header.partition != record.partition or record.offset <= entry.header.last_offset:
            return
        if entry.header.last_offset == marker.after_offset:
            memory = self.pipeline.memories.get(marker.key)
            if memory is not None and memory.segmenter.open_turns:
                self.pipeline.write(memory.close_open_segment(BoundaryReason.IDLE))
                out.stats.idle_closed += 1
        # Stale or not, the marker is now behind this conversation's position in the log.
        entry.header.last_offset = record.offset
        entry.touched = True

    def _forget(self, item: ForgetItem, batch: BatchInput, live: dict[str, _Live], tombstones: dict[str, int],
                out: BatchOutput) -> None:
        command, record = item.marker.forget, item.record
        source = forget_source_key(record.partition, item.marker.source_partition, item.marker.source_offset)
        if tombstones.get(source, record.offset) != record.offset:
            return  # the same command broadcast again: it took effect at its first marker
        scope = tombstone_key(record.partition, command.tenant, command.conversation_id)
        if record.offset <= tombstones.get(scope, -1):
            return  # applied before a crash
        tombstones[scope] = record.offset
        out.tombstones[scope] = (record.offset, record.partition)
        tombstones[source] = record.offset
        out.tombstones[source] = (record.offset, record.partition)
        out.stats.forgets += 1
        for key in sorted(set(batch.states) | set(live)):
            entry = live.get(key)
            header = entry.header if entry is not None else decode_header(batch.states[key])
            if header.partition != record.partition or not command.covers(header.tenant, header.conversation_id):
                continue
            # Only conversations of this partition: each partition deletes at its own position in the log, so
            # one partition never deletes what another wrote after its forget.
            self.stores.vectors.delete_conversation(header.tenant, header.conversation_id)
            self.stores.graph.delete_conversation(header.tenant, header.conversation_id)
            self.feed.forget(command, header.conversation_id)
            self._forget_live(key)
            live.pop(key, None)
            batch.states.pop(key, None)
            out.states[key] = (None, record.partition)
            out.health[key] = None
            log.info("stream.conversation_forgotten", tenant=header.tenant, conversation_id=header.conversation_id,
                     partition=record.partition, offset=record.offset)

    # -- freshness -----------------------------------------------------------------------------------------------

    def _provisional_events(self, live: dict[str, _Live]) -> None:
        """Upsert each touched conversation's open segment as a provisional event; delete ones left stale.

        Written to the store without a flush of their own (a flush costs ~12 ms on qdrant-edge, and this runs every
        batch): the store's write-ahead log already holds them when the call returns, and the next batch's
        flush makes them durable with everything else.
        """
        stale: list[tuple[str, str, str]] = []
        fresh: list[Event] = []
        # The open turns too, under the provisional event: a query returns turn ids, so a turn is queryable
        # only once its own point exists. Closing rewrites the same points with the final event id.
        fresh_turns: list[IndexedTurn] = []
        for key, entry in live.items():
            if not entry.touched:
                continue
            memory = self.pipeline.memories.get(key)
            header = entry.header
            current = provisional_event(memory) if memory is not None else None
            header.open_turns = len(memory.segmenter.open_turns) if memory is not None else 0
            previous = header.provisional_event_id
            if current is not None and memory is not None:
                fresh.append(current)
                fresh_turns.extend(indexed_turns(open_segment(memory), current.event_id))
                self.feed.upsert_event(current)
            if previous and previous != (current.event_id if current else None) and memory is not None \
                    and not self.feed.wrote_event(previous):
                # Its segment closed in this batch (it was open at the end of the last one) but no event of that
                # id was written: it was merged into an older event, and the provisional point would otherwise
                # linger. (The memory cannot say: the event may already have left its hot window.)
                stale.append((header.tenant, header.conversation_id, previous))
            header.provisional_event_id = current.event_id if current is not None else None
        try:
            if fresh:
                self.stores.vectors.upsert_events(fresh, [event_keyword_vector(event) for event in fresh])
                self.stores.vectors.upsert_turns(fresh_turns, [turn_keyword_vector(turn) for turn in fresh_turns])
            for tenant, conversation_id, event_id in stale:
                self.stores.vectors.delete_events(tenant, [event_id])
                self.feed.delete_event(tenant, conversation_id, event_id)
        except Exception as error:
            raise store_write_error("vector store", error) from error

    # -- idle detection (called by the worker's timer) -----------------------------------------------------------

    def idle_conversations(self, headers: Sequence[RecordHeader], idle_s: float) -> list[RecordHeader]:
        now = self._clock()
        return [h for h in headers if h.open_turns and now - h.updated_at >= idle_s]


def _isolation_groups(records: Sequence[RawRecord]) -> list[list[RawRecord]]:
    """Records split by key, in order; a forget marker is a group of its own and closes the groups before it."""
    groups: list[list[RawRecord]] = []
    open_groups: dict[bytes | None, list[RawRecord]] = {}
    for record in records:
        if record.header(CONTROL_HEADER) == ControlKind.FORGET.value.encode():
            groups.extend(open_groups.values())
            open_groups = {}
            groups.append([record])
            continue
        open_groups.setdefault(record.key, []).append(record)
    groups.extend(open_groups.values())
    return groups


def _merge_output(into: BatchOutput, part: BatchOutput, states: dict[str, bytes],
                  tombstones: dict[str, int]) -> None:
    """Add a group's output to the batch's, and carry its new table values into the next group's input."""
    into.dead_letters.extend(part.dead_letters)
    into.event_changes.extend(part.event_changes)
    into.relation_changes.extend(part.relation_changes)
    into.cluster_changes.extend(part.cluster_changes)
    into.health.update(part.health)
    for key, (value, partition) in part.states.items():
        into.states[key] = (value, partition)
        if value is None:
            states.pop(key, None)
        else:
            states[key] = value
    for key, (offset, partition) in part.tombstones.items():
        into.tombstones[key] = (offset, partition)
        tombstones[key] = offset
    for name in ("records", "applied_turns", "replayed_skipped", "forgotten_dropped", "idle_closed", "forgets",
                 "dead_letters"):
        setattr(into.stats, name, getattr(into.stats, name) + getattr(part.stats, name))
    into.stats.careful_mode = into.stats.careful_mode or part.stats.careful_mode


def open_segment(memory: ConversationMemory) -> Segment:
    return Segment(turns=list(memory.segmenter.open_turns), boundary_reason=BoundaryReason.END)


def provisional_event(memory: ConversationMemory) -> Event | None:
    """The open segment as the event it would become if it closed now (same id), marked provisional."""
    if not memory.segmenter.open_turns:
        return None
    return build_event(open_segment(memory)).model_copy(update={"provisional": True})
