"""The worker's offset-gap check (compassmem/streams/faust_fixes/positions.py), without a broker."""

from __future__ import annotations

import pytest

from compassmem.streams.decoding import RawRecord
from compassmem.streams.faust_fixes.positions import GapNotRepairedError, PartitionPositions

TOPIC = "t.turns"


def rec(partition: int, offset: int, topic: str = TOPIC) -> RawRecord:
    return RawRecord(topic=topic, partition=partition, offset=offset, key=b"k", value=b"{}")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def offsets(records: list[RawRecord]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_contiguous_records_and_replays_are_admitted() -> None:
    positions = PartitionPositions(TOPIC)
    positions.sought({0: 10, 1: 0})
    admission = positions.admit([rec(0, 8), rec(0, 9), rec(0, 10), rec(1, 0), rec(0, 11), rec(1, 1)])
    # 8 and 9 are below the sought offset: replays of applied records, which the conversation states skip.
    assert offsets(admission.admitted) == [(0, 8), (0, 9), (0, 10), (1, 0), (0, 11), (1, 1)]
    assert not admission.held and not admission.gaps
    assert positions.next_offset(0) == 12 and positions.next_offset(1) == 2


def test_a_gap_holds_back_the_rest_of_its_partition_only() -> None:
    positions = PartitionPositions(TOPIC)
    positions.sought({0: 52, 1: 41})
    admission = positions.admit([rec(0, 52), rec(1, 41), rec(0, 240), rec(1, 42), rec(0, 241), rec(3, 0, "ctl")])
    assert offsets(admission.admitted) == [(0, 52), (1, 41), (1, 42), (3, 0)]
    assert offsets(admission.held) == [(0, 240), (0, 241)]
    assert [(g.partition, g.expected, g.received) for g in admission.gaps] == [(0, 53, 240)]
    # Nothing past the hole moved the position: the next record to apply is still 53.
    assert positions.next_offset(0) == 53
    again = positions.admit([rec(0, 53), rec(0, 54)])
    assert offsets(again.admitted) == [(0, 53), (0, 54)] and not again.gaps


def test_offsets_that_do_not_exist_are_stepped_over() -> None:
    positions = PartitionPositions(TOPIC)
    positions.sought({2: 5})
    gap = positions.admit([rec(2, 9)]).gaps[0]
    positions.step_over(2, gap.expected, 9)  # the broker says the first record at or after 5 is 9
    assert positions.next_offset(2) == 9 and positions.offsets_stepped_over == 4
    assert offsets(positions.admit([rec(2, 9)]).admitted) == [(2, 9)]
    positions.step_over(2, 5, 20)  # a stale answer about an old position changes nothing
    assert positions.next_offset(2) == 10


def test_seeking_back_is_throttled_and_gives_up_loudly() -> None:
    clock = Clock()
    positions = PartitionPositions(TOPIC, reseek_interval_s=1.0, max_attempts=3, clock=clock)
    positions.sought({0: 7})
    positions.admit([rec(0, 30)])
    assert positions.should_seek(0) == 7
    assert positions.should_seek(0) is None  # a second gap record right after the seek: wait for the seek
    clock.now += 1.5
    assert positions.should_seek(0) == 7
    clock.now += 1.5
    assert positions.should_seek(0) is None  # the second seek is given two seconds
    clock.now += 1.0
    assert positions.should_seek(0) == 7
    assert positions.pending_repairs() == [0]
    clock.now += 4.5
    with pytest.raises(GapNotRepairedError, match="offset 7"):
        positions.should_seek(0)
    # The missing record arriving ends the repair.
    positions.admit([rec(0, 7)])
    assert positions.pending_repairs() == []


def test_a_partition_behind_the_end_that_does_not_move_is_stalled() -> None:
    clock = Clock()
    positions = PartitionPositions(TOPIC, clock=clock)
    positions.sought({0: 12, 1: 40, 2: 3})
    assert positions.stalled({0: 80, 1: 40, 2: 90}, stall_s=3.0) == []
    clock.now += 4
    positions.admit([rec(2, 3)])  # partition 2 moves
    assert positions.stalled({0: 80, 1: 40, 2: 90}, stall_s=3.0) == [0]  # partition 1 is at its end
    positions.revoked([0])
    assert positions.stalled({0: 80}, stall_s=3.0) == []


def test_while_another_partition_moves_a_still_one_is_stalled_only_after_the_longer_wait() -> None:
    """A backlog: the consumer hands over one partition's fetch at a time, so the others sit still meanwhile."""
    clock = Clock()
    positions = PartitionPositions(TOPIC, clock=clock)
    positions.sought({0: 12, 1: 40})
    assert positions.stalled({0: 80, 1: 900}, stall_s=3.0, busy_stall_s=30.0) == []  # both first seen behind
    offset = 40
    for _ in range(29):  # partition 1 is applied every second for 29 s; partition 0 waits its turn
        clock.now += 1
        positions.admit([rec(1, offset)])
        offset += 1
        assert positions.stalled({0: 80, 1: 900}, stall_s=3.0, busy_stall_s=30.0) == []
    clock.now += 1
    positions.admit([rec(1, offset)])
    assert positions.stalled({0: 80, 1: 900}, stall_s=3.0, busy_stall_s=30.0) == [0]
    # Once nothing moves at all, the short wait applies again (to both).
    positions.sought({0: 12})
    assert positions.stalled({0: 80, 1: 900}, stall_s=3.0, busy_stall_s=30.0) == []
    clock.now += 3
    assert positions.stalled({0: 80, 1: 900}, stall_s=3.0, busy_stall_s=30.0) == [0, 1]


def test_a_partition_idle_at_its_end_is_not_stalled_when_its_next_record_arrives() -> None:
    """Minutes without a record, then one reaches the broker: the partition is behind, but its records had no time
    to come yet. It is stalled only once it stays behind, without moving, for the wait counted from when it was
    first seen behind."""
    clock = Clock()
    positions = PartitionPositions(TOPIC, clock=clock)
    positions.sought({0: 12, 1: 40})
    assert positions.stalled({0: 12, 1: 40}, stall_s=3.0) == []  # both at their end
    clock.now += 600
    assert positions.stalled({0: 14, 1: 40}, stall_s=3.0) == []  # two records on partition 0, just produced
    clock.now += 2
    assert positions.stalled({0: 14, 1: 40}, stall_s=3.0) == []
    clock.now += 1
    assert positions.stalled({0: 14, 1: 40}, stall_s=3.0) == [0]  # 3 s behind without moving
    # Moving starts the count over: caught up, idle again, then behind again.
    positions.admit([rec(0, 12), rec(0, 13)])
    clock.now += 600
    assert positions.stalled({0: 15, 1: 40}, stall_s=3.0) == []
    positions.sought({0: 14})  # a seek moves it too
    clock.now += 3
    assert positions.stalled({0: 15, 1: 40}, stall_s=3.0) == []
    clock.now += 3
    assert positions.stalled({0: 15, 1: 40}, stall_s=3.0) == [0]


def test_a_seek_is_due_again_only_after_the_interval() -> None:
    clock = Clock()
    positions = PartitionPositions(TOPIC, reseek_interval_s=1.0, clock=clock)
    positions.sought({0: 7})
    positions.admit([rec(0, 30)])
    assert positions.seek_due(0)
    assert positions.should_seek(0) == 7
    assert not positions.seek_due(0)
    clock.now += 1.5
    assert positions.seek_due(0)


def test_seeks_back_to_the_same_offset_wait_longer_each_time_up_to_a_limit() -> None:
    clock = Clock()
    positions = PartitionPositions(TOPIC, reseek_interval_s=1.0, max_reseek_interval_s=8.0, max_attempts=100,
                                   clock=clock)
    positions.sought({0: 7})
    positions.admit([rec(0, 30)])
    seeks = []
    start = clock.now
    for step in range(400):  # 40 s in steps of 0.1 s
        clock.now = start + step / 10
        if positions.seek_due(0) and positions.should_seek(0) == 7:
            seeks.append(step / 10)
    gaps = [round(b - a, 1) for a, b in zip(seeks, seeks[1:])]
    assert gaps[:4] == [1.0, 2.0, 4.0, 8.0] and set(gaps[4:]) == {8.0}
    # A seek to another offset starts over at the short interval.
    positions.sought({0: 9})
    positions.admit([rec(0, 31)])
    assert positions.should_seek(0) == 9
    clock.now += 1.0
    assert positions.should_seek(0) == 9


def test_a_partition_paused_by_flow_control_is_not_stalled() -> None:
    clock = Clock()
    positions = PartitionPositions(TOPIC, clock=clock)
    positions.sought({0: 12, 1: 40})
    assert positions.stalled({0: 80, 1: 90}, stall_s=3.0) == []  # first seen behind
    clock.now += 4
    positions.paused([0, 7])  # 7 is not assigned here: nothing to mark
    assert positions.stalled({0: 80, 1: 90}, stall_s=3.0) == [1]
    clock.now += 4  # still not moving, no longer paused: stalled
    assert positions.stalled({0: 80, 1: 90}, stall_s=3.0) == [0, 1]
    assert positions.stalled({7: 10}, stall_s=3.0) == []


def test_a_seek_back_is_not_repeated_while_a_batch_taken_before_it_runs() -> None:
    """A batch of a few hundred turns takes seconds on a loaded machine: the records a seek brings cannot reach the
    worker before it ends, so the seek is not judged (and repeated) until a batch taken after it was admitted."""
    clock = Clock()
    positions = PartitionPositions(TOPIC, reseek_interval_s=1.0, clock=clock)
    positions.sought({0: 7})
    positions.admit([rec(0, 30)])  # a gap
    assert positions.should_seek(0) == 7
    clock.now += 5.0  # the batch that was running when it sought goes on
    assert not positions.seek_due(0, batch_running=True)
    assert positions.seek_due(0, batch_running=False)  # idle and nothing came: the seek did not take
    positions.admit([rec(0, 31)])  # a batch taken after the seek, still without offset 7 (fetched before it)
    assert positions.seek_due(0, batch_running=True)
    assert positions.should_seek(0) == 7
    clock.now += 5.0
    assert not positions.seek_due(0, batch_running=True)  # the count starts again at every seek
    positions.admit([rec(0, 7)])
    assert positions.pending_repairs() == [] and positions.seek_due(0, batch_running=True)
