"""freeze_long_lived_objects: what is alive is left out of later collections, what is garbage is freed first."""

from __future__ import annotations

import gc
import weakref

from compassmem.system.process_gc import freeze_long_lived_objects


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_garbage_is_freed_and_the_living_frozen() -> None:
    kept = _Node()
    cycle = _Node()
    cycle.other = _Node()
    cycle.other.other = cycle  # only a full collection frees a cycle
    gone = weakref.ref(cycle)
    del cycle
    try:
        freeze_long_lived_objects()
        assert gone() is None, "a cycle that was garbage at startup would never be freed once frozen"
        assert gc.get_freeze_count() > 0
        assert not any(obj is kept for obj in gc.get_objects()), "a living object is still walked by collections"
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
