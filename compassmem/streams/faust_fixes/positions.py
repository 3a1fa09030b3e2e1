"""The worker's guard against offset gaps: a turns-partition record is applied only in log order, never past a hole.

Every conversation's state remembers the last offset it reflects, and a replay skips records at or below it. That
is only sound if no record of the partition was ever skipped on the way there: a record applied past a hole moves
``last_offset`` past turns that were never applied, and every later replay treats them as done. Faust has lost
records this way (``recovery.py`` explains how); a broker or client quirk could do the same. So the worker checks
what it is handed against what it expects:

- after every seek (rebalance, start, our own re-seek) the next offset of each turns partition is the one sought to;
- a record below it is a replay (allowed: the conversation states skip it), the expected one advances it, and a
  record above it is a *gap*: that record and the rest of its partition in the batch are held back, neither applied
  nor acknowledged, and the worker finds out whether the missing offsets exist (``first_offset_at_or_after``) and
  seeks back to them. Offsets that do not exist (retention, compaction, transaction markers) are stepped over.

Pure bookkeeping here; the Faust agent (``app.py``) seeks and probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import structlog

from compassmem.streams.decoding import RawRecord

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Gap:
    partition: int
    expected: int  # the next offset the worker must apply
    received: int  # the first offset it was handed instead


@dataclass
class Admission:
    admitted: list[RawRecord] = field(default_factory=list)
    # Past a gap: not applied, not acknowledged; they come again after the seek back.
    held: list[RawRecord] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


@dataclass
class _Repair:
    """A gap being repaired: where the worker sought, when, and how often for this same offset."""

    offset: int
    last_seek: float
    attempts: int = 0
    batches_at_seek: int = 0  # ``PartitionPositions.batches`` when it sought


class GapNotRepairedError(RuntimeError):
    """Seeking back did not bring the missing offsets: stop loudly rather than skip them."""


class PartitionPositions:
    """Per turns partition: the next offset to apply, set by seeks and advanced by applied records."""

    def __init__(self, topic: str, reseek_interval_s: float = 1.0, max_attempts: int = 20,
                 max_reseek_interval_s: float = 8.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.topic = topic
        self.reseek_interval_s = reseek_interval_s
        self.max_reseek_interval_s = max(reseek_interval_s, max_reseek_interval_s)
        self.max_attempts = max_attempts
        self._clock = clock
        self._next: dict[int, int] = {}
        # When each partition last advanced or was sought: a partition behind the broker's end offset that has not
        # moved for a while had records dropped before they reached the worker, with no later record to show it.
        self._moved_at: dict[int, float] = {}
        # When ``stalled`` first saw each partition behind the broker's end offset since it last moved. A partition
        # idle for minutes whose first new records (a producer's, or the worker's own idle-close markers) have only
        # just reached the broker is behind but not stalled: its stall clock starts when it is first seen behind.
        self._behind_since: dict[int, float] = {}
        self._repairs: dict[int, _Repair] = {}
        self.gaps_detected = 0
        self.offsets_stepped_over = 0
        # Batches handed to ``admit`` so far: a seek back can only be judged once a batch fetched after it came.
        self.batches = 0

    def sought(self, positions: dict[int, int]) -> None:
        """The consumer was positioned at these offsets (partition -> next offset it will fetch)."""
        for partition, offset in positions.items():
            self._next[partition] = offset
            self._moved(partition)
            repair = self._repairs.get(partition)
            if repair is not None and repair.offset != offset:
                self._repairs.pop(partition)

    def revoked(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._next.pop(partition, None)
            self._moved_at.pop(partition, None)
            self._behind_since.pop(partition, None)
            self._repairs.pop(partition, None)

    def _moved(self, partition: int) -> None:
        """The partition advanced or was sought: its stall clock starts over."""
        self._moved_at[partition] = self._clock()
        self._behind_since.pop(partition, None)

    def next_offset(self, partition: int) -> int | None:
        return self._next.get(partition)

    def admit(self, records: Sequence[RawRecord]) -> Admission:
        """Split a batch into what may be applied now and what lies past a gap (see the module docstring)."""
        out = Admission()
        self.batches += 1
        blocked: set[int] = set()
        for record in records:
            if record.topic != self.topic:
                out.admitted.append(record)
                continue
            partition, offset = record.partition, record.offset
            if partition in blocked:
                out.held.append(record)
                continue
            expected = self._next.get(partition)
            if expected is None or offset == expected:
                self._next[partition] = offset + 1
                self._moved(partition)
                self._repairs.pop(partition, None)
                out.admitted.append(record)
            elif offset < expected:
                out.admitted.append(record)  # a replay: the conversation states skip what they already hold
            else:
                blocked.add(partition)
                out.held.append(record)
                out.gaps.append(Gap(partition=partition, expected=expected, received=offset))
        self.gaps_detected += len(out.gaps)
        return out

    def step_over(self, partition: int, expected: int, first_existing: int) -> None:
        """Offsets ``expected .. first_existing - 1`` do not exist on the broker: the next to apply is the first
        that does."""
        if self._next.get(partition) == expected and first_existing > expected:
            self._next[partition] = first_existing
            self.offsets_stepped_over += first_existing - expected
            log.warning("stream.offsets_do_not_exist", partition=partition, first=expected, last=first_existing - 1,
                        effect="stepped over (retention, compaction or transaction markers)")

    def seek_due(self, partition: int, batch_running: bool = False) -> bool:
        """False while the last seek back to this partition's next offset is recent (nothing to do yet), or while
        the worker is still busy with a batch it took before that seek (``batch_running`` and no batch admitted
        since): the records the seek brings cannot have reached it yet. A batch of a few hundred turns takes
        seconds on a loaded machine, and seeking again meanwhile threw away what the first seek had fetched and
        delivered every other partition's records twice."""
        repair = self._repairs.get(partition)
        if repair is None or repair.offset != self._next.get(partition):
            return True
        if batch_running and self.batches == repair.batches_at_seek:
            return False
        return self._clock() - repair.last_seek >= self._wait_after(repair)

    def _wait_after(self, repair: _Repair) -> float:
        """How long a seek back is given before the next one to the same offset: doubling per attempt up to
        ``max_reseek_interval_s``. Every seek throws away what the consumer had fetched for the partition, so
        under a backlog, when one fetch takes longer than the interval, fixed-interval seeks kept cancelling the
        very fetch that would have brought the records (nine seeks in a row in a 150,000-turn backlog)."""
        return min(self.reseek_interval_s * 2 ** (repair.attempts - 1), self.max_reseek_interval_s)

    def should_seek(self, partition: int) -> int | None:
        """The offset to seek ``partition`` back to, or None while the last seek there is recent.

        Raises ``GapNotRepairedError`` after ``max_attempts`` seeks to the same offset brought nothing (about two
        and a half minutes with the defaults)."""
        expected = self._next.get(partition)
        if expected is None:
            return None
        now = self._clock()
        repair = self._repairs.get(partition)
        if repair is None or repair.offset != expected:
            self._repairs[partition] = _Repair(offset=expected, last_seek=now, attempts=1,
                                               batches_at_seek=self.batches)
            return expected
        if now - repair.last_seek < self._wait_after(repair):
            return None
        if repair.attempts >= self.max_attempts:
            raise GapNotRepairedError(
                f"partition {partition} of {self.topic}: {repair.attempts} seeks back to offset {expected} did not "
                "bring it; stopping rather than applying records past the gap"
            )
        repair.attempts += 1
        repair.last_seek = now
        repair.batches_at_seek = self.batches
        return expected

    def quiet(self, stall_s: float) -> bool:
        """Whether any partition has not moved for ``stall_s`` (only then is the broker asked for end offsets)."""
        now = self._clock()
        return any(now - moved >= stall_s for moved in self._moved_at.values())

    def stalled(self, end_offsets: dict[int, int], stall_s: float, busy_stall_s: float | None = None) -> list[int]:
        """Partitions whose next offset is below the broker's end offset and that have not moved for
        ``stall_s`` since they were first seen behind it (a call of this method): their records were dropped on
        the way, or a seek back was undone.

        Counted from the first sighting, not from the last move: a partition that sat idle for minutes had "not
        moved" for minutes the moment its next record reached the broker, and was sought back at once. Each such
        seek threw away what had been fetched for every partition (stream_throughput saw one in most runs, when
        the first round's conversations got their idle-close markers two rounds later). A real stall is found one
        call later.

        While another partition moves (the worker is busy with a backlog), only after ``busy_stall_s``: the
        consumer hands over what it fetched partition by partition, and one partition's fetch can keep the worker
        busy for longer than ``stall_s``; seeking then threw away what had been fetched for every partition."""
        now = self._clock()
        busy = any(now - moved < stall_s for moved in self._moved_at.values())
        limit = max(stall_s, busy_stall_s) if busy and busy_stall_s is not None else stall_s
        stalled = []
        for partition, expected in self._next.items():
            if end_offsets.get(partition, 0) <= expected:
                self._behind_since.pop(partition, None)
                continue
            seen = self._behind_since.setdefault(partition, now)
            if now - max(self._moved_at.get(partition, now), seen) >= limit:
                stalled.append(partition)
        return sorted(stalled)

    def paused(self, partitions: Iterable[int]) -> None:
        """These partitions are paused by the consumer's own flow control: not stalled, so not sought back."""
        now = self._clock()
        for partition in partitions:
            if partition in self._moved_at:
                self._moved_at[partition] = now

    def pending_repairs(self) -> list[int]:
        """Partitions waiting for the records of a gap to come again."""
        return sorted(self._repairs)
