"""Faust's table recovery with the end of a rebalance put in a safe order: the root cause of lost turns.

Faust 0.15's ``Recovery.on_recovery_completed`` ends a rebalance like this:

1. ``consumer.resume_partitions(stream partitions)`` while the fetcher is already running (recovery started it
   to read the changelogs, with the app's flow resumed),
2. ``await consumer.perform_seek()`` (seek the stream partitions to their committed offsets; a broker round trip),
3. ``app.flow_control.resume()``, which *clears every stream's in-memory queue* (``FlowControlQueue`` with
   ``clear_on_resume=True``) and cancels the puts waiting on a full queue.

With a backlog, a fetch that lands between 1 and 3 hands records to the streams; step 3 throws them away while
the fetch position has already moved past them, and Faust's read-offset filter then drops the same offsets if
they are fetched again after the seek. The agent therefore receives offsets 52-55, then 240: the skipped records
are never applied, each conversation's ``last_offset`` moves past them, and the replay after the next restart
treats them as already applied (the committed offset cannot pass the hole, since Faust commits contiguous acks
only and transport.py keeps its gap marking off the turns topic, but that does not bring them back).

Here the order is: stop the consumer's delivery (records the fetcher's loop is still handing over would otherwise arrive
after the seek), clear the queues (``flow_control.resume()``), seek while the stream partitions are still paused
(nothing of theirs can be fetched yet), and only then resume them and the delivery. ``positions.py`` (with
``gap_repair.py``) is the second line of defence: whatever the cause, the worker never applies a record past an offset
gap.
"""

from __future__ import annotations

from typing import Any, cast

from faust.tables import TableManager
from faust.tables.recovery import Recovery


class SeekFirstRecovery(Recovery):
    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
        callbacks = [table.on_recovery_completed(self.actives_for_table[table], self.standbys_for_table[table])
                     for table in self.tables.values()]
        for callback in callbacks:
            await callback
        assignment = consumer.assignment()
        if self.app.consumer_generation_id != generation_id:
            self.log.warning("Recovery rebalancing again app id %r param %r", self.app.consumer_generation_id,
                             generation_id)
            return
        # Stop delivery first. The fetcher's loop can be part-way through records it fetched for the stream
        # partitions while the changelogs were read; delivered after the seek, they moved its read offset past the
        # committed one and it dropped the records fetched again from there (seen under load: the first records
        # after a restart were from the end of the log, with offset 79 committed).
        await consumer.stop_delivery()
        if self.app.consumer_generation_id != generation_id:
            return  # rebalancing again: that recovery resumes the flow when it completes
        # Drop whatever the streams were handed before the seek; their partitions are paused from here on.
        self.app.flow_control.resume()
        if assignment:
            self.log.info("Seek stream partitions to committed offsets.")
            await self._wait(consumer.perform_seek(), timeout=self.app.conf.broker_request_timeout)
        consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
        self.completed.set()
        consumer.resume_flow()
        await cast(Any, self.app)._fetcher.maybe_start()  # noqa: SLF001 - Faust's own step, kept as is
        self.tables.on_actives_ready()
        if not self.app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        self.app.on_rebalance_end()
        self.log.info("Worker ready")


class SeekFirstTableManager(TableManager):
    """Faust's table manager with ``SeekFirstRecovery``; set as the app's ``TableManager``."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery
