"""Seeking turns partitions back to records Faust lost on the way: the worker's side of the gap guard.

``positions.py`` tells, from what the agent is handed, where a turns partition has a hole or has stopped moving;
this seeks back there through the consumer of ``transport.py`` (its delivery stopped first, so no record it is still
handing over can undo the seek), steps over offsets the broker says do not exist, and stops the worker when a hole
does not fill. The memory agent (``compassmem/streams/app.py``) admits each batch through ``positions`` and counts
the batches it runs in ``batches_running``; a timer runs ``tick``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import faust
import structlog
from faust.types import TP

from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.streams.faust_fixes.positions import Admission, GapNotRepairedError, PartitionPositions
from compassmem.streams.topics import first_offset_at_or_after

log = structlog.get_logger(__name__)

# A turns partition behind the broker's end offset that has not moved this long (with no batch running) is sought
# back to its next offset (positions.py).
_STALL_S = 3.0
# ... or this long while another turns partition moves: under a backlog partitions wait their turn
# (docs/decisions/008-worker-fetching-and-seeks.md). A stall only delays records really lost: nothing past the
# partition's next offset is applied meanwhile.
_BUSY_STALL_S = 30.0


class GapRepair:
    """The gap guard of one worker's turns partitions on its Faust app."""

    def __init__(self, app: faust.App, topic: str, bootstrap: str, metrics: MemoryMetrics,
                 die: Callable[[BaseException], None]) -> None:
        self._app = app
        self._topic = topic
        self._bootstrap = bootstrap
        self._metrics = metrics
        # Stops the process (the worker's exit without acknowledging) when a hole does not fill.
        self._die = die
        # The next offset to apply per turns partition, set by every seek.
        self.positions = PartitionPositions(topic)
        # Batches the memory agent is running (it counts them): a seek back waits for the one taken before it.
        self.batches_running = 0
        self._assigned: list[int] = []
        self._end_probe_at = 0.0
        # How often Faust sought the turns partitions to their committed offsets (rebalances, and its delivery
        # loop finding the flow stopped after a fetch): one during a seek back moved the positions (see there).
        self._committed_seeks = 0

    def assigned(self, partitions: list[int], revoked: set[int]) -> None:
        """After a rebalance: the turns partitions this worker owns now, and those it lost."""
        self._assigned = partitions
        self.positions.revoked(revoked)
        listeners = getattr(self._app.consumer, "seek_listeners", None)
        if listeners is not None and self._sought not in listeners:
            listeners.append(self._sought)
        guarded = getattr(self._app.consumer, "guarded_topics", None)
        if guarded is not None:
            guarded.add(self._topic)

    def _sought(self, positions: Any) -> None:  # noqa: ANN401 - Mapping[TP, int], from the consumer's thread
        self._committed_seeks += 1
        self.positions.sought({tp.partition: int(offset) for tp, offset in positions.items()
                               if tp.topic == self._topic})

    async def repair(self, admission: Admission) -> None:
        for gap in admission.gaps:
            log.error("stream.offset_gap", partition=gap.partition, expected=gap.expected, received=gap.received,
                      held=sum(1 for r in admission.held if r.partition == gap.partition),
                      effect="held back, not applied; seeking back to the expected offset")
            self._metrics.offset_gap(gap.partition)
        await self._seek_back([gap.partition for gap in admission.gaps])

    async def _seek_back(self, partitions: Sequence[int], stalled: bool = False) -> None:
        """Seek turns partitions back to the next offsets the worker must apply, all in one seek (throttled per
        partition).

        The broker is asked first which record comes next: missing offsets that do not exist are stepped over, and
        a partition that only looked stalled (nothing exists at or after its next offset, e.g. its end offset
        counts a transaction marker) is left alone."""
        loop = asyncio.get_running_loop()
        topic = self._topic
        targets: dict[int, int] = {}
        for partition in partitions:
            expected = self.positions.next_offset(partition)
            if expected is None or not self.positions.seek_due(partition, batch_running=self.batches_running > 0):
                continue  # a seek there is recent: no broker probe for every held record until it takes effect
            first = await loop.run_in_executor(None, first_offset_at_or_after, self._bootstrap, topic, partition,
                                               expected)
            if self.positions.next_offset(partition) != expected:
                # Records came while the broker was asked (a slow first fetch looked like a stall): nothing to
                # repair, and a seek now would throw away what was fetched.
                continue
            if first is None and stalled:
                self.positions.sought({partition: expected})  # nothing to fetch: not a stall; look again later
                continue
            if first is not None and first > expected:
                self.positions.step_over(partition, expected, first)
                mark_missing = getattr(self._app.consumer, "mark_missing", None)
                if mark_missing is not None and self.positions.next_offset(partition) == first:
                    await mark_missing(TP(topic, partition), expected, first - 1)
            try:
                target = self.positions.should_seek(partition)
            except GapNotRepairedError as error:
                self._die(error)
            if target is not None:
                targets[partition] = target
        if not targets:
            return
        # As Faust does around a rebalance: stop the fetcher's delivery first. Records it already fetched past the
        # hole would otherwise still be delivered after the seek and move its read offset past the target, and it
        # silently drops re-fetched records below its read offset.
        # Stopping the flow drops the rest of the batch Faust is delivering for *every* partition (their fetch
        # positions have already moved past it), so every assigned partition goes back to its own next offset to
        # apply, in the same seek, not only the ones being repaired: seeking one at a time opened gaps on the others
        # and the seeks cascaded (docs/decisions/008-worker-fetching-and-seeks.md).
        sought = {TP(topic, partition): offset for partition, offset in targets.items()}
        for other in self._assigned:
            offset = self.positions.next_offset(other)
            if other not in targets and offset is not None:
                sought[TP(topic, other)] = offset
        consumer = self._app.consumer
        committed_seeks = self._committed_seeks
        try:
            await consumer.stop_delivery()
            await consumer.seek_wait(sought)
            undone = self._committed_seeks != committed_seeks
            if undone:
                # Faust's delivery loop found the flow stopped after a fetch and sought every partition to its
                # committed offset meanwhile, and the seek listener moved the positions' next offsets back there.
                # Ours came after it and is where reading resumes; records the streams already hold continue from
                # the next offsets to apply, so those are the positions' again (else each looked like a gap).
                self.positions.sought({tp.partition: offset for tp, offset in sought.items()})
        finally:
            consumer.resume_flow()
        log.warning("stream.seek_back", offsets=targets, also_sought=len(sought) - len(targets),
                    after_faust_sought_committed=undone)

    async def tick(self) -> None:
        """Seek back where records stopped coming: a gap whose records did not come back (after a seek, records
        Faust had already fetched can arrive first and make it drop the re-fetched ones), or a partition behind
        the broker's end offset that has not moved while no batch ran (records dropped before they reached the
        agent, with no later record to reveal the gap)."""
        repairing = self.positions.pending_repairs()
        await self._seek_back([partition for partition in repairing if partition in self._assigned])
        now = time.monotonic()
        if self.batches_running or not self.positions.quiet(_STALL_S) or now - self._end_probe_at < _STALL_S:
            return
        self._end_probe_at = now
        tps = [tp for tp in self._app.consumer.assignment() if tp.topic == self._topic]
        try:
            ends = await self._app.consumer.highwaters(*tps) if tps else {}
        except Exception as error:  # noqa: BLE001 - a probe; the next tick tries again
            if not self._app.should_stop:
                log.warning("stream.end_offsets_probe_failed", error=repr(error))
            return
        end_offsets = {tp.partition: int(offset) for tp, offset in ends.items() if offset is not None}
        # Faust pauses fetching a partition whose records would overfill the stream's buffer and resumes the paused
        # ones one at a time as the buffer drains; under a backlog one partition can wait many seconds for its
        # turn. That is not a stall: nothing was lost, and a seek (which stops the flow of every partition and
        # throws away what was fetched) only made it worse (docs/decisions/008-worker-fetching-and-seeks.md).
        paused = self._paused_by_flow_control()
        self.positions.paused(paused)
        stalled = [partition for partition in self.positions.stalled(end_offsets, _STALL_S, _BUSY_STALL_S)
                   if partition in self._assigned and partition not in repairing]
        for partition in stalled:
            log.error("stream.partition_stalled", partition=partition,
                      next_offset=self.positions.next_offset(partition), end_offset=end_offsets[partition],
                      effect="seeking back to the next offset to apply")
            self._metrics.offset_gap(partition)
        await self._seek_back(stalled, stalled=True)

    def _paused_by_flow_control(self) -> set[int]:
        """Turns partitions the consumer has stopped fetching while the stream's buffer is full (Faust's private
        ``_buffered_partitions``; an empty set if a Faust version has none)."""
        buffered = getattr(self._app.consumer, "_buffered_partitions", None) or set()
        return {tp.partition for tp in buffered if tp.topic == self._topic}
