"""The store side of a batch's commit: one writer's sinks, flushed together in one fixed order.

``SinkGroup`` is step 1 of ``streams.checkpoint.Checkpoint.commit`` (the streaming worker runs it on its store
thread) and the whole commit of the in-process ``MemoryPipeline``, which has no change feeds, table or offsets:
the same object in both, so the order in which stores are written is decided in one place.

The order of the sinks is the order they were given in, and it matters: the vector sink before the provisional
one (a retired provisional event is deleted only after its turns were rewritten under their final event), the
stores before the change feed's collector.

What a batch changed (``MemoryUpdate``) reaches the observer only once it is flushed: a batch that is redone after
a failed flush, or after a poison turn, is counted once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from compassmem.processors.conversation_memory import MemoryUpdate
from compassmem.sinks.batching import Record, Sink
from compassmem.core.tracing import stage

T = TypeVar("T")


class PipelineObserver(Protocol):
    """Told what each batch did, e.g. ``monitoring.MemoryMetrics``: the stages' times by the pipeline
    (``compassmem/write/pipeline.py``, ``compassmem/streams/processor.py``), what a batch changed by the sink group below
    once it is flushed. Neither keeps metrics itself."""

    def stage(self, stage: str, seconds: float, turns: int | None = None) -> None:
        """``seconds`` spent in ``stage`` for one batch, and the turns it handled (None: the stage is not per turn)."""

    def memory_update(self, update: MemoryUpdate) -> None:
        """What the batch changed: merges, relations written, reclustering runs."""


class SinkGroup:
    """Records in, to every sink; ``flush`` writes them all, sink after sink; ``write`` makes a batch one unit."""

    def __init__(self, sinks: Sequence[Sink], observer: PipelineObserver | None = None,
                 on_discard: Callable[[], None] | None = None) -> None:
        self._sinks = tuple(sinks)
        self._observer = observer
        # Told when the unflushed records are dropped: whoever built them (the stream processor's live memories)
        # drops what they were built from too, so the batch is redone from its starting state.
        self._on_discard = on_discard
        self._updates: list[MemoryUpdate] = []
        self._added = False

    @property
    def sinks(self) -> tuple[Sink, ...]:
        return self._sinks

    def add(self, record: Record) -> None:
        self._added = True
        for sink in self._sinks:
            sink.add(record)

    def add_update(self, update: MemoryUpdate) -> None:
        """Every record of an update, what it retracts first, nodes before the edges that need them; the update is
        reported once flushed."""
        for record in [*update.retractions, *update.events, *update.turns, *update.passages, *update.clusters,
                       *update.relations]:
            self.add(record)
        self._updates.append(update)

    def flush(self) -> None:
        """Flush every sink in order, then settle each (wait until its writes are durable: a sink may leave its
        store's flush running while the sinks after it write); after it returns, everything added is in the stores.

        A sink that raises stops the flush there and the records stay buffered: a caller that will redo the batch
        discards them (``write`` does)."""
        if not self._added and not self._updates:
            return
        with stage("batch.store", sinks=len(self._sinks)) as took:
            for sink in self._sinks:
                sink.flush()
            for sink in self._sinks:
                sink.settle()
        updates, self._updates, self._added = self._updates, [], False
        if self._observer is not None:
            self._observer.stage("store", took.seconds, sum(len(update.turns) for update in updates))
            for update in updates:
                for name, stage_seconds in update.stage_seconds.items():
                    self._observer.stage(name, stage_seconds)
                self._observer.memory_update(update)

    def write(self, apply: Callable[[], T]) -> T:
        """Run ``apply`` (it adds a batch's records) and flush, as one unit: if either raises, what was added is
        discarded (and ``on_discard`` told), so the batch can be applied again from its starting state."""
        try:
            result = apply()
            self.flush()
        except BaseException:
            self.discard()
            raise
        return result

    def discard(self) -> None:
        for sink in self._sinks:
            sink.discard()
        self._updates, self._added = [], False
        if self._on_discard is not None:
            self._on_discard()
