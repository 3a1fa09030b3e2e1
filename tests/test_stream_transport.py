"""The worker's Faust consumer (compassmem/streams/faust_fixes/transport.py) on its own, without a broker: what its
commit may pass. Faust counts the offsets it saw skipped in delivery as acknowledged; on the turns topic only offsets
the broker says do not exist may be (``mark_missing``), so an offset is never committed before the worker applied it.
"""

from __future__ import annotations

import asyncio

import faust
from faust.types import TP

from compassmem.streams.faust_fixes.transport import broker_urls

TURNS = "t.turns"


def commits(consumer: faust.types.ConsumerT, tp: TP, rounds: int = 8) -> list[int]:
    """The offsets successive commits would write, each taken as committed before the next (Faust's commit)."""
    written = []
    for _ in range(rounds):
        offset = consumer._new_offset(tp)  # noqa: SLF001 - the commit's own choice of offset
        if offset is not None:
            consumer._committed_offset[tp] = offset  # noqa: SLF001
            written.append(offset)
    return written


async def skipped_in_delivery(consumer: faust.types.ConsumerT, tp: TP) -> None:
    """Committed 4; the first record delivered is 20 (records fetched before a seek, delivered after it), so Faust
    sees 5-19 skipped; then the worker applies and acknowledges 4-7 only."""
    consumer._committed_offset[tp] = 4  # noqa: SLF001
    await consumer._add_gap(tp, 5, 19)  # noqa: SLF001 - what Faust's delivery loop calls on the jump
    consumer._acked[tp] = [4, 5, 6, 7]  # noqa: SLF001


def test_offsets_skipped_in_delivery_are_not_committed_on_a_guarded_topic() -> None:
    async def run() -> tuple[list[int], list[int]]:
        app = faust.App("gap-test", broker=broker_urls("127.0.0.1:1"), store="memory://")
        consumer = app.consumer
        consumer.guarded_topics.add(TURNS)
        guarded, other = TP(TURNS, 0), TP("t.control", 0)
        await skipped_in_delivery(consumer, guarded)
        await skipped_in_delivery(consumer, other)
        return commits(consumer, guarded), commits(consumer, other)

    guarded, other = asyncio.run(run())
    assert guarded == [8]  # what was applied, no further
    # Faust's own behaviour, kept for other topics: a few commits later it passes 8-19, never applied.
    assert other[-1] == 20


def test_offsets_the_broker_says_do_not_exist_are_committed_past() -> None:
    async def run() -> list[int]:
        app = faust.App("gap-test", broker=broker_urls("127.0.0.1:1"), store="memory://")
        consumer = app.consumer
        consumer.guarded_topics.add(TURNS)
        tp = TP(TURNS, 1)
        consumer._committed_offset[tp] = 4  # noqa: SLF001
        consumer._acked[tp] = [4, 5]  # noqa: SLF001
        first = commits(consumer, tp)
        await consumer.mark_missing(tp, 6, 9)  # the worker's gap guard stepped over 6-9 (compaction, markers)
        consumer._acked[tp] = [10, 11]  # noqa: SLF001
        return first + commits(consumer, tp)

    assert asyncio.run(run()) == [6, 12]


class _Record:
    """What ``_to_message`` is given and, here, hands on as is: the attributes Faust's delivery loop reads."""

    def __init__(self, topic: str, offset: int) -> None:
        self.topic, self.offset, self.key, self.value = topic, offset, None, b"x"


class _Fetcher:
    """The service whose stop ends Faust's delivery loop (``Consumer._drain_messages``)."""

    def __init__(self) -> None:
        self._stopped = asyncio.Event()


