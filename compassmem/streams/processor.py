"""The worker's batch step without Kafka: raw turns-topic records + table state in, store writes + new state out.

The memory is built by the in-process ``MemoryPipeline`` (the same ``ingest``/``write`` code and the same
``ConversationMemory`` as ``compassmem ingest``); this module only adds what a stream needs around it:

- **Exactly-once effect on the state, at-least-once delivery.** Each conversation's table record carries the
  offset of the last turns-topic record it reflects. After a kill -9 the table may be ahead of the committed
  offsets; redelivered records at or below that offset are skipped, the rest are applied. A batch only adds its
  writes to ``self.sinks``; ``checkpoint.Checkpoint`` commits them (stores flushed, then change feeds and dead
  letters, then the new state, then the offsets), so every crash point leads to the same final memory.
- **Markers in the log.** Idle closes, forgets, redactions and runtime setting changes are records of the turns
  topic (see ``core/contracts/stream_records.py``), applied in log order, so a replay reproduces them exactly. A setting marker changes
  how its partition's conversations are built from there on (``PartitionSettings``, kept in the settings table).
- **Freshness.** After each batch a conversation's open segment goes to the vector store as a provisional event
  (``provisional=True``, the id its final event will have); a provisional event whose segment was merged into an
  older event is deleted. Both through ``ProvisionalSink``, one more sink of the batch.
- **Poison turns.** If the processors raise, the batch is redone from its starting state one turn at a time; a
  turn that raises again goes to the dead-letter topic and its conversation continues without it. Store errors
  are not a turn's fault: they come from the flush and propagate (``StoreWriteError``); the worker retries the
  batch, and isolates the conversation a store keeps refusing (``process_isolating``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import structlog

from compassmem.core.contracts.dead_letters import DeadLetter, DeadLetterReason, DeadLetterStage
from compassmem.embedding.embedders import Embedder
from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import Cluster, Event, IndexedTurn, Relation, Turn, partition_key
from compassmem.write.pipeline import LlmSteps, MemoryPipeline, PipelineConfig, WriteSteps
from compassmem.processors.conversation_memory import ConversationHealth, ConversationMemory
from compassmem.processors.event_frames import build_event, indexed_turns
from compassmem.processors.segmentation import BoundaryReason, Segment, SegmentationConfig
from compassmem.write.redaction import redact_stored_turn
from compassmem.write.turn_ids import HeldTurn, TurnIdConflict, TurnIds, content_of, stored_lookup
from compassmem.library.runtime_settings import LlmSwitch, overrides
from compassmem.sinks.batching import (
    CompactingSink,
    ConversationForgotten,
    GraphSink,
    ProvisionalEvent,
    ProvisionalRetired,
    ProvisionalSink,
    Record,
    Sink,
    TurnRedacted,
    VectorSink,
)
from compassmem.sinks.sink_group import PipelineObserver, SinkGroup
from compassmem.sinks.factory import Stores
from compassmem.sinks.failures import is_store_unavailable
from compassmem.streams.decoding import (
    ForgetItem,
    IdleCloseItem,
    RawRecord,
    RedactItem,
    SettingItem,
    TurnItem,
    decode_turns_record,
)
from compassmem.core.contracts.stream_records import (
    CONTROL_HEADER,
    ChangeOp,
    ClusterChange,
    ControlKind,
    EventChange,
    PartitionSettings,
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
        with self._marking_failures():
            self._inner.flush()

    def settle(self) -> None:
        with self._marking_failures():
            self._inner.settle()

    @contextmanager
    def _marking_failures(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            raise store_write_error(self._name, error) from error

    def discard(self) -> None:
        self._inner.discard()


class ChangeFeed(Sink):
    """Collects what the batch wrote, for the change-feed topics: the processor takes it into the batch's output,
    which the checkpoint produces once the stores have it."""

    def __init__(self) -> None:
        self.events: dict[str, EventChange] = {}
        self.relations: dict[str, RelationChange] = {}
        self.clusters: dict[str, ClusterChange] = {}

    def add(self, record: Record) -> None:
        if isinstance(record, Event):
            self.upsert_event(record)
        elif isinstance(record, ProvisionalEvent):
            self.upsert_event(record.event)
        elif isinstance(record, ProvisionalRetired):
            self.delete_event(record.tenant, record.conversation_id, record.event_id)
        elif isinstance(record, ConversationForgotten):
            self.events[f"forget:{record.tenant}/{record.conversation_id}"] = EventChange(
                op=ChangeOp.FORGET, tenant=record.tenant, conversation_id=record.conversation_id
            )
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

    def flush(self) -> None:
        """Nothing to write here: ``take()`` hands the changes to the batch's output, and the checkpoint produces
        them after every store sink flushed."""

    def take(self) -> tuple[list[EventChange], list[RelationChange], list[ClusterChange]]:
        taken = list(self.events.values()), list(self.relations.values()), list(self.clusters.values())
        self.discard()
        return taken

    def discard(self) -> None:
        self.events, self.relations, self.clusters = {}, {}, {}


@dataclass
class BatchInput:
    records: Sequence[RawRecord]
    # Table values (encoded ConversationRecord) for the batch's conversations, and for forgets in the batch every
    # conversation of their tenant that the table holds.
    states: dict[str, bytes]
    # Tombstones table: tombstone_key(...) -> offset of the forget marker in that partition.
    tombstones: dict[str, int]
    # Settings table: turns partition -> the runtime settings in force there (the batch's partitions).
    settings: dict[int, PartitionSettings] = field(default_factory=dict)


@dataclass
class BatchStats:
    records: int = 0
    applied_turns: int = 0
    replayed_skipped: int = 0
    forgotten_dropped: int = 0
    idle_closed: int = 0
    forgets: int = 0
    redactions: int = 0
    redacted_dropped: int = 0
    dead_letters: int = 0
    careful_mode: bool = False


@dataclass
class BatchOutput:
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # key -> (new table value or None to delete, the partition the key lives on)
    states: dict[str, tuple[bytes | None, int]] = field(default_factory=dict)
    tombstones: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Turns partition -> its new runtime settings (a setting marker applied).
    settings: dict[int, PartitionSettings] = field(default_factory=dict)
    event_changes: list[EventChange] = field(default_factory=list)
    relation_changes: list[RelationChange] = field(default_factory=list)
    cluster_changes: list[ClusterChange] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    # Broker timestamps (seconds) of the turns this batch applied, not of replays it skipped: the freshness metric.
    applied_produced_at: list[float] = field(default_factory=list)
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
                 observer: PipelineObserver | None = None, llm: LlmSteps | None = None,
                 compact_after_erasure: bool = False) -> None:
        self.stores = stores
        self.feed = ChangeFeed()
        compacting = [_GuardedSink(CompactingSink(stores.compact), "stores")] if compact_after_erasure else []
        # Step 1 of the batch's commit (checkpoint.py flushes it); the order is the order of the writes.
        self.sinks = SinkGroup(
            [_GuardedSink(VectorSink(stores.vectors), "vector store"),
             _GuardedSink(GraphSink(stores.graph), "graph store"),
             _GuardedSink(ProvisionalSink(stores.vectors), "vector store"),
             *compacting,
             self.feed],
            observer, on_discard=self._forget_all_live,
        )
        self.pipeline = MemoryPipeline(embedder, self.sinks, config, observer, llm)
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
        """Apply a batch: its writes are added to ``self.sinks``, not flushed (the checkpoint's step 1 does that,
        with ``sinks.write`` around this call, so a failed flush redoes the batch from its starting state)."""
        try:
            return self._process(batch, careful=False)
        except Exception as error:
            log.warning("stream.batch_failed_retrying_turn_by_turn", error=repr(error),
                        records=len(batch.records))
            # Drops the attempt's records and, through on_discard, the memories it half changed.
            self.sinks.discard()
            return self._process(batch, careful=True)

    def _forget_all_live(self) -> None:
        """The batch comes again from its starting state: drop the memories it may have half built."""
        for key in list(self.pipeline.memories):
            self._forget_live(key)

    def process_isolating(self, batch: BatchInput, attempts: int = 3, backoff_s: float = 0.5,
                          sleep: Callable[[float], None] = time.sleep) -> BatchOutput:
        """A batch the stores keep refusing, one conversation at a time: whatever a store still refuses after
        ``attempts`` tries goes to the dead-letter topic at stage ``store`` (its conversation's memory stays as it
        was, and both stores are brought to agree on which of its events exist), the rest is applied.

        Each group is flushed on its own (``sinks.write``: the checkpoint's step 1, per group), which is how the
        refused one is told apart; the checkpoint's own flush after this finds nothing left. Forget markers keep
        their place: the records between two of them form one group, split by key. An unavailable store
        propagates (``StoreUnavailableError``): the worker waits for it instead.
        """
        out = BatchOutput()
        states, tombstones, settings = dict(batch.states), dict(batch.tombstones), dict(batch.settings)
        for group in _isolation_groups(batch.records):
            part = BatchInput(records=group, states=states, tombstones=tombstones, settings=settings)
            for attempt in range(1, attempts + 1):
                try:
                    result = self.sinks.write(partial(self.process, part))
                    break
                except StoreUnavailableError:
                    raise
                except StoreWriteError as error:
                    if attempt < attempts:
                        sleep(backoff_s * 2 ** (attempt - 1))
                        continue
                    result = self._store_refused(part, error)
            _merge_output(out, result, states, tombstones, settings)
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
        out.event_changes, out.relation_changes, out.cluster_changes = self.feed.take()
        log.error("stream.store_refused_conversation", key=turn.key, turns=len(turns), error=repr(error))
        return out

    def _reconcile(self, tenant: str, conversation_id: str) -> None:
        """Delete the events that only one store holds: a half-written batch must not leave them disagreeing.

        Straight to the stores, not through the sinks: it reads what they hold after the refused flush, which
        discarded everything unflushed, so no buffered record can come after it."""
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
        batch = BatchInput(records=batch.records, states=dict(batch.states), tombstones=dict(batch.tombstones),
                           settings=dict(batch.settings))
        out = BatchOutput()
        out.stats.records = len(batch.records)
        out.stats.careful_mode = careful
        live: dict[str, _Live] = {}
        tombstones = batch.tombstones
        run: list[TurnItem] = []
        items = [decode_turns_record(record) for record in batch.records]
        turns = [item.turn for item in items if isinstance(item, TurnItem)]
        stored = stored_lookup(self.stores.vectors, turns)
        ahead = self._stores_ahead(batch, [turn for turn in turns if stored(turn) is not None])
        ids = TurnIds(partial(self._held, stored, ahead), where=lambda offset: f"offset {offset}")
        for item in items:
            if isinstance(item, DeadLetter):
                out.dead_letters.append(item)
                continue
            if isinstance(item, TurnItem):
                self._queue_turn(item, batch, live, tombstones, run, ids, out)
                continue
            self._apply_run(run, batch, out, careful)
            if isinstance(item, IdleCloseItem):
                self._idle_close(item, batch, live, out)
            elif isinstance(item, RedactItem):
                self._redact(item, batch, live, out)
            elif isinstance(item, SettingItem):
                self._setting(item, batch, out)
            else:
                self._forget(item, batch, live, tombstones, ids, out)
        self._apply_run(run, batch, out, careful)
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
                    run: list[TurnItem], ids: TurnIds, out: BatchOutput) -> None:
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
        if turn.turn_id in entry.header.redacted_turn_ids:
            # Redacted before it came (again): it must not come back, nor its words reach the dead-letter topic.
            out.stats.redacted_dropped += 1
            out.dead_letters.append(record.dead_letter(
                DeadLetterStage.ROUTE, DeadLetterReason.REDACTED_TURN,
                f"turn {turn.turn_id!r} of conversation {turn.conversation_id!r} was redacted before this record "
                "came, so it is dropped (its text is not kept here)", keep_value=False))
            return
        try:
            if not ids.check(turn, record.offset):
                out.stats.replayed_skipped += 1  # the same turn again: memory has it already
                return
        except TurnIdConflict as conflict:
            out.dead_letters.append(record.dead_letter(DeadLetterStage.ROUTE, DeadLetterReason.DUPLICATE_TURN,
                                                       str(conflict)))
            return
        entry.header.last_offset = entry.header.last_content_offset = record.offset
        entry.header.last_turn_id = turn.turn_id
        entry.header.updated_at = self._clock()
        entry.touched = True
        run.append(item)

    def _held(self, stored: Callable[[Turn], IndexedTurn | None], ahead: set[str], turn: Turn) -> HeldTurn | None:
        """The turn the conversation holds under this one's id: the state's copy, else the stores'. Where the stores
        are ahead of the state (``ahead``), the same turn in the stores is not held: a batch redone after a crash
        finds the writes of its first attempt there, and applies their turns again."""
        memory = self.pipeline.memories.get(turn.key)
        held = memory.held_turn(turn.turn_id) if memory is not None else None
        if held is not None:
            return held
        found = stored(turn)
        redone = found is not None and turn.key in ahead and content_of(found) == content_of(turn)
        return None if redone else found

    def _stores_ahead(self, batch: BatchInput, turns: Sequence[Turn]) -> set[str]:
        """The conversations of these turns whose stores hold more turns than their table state has applied: the
        stores are written before the state (``checkpoint.py``), so they are ahead only when a batch is redone."""
        ahead = set()
        for key, turn in {turn.key: turn for turn in turns}.items():
            source = batch.states.get(key)
            memory = decode_record(source).memory if source is not None else None
            applied = memory.stats.turns + len(memory.segmenter.open_turns) if memory is not None else 0
            if self.stores.vectors.count_turns(SearchScope.conversation(turn.tenant, turn.conversation_id)) > applied:
                ahead.add(key)
        return ahead

    def _apply_run(self, run: list[TurnItem], batch: BatchInput, out: BatchOutput, careful: bool) -> None:
        if not run:
            return
        turns = [item.turn for item in run]
        steps: dict[int, WriteSteps] = {}
        if not careful:
            for item in run:
                self._configure(item.turn.tenant, item.turn.conversation_id, item.record.partition, batch, steps)
            self.pipeline.add_turns(turns)
            out.stats.applied_turns += len(turns)
            applied = run
        else:
            applied = []
            for item in run:
                # Each time: a turn that failed may have dropped its conversation's memory.
                self._configure(item.turn.tenant, item.turn.conversation_id, item.record.partition, batch, steps)
                if self._ingest_one(item, out):
                    applied.append(item)
            out.stats.applied_turns += len(applied)
        out.applied_produced_at.extend(item.record.timestamp for item in applied if item.record.timestamp is not None)
        run.clear()

    def _configure(self, tenant: str, conversation_id: str, partition: int, batch: BatchInput,
                   steps: dict[int, WriteSteps]) -> None:
        """Build the conversation with the runtime settings in force in its partition (``steps``: those made so far
        in this run, one per partition)."""
        if partition not in steps:
            values = batch.settings.get(partition, PartitionSettings()).values
            config = self.pipeline.config.segmentation
            llm_on = LlmSwitch(**overrides(LlmSwitch, values)).events
            steps[partition] = WriteSteps(config.model_copy(update=overrides(SegmentationConfig, values)),
                                          self.pipeline.llm if llm_on else LlmSteps())
        self.pipeline.configure(tenant, conversation_id, steps[partition])

    def _ingest_one(self, item: TurnItem, out: BatchOutput) -> bool:
        turn = item.turn
        memory = self.pipeline.memories.get(turn.key)
        before = memory.to_state().model_copy(deep=True) if memory is not None else None
        try:
            self.pipeline.add_turns([turn])
            return True
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
        if entry.header.content_offset == marker.after_offset:
            memory = self.pipeline.memories.get(marker.key)
            if memory is not None and memory.segmenter.open_turns:
                # The event it closes is summarised and labelled as the partition's settings now say.
                self._configure(marker.tenant, marker.conversation_id, record.partition, batch, {})
                self.sinks.add_update(memory.close_open_segment(BoundaryReason.IDLE))
                out.stats.idle_closed += 1
        # Stale or not, the marker is now behind this conversation's position in the log.
        entry.header.last_offset = record.offset
        entry.touched = True

    def _forget(self, item: ForgetItem, batch: BatchInput, live: dict[str, _Live], tombstones: dict[str, int],
                ids: TurnIds, out: BatchOutput) -> None:
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
            # one partition never deletes what another wrote after its forget. The sinks keep that position too:
            # they drop what the batch added before it, and write what comes after it after the delete.
            self.sinks.add(ConversationForgotten(tenant=header.tenant, conversation_id=header.conversation_id))
            ids.forget(key)
            self._forget_live(key)
            live.pop(key, None)
            batch.states.pop(key, None)
            out.states[key] = (None, record.partition)
            out.health[key] = None
            log.info("stream.conversation_forgotten", tenant=header.tenant, conversation_id=header.conversation_id,
                     partition=record.partition, offset=record.offset)

    def _redact(self, item: RedactItem, batch: BatchInput, live: dict[str, _Live], out: BatchOutput) -> None:
        """Redact a turn at the marker's position: from the stores as they stand after the records before it, and
        from the conversation's state, whose table record then keeps the turn id (turns it drops from now on)."""
        command, record = item.marker.redact, item.record
        key = command.key
        if key not in live and key not in batch.states:
            return  # not this partition's conversation, or forgotten: nothing holds the turn here
        entry = self._live(key, command.tenant, command.conversation_id, record.partition, batch, live)
        if entry.header.partition != record.partition or record.offset <= entry.header.last_offset:
            return  # another partition's conversation, or applied before a crash
        # The batch's writes before the marker reach the stores first: the redaction reads and rewrites them. A
        # batch redone after a failure writes them again and redacts again here, so the result is the same.
        self.sinks.flush()
        memory = self.pipeline.memories.get(key)
        # The memory's copy of the turn's event: the control agent has usually redacted the stores already, and
        # the memory still holds the turn there (with relations quoting it) until this marker.
        held = memory.holding(command.turn_id) if memory is not None else None
        stored = redact_stored_turn(self.stores, command.tenant, command.conversation_id, command.turn_id, held)
        if memory is not None and stored is None:
            memory.redact_turn(command.turn_id)  # not stored yet: it can only be in the open segment
        elif memory is not None:
            memory.redact_turn(command.turn_id, stored.before, stored.event, stored.relations)
        if stored is not None:
            if stored.event is None:
                self.feed.delete_event(command.tenant, command.conversation_id, stored.event_id)
            else:
                self.feed.upsert_event(stored.event)
            for cluster in stored.clusters:
                self.feed.add(cluster)
        self.sinks.add(TurnRedacted(tenant=command.tenant, conversation_id=command.conversation_id,
                                    turn_id=command.turn_id))
        if command.turn_id not in entry.header.redacted_turn_ids:
            entry.header.redacted_turn_ids.append(command.turn_id)
        entry.header.last_offset = entry.header.last_content_offset = record.offset
        entry.touched = True
        out.stats.redactions += 1
        log.info("stream.turn_redacted", key=key, turn_id=command.turn_id, partition=record.partition,
                 offset=record.offset, in_stores=stored is not None)

    def _setting(self, item: SettingItem, batch: BatchInput, out: BatchOutput) -> None:
        """A runtime setting changes here in this partition: its turns from now on are built with the new value."""
        command, record = item.marker.setting, item.record
        current = batch.settings.get(record.partition, PartitionSettings())
        if record.offset <= current.offset:
            return  # applied before a crash
        changed = PartitionSettings(offset=record.offset, values={**current.values, command.setting: command.value})
        batch.settings[record.partition] = out.settings[record.partition] = changed
        log.info("stream.setting_applied", setting=command.setting, value=command.value, partition=record.partition,
                 offset=record.offset)

    # -- freshness -----------------------------------------------------------------------------------------------

    def _provisional_events(self, live: dict[str, _Live]) -> None:
        """Each touched conversation's open segment as a provisional event; retire ones left stale (ProvisionalSink)."""
        for key, entry in live.items():
            if not entry.touched:
                continue
            memory = self.pipeline.memories.get(key)
            header = entry.header
            current = provisional_event(memory) if memory is not None else None
            header.open_turns = len(memory.segmenter.open_turns) if memory is not None else 0
            previous = header.provisional_event_id
            if current is not None and memory is not None:
                # The open turns too, under the provisional event: closing rewrites the same points.
                self.sinks.add(ProvisionalEvent(event=current,
                                                turns=tuple(indexed_turns(open_segment(memory), current.event_id))))
            if previous and previous != (current.event_id if current else None) and memory is not None \
                    and not self.feed.wrote_event(previous):
                # Its segment closed in this batch (it was open at the end of the last one) but no event of that
                # id was written: it was merged into an older event, and the provisional point would otherwise
                # linger. (The memory cannot say: the event may already have left its hot window.)
                self.sinks.add(ProvisionalRetired(tenant=header.tenant, conversation_id=header.conversation_id,
                                                  event_id=previous))
            header.provisional_event_id = current.event_id if current is not None else None

    # -- idle detection (called by the worker's timer) -----------------------------------------------------------

    def idle_conversations(self, headers: Sequence[RecordHeader], idle_s: float) -> list[RecordHeader]:
        now = self._clock()
        return [h for h in headers if h.open_turns and now - h.updated_at >= idle_s]


def _isolation_groups(records: Sequence[RawRecord]) -> list[list[RawRecord]]:
    """Records split by key, in order; a forget, redaction or setting marker is a group of its own and closes the
    groups before it (each acts at its position: on the stores, or on how the turns after it are built)."""
    groups: list[list[RawRecord]] = []
    open_groups: dict[bytes | None, list[RawRecord]] = {}
    for record in records:
        if record.header(CONTROL_HEADER) in _ORDERED_MARKERS:
            groups.extend(open_groups.values())
            open_groups = {}
            groups.append([record])
            continue
        open_groups.setdefault(record.key, []).append(record)
    groups.extend(open_groups.values())
    return groups


_ORDERED_MARKERS = frozenset({ControlKind.FORGET.value.encode(), ControlKind.REDACT.value.encode(),
                              ControlKind.SETTING.value.encode()})


def _merge_output(into: BatchOutput, part: BatchOutput, states: dict[str, bytes], tombstones: dict[str, int],
                  settings: dict[int, PartitionSettings]) -> None:
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
    into.settings.update(part.settings)
    settings.update(part.settings)
    for name in ("records", "applied_turns", "replayed_skipped", "forgotten_dropped", "idle_closed", "forgets",
                 "redactions", "redacted_dropped", "dead_letters"):
        setattr(into.stats, name, getattr(into.stats, name) + getattr(part.stats, name))
    into.stats.careful_mode = into.stats.careful_mode or part.stats.careful_mode


def open_segment(memory: ConversationMemory) -> Segment:
    return Segment(turns=list(memory.segmenter.open_turns), boundary_reason=BoundaryReason.END)


def provisional_event(memory: ConversationMemory) -> Event | None:
    """The open segment as the event it would become if it closed now (same id), marked provisional."""
    if not memory.segmenter.open_turns:
        return None
    return build_event(open_segment(memory)).model_copy(update={"provisional": True})
