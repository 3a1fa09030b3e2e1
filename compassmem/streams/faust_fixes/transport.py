"""Faust's aiokafka transport with four fixes (defects 1-4 of ``__init__.py``), registered as the
``compassmem-kafka://`` scheme.

Faust builds its consumer with ``fetch_max_wait_ms=1500`` and offers no setting for it. A broker answers a fetch
as soon as data arrives, up to that wait; Tansu does so for a fetch of one partition, but for a fetch spanning
several partitions it holds the request the whole wait. The worker always fetches several partitions (turns,
control), so the wait went straight into freshness: a short one costs a few idle fetch requests per second against a
real Kafka cluster (docs/decisions/008-worker-fetching-and-seeks.md).

The second fix (``_seek_to_committed_or_start``) keeps a rebalance from losing records; see its docstring.

The third (``_Consumer._add_gap``) keeps Faust from committing offsets the worker never applied; see its docstring.

The fourth (``_Consumer.stop_delivery``) lets a seek wait until Faust's delivery loop has let go of the record it
was handing over; see its docstring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from faust.types import TP

from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka

log = structlog.get_logger(__name__)

SCHEME = "compassmem-kafka"
FETCH_MAX_WAIT_MS = 100
# The longest ``stop_delivery`` waits for the delivery loop: a fetch in progress (Faust asks for 1 s at most), then
# Faust's own seek to the committed offsets if that fetch returned records while the flow was stopped.
DELIVERY_STOP_TIMEOUT_S = 10.0


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:  # noqa: ANN401 - aiokafka.AIOKafkaConsumer
        consumer = super()._create_worker_consumer(transport)
        # aiokafka hands this to its fetcher in start(), which has not run yet.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # noqa: SLF001
        return consumer

    async def seek_to_committed(self) -> Mapping[TP, int]:
        return await self.call_thread(self._seek_to_committed_or_start)

    async def _seek_to_committed_or_start(self) -> Mapping[TP, int]:
        """Seek every stream partition to its committed offset, and to the start when it has none.

        After a rebalance Faust drops the records its streams had queued but not processed, then seeks each
        partition back to its committed offset so they are read again; aiokafka only seeks when that offset is
        above 0. A partition never committed (a new consumer group, or a worker killed before its first commit)
        therefore kept its fetch position past the dropped records, and they were lost: measured as turns missing
        from memory after a restart. Seeking those partitions to the start reads them again; the table's
        per-conversation offsets skip what was already applied.
        """
        consumer = self._ensure_consumer()
        committed = await consumer.seek_to_committed()
        changelogs = set(self.consumer.app.tables.changelog_topics)
        uncommitted = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
        positions = {tp: offset for tp, offset in committed.items() if offset and tp.topic not in changelogs}
        if uncommitted:
            beginnings = await consumer.beginning_offsets(uncommitted)
            for tp in uncommitted:
                consumer.seek(tp, beginnings.get(tp) or 0)
                positions[tp] = beginnings.get(tp) or 0
        # Where each stream partition will be read from next: the worker's gap check starts there.
        for listener in list(self.consumer.seek_listeners):
            listener(positions)
        return committed


SeekListener = Callable[[Mapping[TP, int]], None]


class _Consumer(faust_aiokafka.Consumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - Faust's own signature
        super().__init__(*args, **kwargs)
        # Told (on the consumer's thread) where the stream partitions were sought to on each rebalance.
        self.seek_listeners: list[SeekListener] = []
        # Topics whose holes the worker's gap guard handles (streams/faust_fixes/positions.py): see _add_gap.
        self.guarded_topics: set[str] = set()
        # Set while Faust's delivery loop holds no record: not running, or waiting for the flow to resume
        # (stop_delivery).
        self._delivery_idle = asyncio.Event()
        self._delivery_idle.set()

    async def _drain_messages(self, fetcher: Any) -> None:  # noqa: ANN401 - Faust's Fetcher service
        self._delivery_idle.clear()
        try:
            await super()._drain_messages(fetcher)
        finally:
            self._delivery_idle.set()

    async def _wait_next_records(self, timeout: float) -> Any:  # noqa: ANN401 - Faust's (RecordMap, partitions)
        # The delivery loop comes here before each fetch, once it is done with the records of the last one.
        while not self.flow_active:
            self._delivery_idle.set()
            try:
                if (await self.wait(self.can_resume_flow)).stopped:
                    break  # the consumer is stopping or crashed: Faust's own code takes it from here
            finally:
                self._delivery_idle.clear()
        return await super()._wait_next_records(timeout)

    async def stop_delivery(self, timeout: float = DELIVERY_STOP_TIMEOUT_S) -> bool:
        """Stop the flow and return once Faust's delivery loop holds no record, so a seek made now is the last
        word on where each partition is read from. False if the loop did not get there within ``timeout``.

        ``stop_flow`` alone is not enough. The loop may be part-way through handing a record over (waiting for
        room in a full stream queue): it gives that record up when the flow stops, but then still sets the
        partition's read offset to the record's offset, and Faust drops every fetched record below its read
        offset. Done after a seek back, that write silently dropped the records re-fetched from the seek's
        target. Or a fetch is in progress: when it returns while the flow is stopped, Faust seeks every partition
        to its committed offset, and done after our seek, that undid it. The loop reaches ``_wait_next_records``
        only after both, and waits there until the flow resumes."""
        self.stop_flow()
        try:
            await asyncio.wait_for(self._delivery_idle.wait(), timeout)
        except TimeoutError:
            log.warning("stream.delivery_not_stopped", waited_s=timeout,
                        effect="seeking anyway; the gap guard catches records dropped by the delivery loop")
            return False
        return True

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Faust calls this when it delivers a record whose offset jumps past the last one it delivered, and from
        then on counts every offset in between as acknowledged, so its commit passes them. Meant for offsets that
        do not exist (compaction, transaction markers), it also fires for records that exist and were only not
        delivered yet: after a restart with a backlog the first records delivered were at the end of the log
        (offsets 630-794 with 79 committed), and the offsets in between became committable before the worker had
        applied them; a crash then would have skipped them for good. On a guarded topic the worker's gap guard
        seeks back to such holes and tells the consumer which offsets the broker says do not exist
        (``mark_missing``); nothing else is counted as acknowledged."""
        if tp.topic in self.guarded_topics:
            return
        await super()._add_gap(tp, offset_from, offset_to)

    async def mark_missing(self, tp: TP, first: int, last: int) -> None:
        """Offsets ``first`` .. ``last`` of a guarded topic do not exist on the broker: they count as acknowledged,
        so the commit can pass them."""
        await super()._add_gap(tp, first, last)

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


def broker_urls(bootstrap: str) -> list[str]:
    """Faust broker URLs for a ``host:port[,host:port]`` list, using this transport."""
    TRANSPORTS.aliases.setdefault(SCHEME, f"{__name__}:Transport")
    return [f"{SCHEME}://{server}" for server in bootstrap.split(",")]
