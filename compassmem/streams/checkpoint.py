"""One object owns the order of a batch's commit, after quix-streams' ``Checkpoint.commit``.

``Checkpoint.commit`` runs these steps in this order, each only once the one before it is done:

1. **Stores.** The batch is applied and every sink flushed (vector store, graph store, provisional events:
   ``sinks.sink_group.SinkGroup``), on the worker's single store thread: the stores are not thread-safe, and
   batches and forgets must reach them one at a time in arrival order, so applying and flushing are one job there
   and nothing else gets between them. The one exception is qdrant-edge's own disk flush, which the engine runs
   beside writes: it goes on while the later sinks write, and the step ends only once it has (``Sink.settle``).
2. **Change feeds and dead letters**, produced and acknowledged by the broker.
3. **Table state**: the batch's conversation records, then its forget tombstones, written to the changelog.
4. **Offsets**: the batch's records acknowledged, so Faust may commit their offsets.

Why this order: after a crash, redelivered records at or below a conversation's offset in its table record are
skipped. So everything those records produce (store writes, change feeds, dead letters) must be durable before
the state moves past them (1 and 2 before 3), or a crash in between loses it for good; and an offset committed
before the state was written would let Faust skip records whose effect the state lacks (3 before 4). The change
feeds announce writes the stores already hold (1 before 2). A failure at any step stops the later ones; the
batch stays unacknowledged and comes again, and every step is idempotent (upserts by stable ids, keyed feed
records, table values that carry their offsets), so doing the earlier steps twice changes nothing.

Steps 2 to 4 run on the event loop, where Faust's producer, tables and stream live. What crosses to the broker
is described by pydantic models (``OutgoingRecord``, ``TableWrite``) and handed to small participants
(``Producer``, ``TableWriter``): ``app.py`` implements them over Faust, the tests with recording fakes. The
in-process pipeline commits with step 1 alone (``MemoryPipeline`` flushes its ``SinkGroup``).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from enum import StrEnum
from typing import Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field

from compassmem.sinks.sink_group import SinkGroup
from compassmem.streams.processor import BatchOutput
from compassmem.core.tracing import span, stage

log = structlog.get_logger(__name__)

Acknowledge = Callable[[], Awaitable[None]]


class OutputTopic(StrEnum):
    """The topics step 2 produces to."""

    DEAD_LETTERS = "dead_letters"
    EVENTS = "events"
    RELATIONS = "relations"
    CLUSTERS = "clusters"


class OutgoingRecord(BaseModel):
    """One record of step 2: a dead letter or a change-feed record."""

    model_config = ConfigDict(frozen=True)

    topic: OutputTopic
    key: bytes | None
    value: bytes


class StateTable(StrEnum):
    """The tables step 3 writes."""

    MEMORY = "memory"  # tenant/conversation_id -> ConversationRecord (state.py)
    TOMBSTONES = "tombstones"  # tombstone key -> offset of the forget marker
    SETTINGS = "settings"  # turns partition -> PartitionSettings (core/contracts/stream_records.py)


class TableWrite(BaseModel):
    """One entry of step 3; its changelog record goes to ``partition`` (the turns partition the key lives on)."""

    model_config = ConfigDict(frozen=True)

    table: StateTable
    key: bytes
    value: bytes | None = Field(description="None deletes the entry")
    partition: int = Field(ge=0)


class Producer(Protocol):
    async def send(self, record: OutgoingRecord) -> Awaitable[object]:
        """Hand one record to the producer; what it returns resolves once the broker acknowledged the record."""


class TableWriter(Protocol):
    async def write(self, write: TableWrite) -> None:
        """Set or delete one table entry; returns once its changelog record is acknowledged."""


class StageObserver(Protocol):
    def stage(self, stage: str, seconds: float, turns: int | None = None) -> None:
        """``seconds`` one step of a batch took (``monitoring.MemoryMetrics``)."""


def outgoing_records(out: BatchOutput) -> list[OutgoingRecord]:
    """Step 2's records: dead letters, then event, relation and cluster changes, each keyed by its conversation."""
    records = [
        OutgoingRecord(topic=OutputTopic.DEAD_LETTERS, value=letter.model_dump_json().encode("utf-8"),
                       key=base64.b64decode(letter.original_key_base64)
                       if letter.original_key_base64 is not None else None)
        for letter in out.dead_letters
    ]
    for change in out.event_changes:
        key = f"{change.tenant}/{change.conversation_id}" if change.conversation_id else change.tenant
        records.append(OutgoingRecord(topic=OutputTopic.EVENTS, key=key.encode("utf-8"),
                                      value=change.model_dump_json().encode("utf-8")))
    for relation in out.relation_changes:
        key = f"{relation.relation.tenant}/{relation.relation.conversation_id}"
        records.append(OutgoingRecord(topic=OutputTopic.RELATIONS, key=key.encode("utf-8"),
                                      value=relation.model_dump_json().encode("utf-8")))
    for cluster in out.cluster_changes:
        key = f"{cluster.cluster.tenant}/{cluster.cluster.conversation_id}"
        records.append(OutgoingRecord(topic=OutputTopic.CLUSTERS, key=key.encode("utf-8"),
                                      value=cluster.model_dump_json().encode("utf-8")))
    return records


def table_writes(out: BatchOutput) -> list[TableWrite]:
    """Step 3's entries: the conversation records, then the tombstones, then the partitions' runtime settings."""
    writes = [TableWrite(table=StateTable.MEMORY, key=key.encode("utf-8"), value=value, partition=partition)
              for key, (value, partition) in out.states.items()]
    writes.extend(TableWrite(table=StateTable.TOMBSTONES, key=key.encode("utf-8"),
                             value=str(offset).encode("ascii"), partition=partition)
                  for key, (offset, partition) in out.tombstones.items())
    writes.extend(TableWrite(table=StateTable.SETTINGS, key=settings_key(partition),
                             value=settings.model_dump_json().encode("utf-8"), partition=partition)
                  for partition, settings in out.settings.items())
    return writes


def settings_key(partition: int) -> bytes:
    """The settings table's key of a turns partition."""
    return str(partition).encode("ascii")


class Checkpoint:
    """Commits batches: step 1 on ``store_thread``, steps 2 to 4 on the event loop. Without a producer or a table
    (tests, tools) those steps are skipped; the order of the rest stays."""

    def __init__(self, sinks: SinkGroup, store_thread: Executor, producer: Producer | None = None,
                 table: TableWriter | None = None, observer: StageObserver | None = None) -> None:
        self._sinks = sinks
        self._store_thread = store_thread
        self._producer = producer
        self._table = table
        self._observer = observer

    async def commit(self, apply: Callable[[], BatchOutput], acknowledge: Acknowledge | None = None) -> BatchOutput:
        """Commit one batch. ``apply`` runs on the store thread and adds the batch's writes to the sinks (the
        stream processor's ``process``); ``acknowledge`` acknowledges the batch's records.

        Raises what a step raised, with the later steps not run: a ``StoreWriteError`` therefore always means
        nothing of the batch left the stores' side, and the whole commit may be tried again."""
        loop = asyncio.get_running_loop()
        # In this task's context, so that the store thread's spans are children of the batch's.
        out = await loop.run_in_executor(self._store_thread, contextvars.copy_context().run, self._sinks.write, apply)
        with span("batch.commit"):
            if self._producer is not None:
                with stage("batch.publish") as took:
                    await self._produce(self._producer, out)
                self._stage("publish", took.seconds)
            if self._table is not None:
                with stage("batch.state") as took:
                    for write in table_writes(out):
                        # One at a time, each acknowledged (see app.py's FaustTables for why).
                        await self._table.write(write)
                self._stage("state", took.seconds)
            if acknowledge is not None:
                with span("batch.offsets"):
                    await acknowledge()
        return out

    @staticmethod
    async def _produce(producer: Producer, out: BatchOutput) -> None:
        """Send every record, then wait for the broker to acknowledge all of them."""
        pending = [await producer.send(record) for record in outgoing_records(out)]
        for letter in out.dead_letters:
            log.warning("stream.dead_letter", stage=letter.stage.value, reason=letter.reason,
                        topic=letter.topic, partition=letter.partition, offset=letter.offset)
        if pending:
            await asyncio.gather(*pending)

    def _stage(self, stage: str, seconds: float) -> None:
        if self._observer is not None:
            self._observer.stage(stage, seconds)