async def delivery_held_up(consumer: faust.types.ConsumerT, tp: TP, fetched: list[int]) -> tuple[
        asyncio.Task, list[int], asyncio.Event]:
    """Faust's delivery loop over a fake fetch that returns ``fetched`` once, handing records to a stream whose
    queue is full from the second record on; returns the loop's task, the offsets delivered, and an event set once
    the loop is stuck handing over the second record."""
    delivered: list[int] = []
    stuck = asyncio.Event()
    batches = [{tp: [_Record(tp.topic, offset) for offset in fetched]}]

    async def fetch(active_partitions: object, timeout: float) -> dict:
        if batches:
            return batches.pop()
        await asyncio.sleep(0.01)
        return {}

    async def hand_over(message: _Record) -> None:
        if delivered:
            stuck.set()
            await asyncio.Event().wait()  # a full stream queue: Faust gives the record up when the flow stops
        delivered.append(message.offset)

    consumer._getmany = fetch  # noqa: SLF001 - the fetch itself, below the delivery loop
    consumer._to_message = lambda _tp, record: record  # noqa: SLF001
    consumer.callback = hand_over
    consumer._active_partitions = {tp}  # noqa: SLF001
    consumer.highwater = lambda _tp: fetched[-1] + 1
    loop_task = asyncio.ensure_future(consumer._drain_messages(_Fetcher()))  # noqa: SLF001
    await asyncio.wait_for(stuck.wait(), 5)
    return loop_task, delivered, stuck


def test_a_seek_after_stopping_delivery_is_not_undone_by_the_record_being_handed_over() -> None:
    """The delivery loop gives up a record it could not hand over when the flow stops, then still sets the
    partition's read offset to that record's offset, and Faust drops every record fetched below it. A seek back
    that sets the read offset before that write lost the records re-fetched from the seek's target; after
    ``stop_delivery`` nothing writes the read offset until the flow resumes."""

    async def run() -> tuple[list[int], int, int | None, bool]:
        app = faust.App("delivery-test", broker=broker_urls("127.0.0.1:1"), store="memory://")
        consumer = app.consumer
        tp = TP(TURNS, 0)
        loop_task, delivered, _ = await delivery_held_up(consumer, tp, [30, 31, 32])
        parked = await consumer.stop_delivery(timeout=5)
        given_up = consumer._read_offset.get(tp)  # noqa: SLF001 - set for the record given up
        consumer._read_offset[tp] = 20  # noqa: SLF001 - what seek_wait sets: re-read from 20
        await asyncio.sleep(0.1)  # the loop stays parked: nothing moves the read offset now
        after = consumer._read_offset.get(tp)  # noqa: SLF001
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        return delivered, after, given_up, parked

    async def seek_right_after_stop_flow() -> int | None:
        app = faust.App("delivery-test", broker=broker_urls("127.0.0.1:1"), store="memory://")
        consumer = app.consumer
        tp = TP(TURNS, 0)
        loop_task, _, _ = await delivery_held_up(consumer, tp, [30, 31, 32])
        consumer.stop_flow()
        consumer._read_offset[tp] = 20  # noqa: SLF001
        await asyncio.sleep(0.1)
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        return consumer._read_offset.get(tp)  # noqa: SLF001

    delivered, after, given_up, parked = asyncio.run(run())
    assert delivered == [30]
    assert parked
    assert given_up == 31  # the loop's own write came before stop_delivery returned ...
    assert after == 20  # ... so the seek's read offset stands
    # Without the wait, the loop's write lands after the seek's: records 20-30 fetched again would be dropped.
    assert asyncio.run(seek_right_after_stop_flow()) == 31


def test_stopping_delivery_waits_for_a_loop_part_way_through_a_record_and_returns_at_once_without_one() -> None:
    async def run() -> tuple[bool, bool, float]:
        app = faust.App("delivery-test", broker=broker_urls("127.0.0.1:1"), store="memory://")
        consumer = app.consumer
        idle = await consumer.stop_delivery(timeout=0.5)  # no delivery loop running: nothing to wait for
        consumer.resume_flow()
        tp = TP(TURNS, 1)
        loop_task, _, _ = await delivery_held_up(consumer, tp, [5, 6])
        # The loop cannot reach its resting place while the record is mid-hand-over and the flow runs.
        waited = asyncio.ensure_future(consumer._delivery_idle.wait())  # noqa: SLF001
        await asyncio.sleep(0.1)
        early = waited.done()
        waited.cancel()
        started = asyncio.get_running_loop().time()
        parked = await consumer.stop_delivery(timeout=5)
        seconds = asyncio.get_running_loop().time() - started
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
        return idle and not early, parked, seconds

    ok, parked, seconds = asyncio.run(run())
    assert ok
    assert parked
    assert seconds < 5
