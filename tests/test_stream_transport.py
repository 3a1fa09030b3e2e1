"""The worker's Faust consumer (compassmem/streams/transport.py) on its own, without a broker: what its commit may
pass. Faust counts the offsets it saw skipped in delivery as acknowledged; on the turns topic only offsets the
broker says do not exist may be (``mark_missing``), so an offset is never committed before the worker applied it.
"""

from __future__ import annotations

import asyncio

import faust
from faust.types import TP

from compassmem.streams.transport import broker_urls

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
