"""The Faust application of the worker: topics, tables and thin agents around ``MemoryStreamProcessor``.

Topology:

    turns ──► [memory agent: batch ─ embed ─ segment ─ merge ─ relate ─ recluster] ──► vector store, graph store
      ▲                                   │                                  └──► change feeds: events, relations,
      │ forget/redact/set/idle markers    └──► table conversation-memory (state, offsets)           clusters
      │                                        tables forget-tombstones, partition-settings
    control ──► [control agent: delete (redact) in the stores now, then a marker into every turns partition]
    any stage ──► dlq

Boundary detection, merging, relation extraction and reclustering of a conversation run in one agent because they
share one state (``ConversationMemory``: the merger and the relation extractor need the events the previous
steps just changed, the reclusterer needs all of them) and all key by conversation. Separate segments/events
topics would add two serialisation hops and split that state without adding parallelism, which comes from
partitions: any number of workers share the turns partitions (one consumer group).

Delivery: ``checkpoint.Checkpoint`` commits each batch (stores, then change feeds and dead letters, then table
state, then the records' acknowledgements: ``noack_take`` + manual acks), so neither a crash nor a shutdown
mid-batch commits an offset for unfinished work. This module gives it Faust's producer, tables and stream, and
decides what happens when a step fails: an unavailable store is waited for and a refusing one isolated (both
retry the whole commit, which a store failure always leaves untouched past step 1); anything else stops the
process (exit code 70) without acknowledging; restarting resumes from the last committed offsets, and the
table's per-conversation offsets make the replay harmless.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import faust
import structlog
from faust.types import EventT
from pydantic import ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import CONTROL_COMMAND, Command, ForgetCommand, RedactCommand, SettingCommand
from compassmem.core.contracts.dead_letters import DeadLetter, DeadLetterReason, DeadLetterStage
from compassmem.core.contracts.search import SearchScope
from compassmem.embedding.embedders import Embedder
from compassmem.write.importers import describe_validation_error
from compassmem.llm.steps import llm_steps
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.write.pipeline import PipelineConfig
from compassmem.write.redaction import redact_stored_turn
from compassmem.library.runtime_settings import SettingValueError, UnknownSettingError, spec_of
from compassmem.sinks.factory import Stores
from compassmem.streams.checkpoint import (
    Acknowledge,
    Checkpoint,
    OutgoingRecord,
    OutputTopic,
    StateTable,
    TableWrite,
    settings_key,
)
from compassmem.streams.decoding import RawRecord
from compassmem.publish.command_answers import answer_of
from compassmem.streams.forget_log import executed_forgets
from compassmem.core.contracts.stream_records import (
    CONTROL_HEADER,
    CommandRefused,
    ControlKind,
    ForgetDone,
    ForgetMarker,
    IdleCloseMarker,
    PartitionSettings,
    RedactMarker,
    SettingMarker,
)
from compassmem.streams.processor import (
    BatchInput,
    BatchOutput,
    MemoryStreamProcessor,
    StoreUnavailableError,
    StoreWriteError,
    forget_source_key,
    tombstone_key,
)
from compassmem.streams.state import RecordHeader, decode_header
from compassmem.streams.faust_fixes.gap_repair import GapRepair
from compassmem.streams.faust_fixes.transport import broker_urls
from compassmem.streams.topics import MEMORY_TABLE, SETTINGS_TABLE, TOMBSTONE_TABLE
from compassmem.core.tracing import set_attributes, span

log = structlog.get_logger(__name__)

FATAL_EXIT_CODE = 70  # EX_SOFTWARE: the supervisor should restart us
_RAW = {"key_serializer": "raw", "value_serializer": "raw"}
# Table changelog records hold a whole conversation's state: allow far more than Kafka's 1 MB default.
_MAX_RECORD_BYTES = 64 * 1024 * 1024
# A batch the stores refuse is tried this often as a whole before its conversations are tried one by one.
STORE_REFUSED_BATCH_ATTEMPTS = 3
_STORE_RETRY_FIRST_S = 0.5
_STORE_RETRY_MAX_S = 30.0
_ANSWER_KINDS = frozenset({ControlKind.FORGET_DONE.value.encode(), ControlKind.COMMAND_REFUSED.value.encode()})


class _Stopping(Exception):  # noqa: N818 - a signal, not an error
    """The worker is stopping while it waits for a store: leave the batch unacknowledged."""


def _forget_source(record: RawRecord) -> tuple[int, int] | None:
    """(control partition, offset) a forget marker was copied from, or None for any other record."""
    if record.header(CONTROL_HEADER) != ControlKind.FORGET.value.encode():
        return None
    try:
        marker = ForgetMarker.model_validate_json(record.value or b"")
    except ValidationError:
        return None
    return marker.source_partition, marker.source_offset


def _absent(stores: Stores, command: RedactCommand) -> tuple[DeadLetterReason, str] | None:
    """Why a redaction must be refused: ``if_absent`` 'refuse' and no store holds the turn, or 'block' and the
    conversation has no memory (no worker holds a state the blocked id could be kept in)."""
    what = f"conversation {command.conversation_id!r} of tenant {command.tenant!r}"
    if command.if_absent == "refuse" and stores.vectors.get_turn(command.tenant, command.conversation_id,
                                                                 command.turn_id) is None:
        return DeadLetterReason.UNKNOWN_TURN, (
            f"no turn {command.turn_id!r} in {what}: nothing was redacted, and the id is not blocked (a turn the "
            "worker has not applied yet counts as absent; to block a turn id that has not arrived, send the "
            "command with if_absent 'block': compassmem redact --unseen)")
    if command.if_absent == "block" and not stores.vectors.count_turns(
            SearchScope.conversation(command.tenant, command.conversation_id)):
        return DeadLetterReason.UNKNOWN_CONVERSATION, (
            f"{what} has no memory: there is nothing to keep the blocked turn id {command.turn_id!r} with")
    return None


def _marker_of(command: Command, record: RawRecord) -> tuple[ForgetMarker | RedactMarker | SettingMarker, ControlKind]:
    """The marker a command becomes in every turns partition."""
    where = {"source_partition": record.partition, "source_offset": record.offset}
    if isinstance(command, ForgetCommand):
        return ForgetMarker(forget=command, **where), ControlKind.FORGET
    if isinstance(command, RedactCommand):
        return RedactMarker(redact=command, **where), ControlKind.REDACT
    return SettingMarker(setting=command, **where), ControlKind.SETTING


class FaustProducer:
    """Step 2 of the checkpoint on Faust's producer: ``topic.send`` returns the future of the broker's ack."""

    def __init__(self, topics: Mapping[OutputTopic, faust.TopicT]) -> None:
        self._topics = dict(topics)

    async def send(self, record: OutgoingRecord) -> Awaitable[object]:
        return await self._topics[record.topic].send(key=record.key, value=record.value)


class FaustTables:
    """Step 3 of the checkpoint on Faust tables."""

    def __init__(self, tables: Mapping[StateTable, faust.Table]) -> None:
        self._tables = dict(tables)

    async def write(self, write: TableWrite) -> None:
        """Set (or delete, for None) a table entry, its changelog record going to ``write.partition``.

        Not ``table[key] = value``: that writes the changelog partition of Faust's *current event*, and a batch
        mixes partitions. The state of a conversation must go to the changelog partition of the turns partition it
        lives on, so that it recovers on whichever worker gets that partition. Each write is awaited on its own:
        Tansu reports the end offset of a partition as the last *batch*'s base offset + 1, and Faust's table
        recovery stops at that end offset, so records sharing a batch with a later one could be left unrecovered.
        """
        table, key = self._tables[write.table], write.key
        if write.value is None:
            if key not in table.data:
                return
            del table.data[key]
            await table.send_changelog(write.partition, key, None, value_serializer="raw")
        else:
            table.data[key] = write.value
            await table.send_changelog(write.partition, key, write.value)


def raw_record(event: EventT) -> RawRecord:
    message = event.message
    headers = message.headers or ()
    if isinstance(headers, dict):
        headers = tuple(headers.items())
    timestamp = message.timestamp
    return RawRecord(
        topic=message.topic, partition=message.partition, offset=message.offset, key=message.key,
        value=message.value, headers=tuple((str(k), bytes(v or b"")) for k, v in headers),
        timestamp=float(timestamp) if timestamp else None,
    )


class StreamingWorker:
    """Builds the Faust app over open stores; ``compassmem worker`` and ``compassmem dev`` run it."""

    def __init__(self, settings: Settings, stores: Stores, embedder: Embedder, bootstrap: str,
                 pipeline_config: PipelineConfig | None = None, metrics: MemoryMetrics | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.stores = stores
        self.metrics = metrics or MemoryMetrics(conversation_labels=settings.metrics_conversation_labels,
                                                    api_keys=settings.api_keys)
        config = pipeline_config or PipelineConfig.from_settings(settings)
        self.processor = MemoryStreamProcessor(embedder, stores, config, observer=self.metrics,
                                               llm=llm_steps(settings),
                                               compact_after_erasure=settings.compact_after_erasure)
        # Turns partition -> the next offset this worker will process there (for the lag gauge).
        self._next_offsets: dict[int, int] = {}
        # One thread: batches and forgets reach the stores strictly one at a time, in arrival order.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compassmem-batch")
        self.totals: dict[str, int] = {"applied_turns": 0, "dead_letters": 0, "replayed_skipped": 0,
                                       "idle_closed": 0, "forgets": 0, "redactions": 0,
                                       "batches": 0}
        # Conversation key -> the content offset its last idle close was requested at (one request per position);
        # kept for the conversations this worker owns only.
        self._idle_requested: dict[bytes, int] = {}
        # Control-topic commands whose markers are already in the turns log (read when the control agent starts).
        self._executed_forgets: set[tuple[int, int]] = set()
        datadir = settings.data_dir.resolve() / "faust"
        self.app = faust.App(
            settings.kafka_app_id,
            broker=broker_urls(bootstrap),
            store="memory://",
            datadir=str(datadir),
            topic_replication_factor=1,
            topic_partitions=settings.kafka_partitions,
            topic_allow_declare=True,
            broker_session_timeout=settings.kafka_session_timeout_s,
            broker_heartbeat_interval=settings.kafka_heartbeat_interval_s,
            broker_rebalance_timeout=settings.kafka_rebalance_timeout_s,
            broker_commit_interval=settings.kafka_commit_interval_s,
            consumer_auto_offset_reset="earliest",
            # Standbys would hold other workers' conversations; state is recovered from the changelog instead.
            table_standby_replicas=0,
            stream_wait_empty=False,
            web_enabled=False,
            producer_max_request_size=_MAX_RECORD_BYTES,
            consumer_max_fetch_size=_MAX_RECORD_BYTES,
            producer_acks=-1,
            # Faust's recovery resumes the stream partitions before it seeks them and clears their queues after:
            # records fetched in between were lost. faust_fixes/recovery.py puts the steps in a safe order.
            TableManager="compassmem.streams.faust_fixes.recovery:SeekFirstTableManager",
        )
        n = settings.kafka_partitions
        self.turns = self.app.topic(settings.turns_topic, partitions=n, **_RAW)
        self.control = self.app.topic(settings.control_topic, partitions=1, **_RAW)
        self.dlq = self.app.topic(settings.dlq_topic, partitions=n, **_RAW)
        self.events_feed = self.app.topic(settings.events_topic, partitions=n, **_RAW)
        self.relations_feed = self.app.topic(settings.relations_topic, partitions=n, **_RAW)
        self.clusters_feed = self.app.topic(settings.clusters_topic, partitions=n, **_RAW)
        # bytes key and value types make Faust use the raw codec for the changelogs too (else it falls back to JSON).
        self.memory_table = self.app.Table(MEMORY_TABLE, partitions=n, key_type=bytes, value_type=bytes,
                                           help="tenant/conversation_id -> ConversationRecord (state.py)")
        self.tombstones = self.app.Table(TOMBSTONE_TABLE, partitions=n, key_type=bytes, value_type=bytes,
                                         help="partition|tenant[/conversation_id] -> offset of the forget marker")
        self.settings_table = self.app.Table(SETTINGS_TABLE, partitions=n, key_type=bytes, value_type=bytes,
                                             help="turns partition -> PartitionSettings (runtime settings in force)")
        self.checkpoint = Checkpoint(
            self.processor.sinks, self.executor,
            producer=FaustProducer({OutputTopic.DEAD_LETTERS: self.dlq, OutputTopic.EVENTS: self.events_feed,
                                    OutputTopic.RELATIONS: self.relations_feed,
                                    OutputTopic.CLUSTERS: self.clusters_feed}),
            table=FaustTables({StateTable.MEMORY: self.memory_table, StateTable.TOMBSTONES: self.tombstones,
                               StateTable.SETTINGS: self.settings_table}),
            observer=self.metrics,
        )
        self.assigned_partitions: list[int] = []
        # Faust loses records on the way to the agent: the gap guard (faust_fixes/) seeks back to them.
        self.gaps = GapRepair(self.app, settings.turns_topic, bootstrap, self.metrics, self._die)
        self.app.on_partitions_assigned.connect(self._on_partitions_assigned)
        self.app.agent(self.turns, name="compassmem.memory")(self._memory_agent)
        self.app.agent(self.control, name="compassmem.control")(self._control_agent)
        self.app.timer(max(0.25, min(5.0, settings.idle_close_s / 4)), name="compassmem.table")(self._table_tick)
        self.app.timer(settings.metrics_lag_interval_s, name="compassmem.lag")(self._lag_tick)
        self.app.timer(self.gaps.positions.reseek_interval_s, name="compassmem.gaps")(self.gaps.tick)

    async def _on_partitions_assigned(self, sender: Any, assigned: set, **_: Any) -> None:  # noqa: ANN401
        previous = set(self.assigned_partitions)
        self.assigned_partitions = sorted(tp.partition for tp in assigned if tp.topic == self.settings.turns_topic)
        revoked = previous - set(self.assigned_partitions)
        self.metrics.drop_lag(self.settings.turns_topic, revoked)
        self.gaps.assigned(self.assigned_partitions, revoked)
        for partition in revoked:
            self._next_offsets.pop(partition, None)
        # Operators (and the tests) see which turns partitions this process owns after each rebalance.
        log.info("stream.partitions_assigned", partitions=self.assigned_partitions)

    # -- the memory agent ----------------------------------------------------------------------------------------

    async def _memory_agent(self, stream: faust.StreamT) -> None:
        batches = stream.noack_take(self.settings.stream_batch_size, within=self.settings.stream_batch_within_s)
        async for events in batches:
            records = [raw_record(event) for event in events]
            admission = self.gaps.positions.admit(records)
            admitted = {id(record) for record in admission.admitted}
            # Records held back at a gap are not acknowledged: Faust commits contiguous acknowledgements only,
            # so the committed offset cannot pass them before they are applied.
            acks = [event for event, record in zip(events, records, strict=True) if id(record) in admitted]
            self.gaps.batches_running += 1
            try:
                if admission.gaps:
                    await self.gaps.repair(admission)
                if admission.admitted:
                    await self._handle_batch(admission.admitted, partial(self._acknowledge, stream, acks))
            except _Stopping:
                return
            except Exception as error:  # noqa: BLE001 - any failure here must stop the process unacknowledged
                self._die(error)
            finally:
                self.gaps.batches_running -= 1

    @staticmethod
    async def _acknowledge(stream: faust.StreamT, events: Sequence[EventT]) -> None:
        """Step 4 of the checkpoint: Faust commits an offset once every record up to it is acknowledged."""
        for event in events:
            await stream.ack(event)

    async def _commit(self, batch: BatchInput, acknowledge: Acknowledge) -> BatchOutput:
        """Commit a batch, waiting out an unavailable store and isolating a refusing one.

        A store failure stops the checkpoint at step 1, before anything left the stores' side, so the whole commit
        is simply tried again."""
        refused, delay = 0, _STORE_RETRY_FIRST_S
        while True:
            step = self.processor.process_isolating if refused >= STORE_REFUSED_BATCH_ATTEMPTS \
                else self.processor.process
            try:
                return await self.checkpoint.commit(partial(step, batch), acknowledge)
            except StoreUnavailableError as error:
                log.warning("stream.store_unavailable", error=str(error), retry_in_s=delay,
                            effect="waiting; nothing acknowledged")
            except StoreWriteError as error:
                refused += 1
                log.warning("stream.store_refused_batch", error=str(error), attempt=refused, retry_in_s=delay)
            self.metrics.store_retry()
            if self.app.should_stop:
                raise _Stopping
            await asyncio.sleep(delay)
            delay = min(2 * delay, _STORE_RETRY_MAX_S)

    async def _handle_batch(self, records: Sequence[RawRecord], acknowledge: Acknowledge) -> None:
        started = time.perf_counter()
        self.metrics.consumed(len(records))
        with span("worker.batch", partitions=sorted({record.partition for record in records}), records=len(records),
                  conversations=len({record.key for record in records if record.key})) as opened:
            out = await self._commit(self._batch_input(records), acknowledge)
            set_attributes(opened, turns=out.stats.applied_turns, dead_letters=out.stats.dead_letters)
        # Committed: the turns it applied are searchable now (open segments' turns under their provisional event).
        self.metrics.turns_searchable(out.applied_produced_at, time.time())
        self.metrics.dead_lettered(out.dead_letters)
        self.metrics.conversations_changed(out.health)
        for record in records:
            if record.topic == self.settings.turns_topic:
                self._next_offsets[record.partition] = max(self._next_offsets.get(record.partition, 0),
                                                           record.offset + 1)
        self.metrics.batch_done(time.perf_counter() - started)
        stats = out.stats
        for name in ("applied_turns", "dead_letters", "replayed_skipped", "idle_closed", "forgets", "redactions"):
            self.totals[name] += getattr(stats, name)
        self.totals["batches"] += 1
        offset_ranges: dict[int, list[int]] = {}
        for record in records:
            extent = offset_ranges.setdefault(record.partition, [record.offset, record.offset])
            extent[0], extent[1] = min(extent[0], record.offset), max(extent[1], record.offset)
        log.info("stream.batch", records=stats.records,
                 offsets=" ".join(f"{p}:{a}-{b}" for p, (a, b) in sorted(offset_ranges.items())),
                 applied=stats.applied_turns,
                 replayed_skipped=stats.replayed_skipped, forgotten_dropped=stats.forgotten_dropped,
                 idle_closed=stats.idle_closed, forgets=stats.forgets, redactions=stats.redactions,
                 redacted_dropped=stats.redacted_dropped, dead_letters=stats.dead_letters,
                 careful=stats.careful_mode, ms=round(1000 * (time.perf_counter() - started), 1))

    def _batch_input(self, records: Sequence[RawRecord]) -> BatchInput:
        """The table entries the processor may need: the batch's conversations, and for a forget marker every
        conversation of its tenant; the tombstones that could cover the batch's records."""
        wanted: set[bytes] = set()
        tenants: set[str] = set()
        tombstone_keys: set[str] = set()
        for record in records:
            key = (record.key or b"").decode("utf-8", errors="replace")
            tenant, _, conversation = key.partition("/")
            if record.header(CONTROL_HEADER) == ControlKind.FORGET.value.encode():
                tenants.add(tenant)
            wanted.add(record.key or b"")
            tombstone_keys.add(tombstone_key(record.partition, tenant))
            source = _forget_source(record)
            if source is not None:
                tombstone_keys.add(forget_source_key(record.partition, *source))
            if conversation:
                tombstone_keys.add(tombstone_key(record.partition, tenant, conversation))
        states: dict[str, bytes] = {}
        for key in wanted:
            value = self.memory_table.get(key)
            if value is not None:
                states[key.decode("utf-8")] = value
        if tenants:
            prefixes = tuple(f"{tenant}/".encode() for tenant in tenants)
            for key, value in self.memory_table.items():
                if key.startswith(prefixes) and value is not None:
                    states[key.decode("utf-8")] = value
        tombstones = {}
        for key in tombstone_keys:
            value = self.tombstones.get(key.encode("utf-8"))
            if value is not None:
                tombstones[key] = int(value)
        partition_settings = {}
        for partition in {record.partition for record in records}:
            value = self.settings_table.get(settings_key(partition))
            if value is not None:
                partition_settings[partition] = PartitionSettings.model_validate_json(value)
        return BatchInput(records=records, states=states, tombstones=tombstones, settings=partition_settings)

    # -- the control agent ---------------------------------------------------------------------------------------

    async def _control_agent(self, stream: faust.StreamT) -> None:
        loop = asyncio.get_running_loop()
        self._executed_forgets = await loop.run_in_executor(None, executed_forgets, self.bootstrap,
                                                            self.settings.control_topic)
        # Acknowledged by hand, after the markers are in the turns log (as for the memory agent).
        async for events in stream.noack_take(16, within=self.settings.stream_batch_within_s):
            for event in events:
                try:
                    await self._handle_control(raw_record(event))
                except Exception as error:  # noqa: BLE001
                    self._die(error)
                await stream.ack(event)

    async def _handle_control(self, record: RawRecord) -> None:
        if record.header(CONTROL_HEADER) in _ANSWER_KINDS:
            # The worker's own answer to an earlier command (ForgetDone, CommandRefused).
            answer = answer_of(record.headers, record.value)
            if answer is not None:
                self._executed_forgets.add((answer.source_partition, answer.source_offset))
            return
        if (record.partition, record.offset) in self._executed_forgets:
            # Read again (another app id, a reset group): its markers already sit in the turns log where it took
            # effect; running it again would delete memory built from turns produced after it.
            log.info("stream.forget_already_executed", partition=record.partition, offset=record.offset)
            return
        try:
            command = CONTROL_COMMAND.validate_json(record.value or b"")
        except ValidationError as error:
            await self._dead_letter(record.key, record.dead_letter(
                DeadLetterStage.CONTROL, DeadLetterReason.INVALID_FIELDS, describe_validation_error(error)))
            return
        loop = asyncio.get_running_loop()
        # Applied now, so the memory (or the turn) disappears at once even where partitions lag; each partition
        # applies it again when it reaches its marker (its own conversations only), which covers what it wrote
        # meanwhile. A setting only takes effect at its markers.
        refusal = await loop.run_in_executor(self.executor, self._apply_to_stores, command)
        if refusal is not None:
            await self._refuse(record, *refusal)
            return
        marker, kind = _marker_of(command, record)
        value = marker.model_dump_json().encode("utf-8")
        sends = [await self.turns.send(key=command.key.encode("utf-8"), value=value, partition=partition,
                                       headers={CONTROL_HEADER: kind.value.encode()})
                 for partition in range(self.settings.kafka_partitions)]
        written = await asyncio.gather(*sends)
        done = ForgetDone(source_partition=record.partition, source_offset=record.offset,
                          markers={meta.topic_partition.partition: meta.offset for meta in written})
        await (await self.control.send(key=record.key, value=done.model_dump_json().encode("utf-8"),
                                       partition=record.partition,
                                       headers={CONTROL_HEADER: ControlKind.FORGET_DONE.value.encode()}))
        self._executed_forgets.add((record.partition, record.offset))
        log.info("stream.control_command_applied", command=command.command, key=command.key,
                 partitions=self.settings.kafka_partitions)

    async def _dead_letter(self, key: bytes | None, letter: DeadLetter) -> None:
        await (await self.dlq.send(key=key, value=letter.model_dump_json().encode("utf-8")))
        self.metrics.dead_lettered([letter])
        log.warning("stream.dead_letter", stage=letter.stage.value, reason=letter.reason, topic=letter.topic,
                    offset=letter.offset)

    async def _refuse(self, record: RawRecord, code: DeadLetterReason, reason: str) -> None:
        """A command the stores give no ground for: a dead letter, and the answer on the control topic, which its
        sender reads and a worker reading the control topic again skips it by."""
        await self._dead_letter(record.key, record.dead_letter(DeadLetterStage.CONTROL, code, reason))
        refused = CommandRefused(source_partition=record.partition, source_offset=record.offset, reason=reason)
        await (await self.control.send(key=record.key, value=refused.model_dump_json().encode("utf-8"),
                                       partition=record.partition,
                                       headers={CONTROL_HEADER: ControlKind.COMMAND_REFUSED.value.encode()}))
        self._executed_forgets.add((record.partition, record.offset))

    def _apply_to_stores(self, command: Command) -> tuple[DeadLetterReason, str] | None:
        """Delete what the command names from the stores now; the reason to refuse it instead (a redaction of a
        turn the stores do not hold, unless it says otherwise: ``RedactCommand.if_absent``; a setting that is not
        one or breaks its rule), or None."""
        if isinstance(command, SettingCommand):
            try:
                spec_of(command.setting).validate(command.value)
            except (UnknownSettingError, SettingValueError) as error:
                return DeadLetterReason.INVALID_FIELDS, str(error)
            return None
        if isinstance(command, RedactCommand):
            refusal = _absent(self.stores, command)
            if refusal is not None:
                return refusal
            redact_stored_turn(self.stores, command.tenant, command.conversation_id, command.turn_id)
        elif command.conversation_id is None:
            self.stores.delete_tenant(command.tenant)
        else:
            self.stores.delete_conversation(command.tenant, command.conversation_id)
        if self.settings.compact_after_erasure:
            # Before the command is acknowledged: a crash before the compaction ends applies it again.
            self.stores.compact()
        return None

    # -- table tick: idle closes and the health gauges -----------------------------------------------------------

    async def _table_tick(self) -> None:
        """Reads the header of every conversation this worker owns: due idle closes, and the health gauges."""
        actives = self.app.assignor.assigned_actives()
        partitions = {tp.partition for tp in actives if tp.topic == self.settings.turns_topic}
        owned: list[tuple[bytes, RecordHeader]] = []
        for key, value in list(self.memory_table.items()):
            if value is not None:
                header = decode_header(value)
                if header.partition in partitions:
                    owned.append((key, header))
        # Replaced as a whole: conversations of revoked partitions leave this worker's figures (the new owner
        # reports them), recovered ones enter them before their next turn.
        self.metrics.conversations_owned({h.key: h.health for _, h in owned})
        requested = self._idle_requested
        self._idle_requested = {k: h.content_offset for k, h in owned if requested.get(k) == h.content_offset}
        await self._request_idle_closes([(k, h) for k, h in owned if k not in self._idle_requested])

    async def _request_idle_closes(self, headers: list[tuple[bytes, RecordHeader]]) -> None:
        idle = {id(h) for h in self.processor.idle_conversations([h for _, h in headers], self.settings.idle_close_s)}
        for key, header in headers:
            if id(header) not in idle:
                continue
            marker = IdleCloseMarker(tenant=header.tenant, conversation_id=header.conversation_id,
                                     after_offset=header.content_offset, idle_s=self.settings.idle_close_s)
            # Into the log, not applied here: the close then happens at a fixed position among the turns, so a
            # replay closes the segment exactly where this run did.
            await self.turns.send(key=key, value=marker.model_dump_json().encode("utf-8"),
                                  partition=header.partition,
                                  headers={CONTROL_HEADER: ControlKind.IDLE_CLOSE.value.encode()})
            self._idle_requested[key] = header.content_offset
            log.info("stream.idle_close_requested", key=key.decode(), after_offset=header.content_offset)

    # -- consumer lag ------------------------------------------------------------------------------------------------

    async def _lag_tick(self) -> None:
        """Per assigned turns partition: the broker's end offset minus the next offset this worker will process
        (before its first batch there, the consumer's fetch position). Runs on the event loop, so it keeps
        reporting while a long batch runs in the executor: that is when lag grows."""
        tps = [tp for tp in self.app.consumer.assignment() if tp.topic == self.settings.turns_topic]
        if not tps:
            return
        try:
            ends = await self.app.consumer.highwaters(*tps)
            lags = {}
            for tp in tps:
                position = self._next_offsets.get(tp.partition)
                if position is None:
                    position = await self.app.consumer.position(tp) or 0
                lags[tp.partition] = int(ends.get(tp, position)) - position
        except Exception as error:  # noqa: BLE001 - a metrics probe must never stop the worker
            if not self.app.should_stop:  # failing while the worker shuts down is expected
                log.warning("stream.lag_probe_failed", error=repr(error))
            return
        self.metrics.set_lag(self.settings.turns_topic, lags)

    # -- failure -------------------------------------------------------------------------------------------------

    def _die(self, error: BaseException) -> None:
        """Stop at once, acknowledging nothing more: the unfinished batch comes again after a restart."""
        log.critical("stream.fatal", error=repr(error), effect="exiting without committing; restart to resume",
                     exit_code=FATAL_EXIT_CODE)
        try:
            self.stores.close()  # stops an embedded FalkorDB child cleanly
        finally:
            os._exit(FATAL_EXIT_CODE)
