"""What a long command shows while it runs."""

from __future__ import annotations

import sys
import time

from compassmem.core.terminal import echo


class Progress:
    """A single self-updating stderr line: long imports show they are alive and how fast they go."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.perf_counter()

    def __call__(self, advanced: int) -> None:
        self.done += advanced
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed else 0.0
        # Ends with a carriage return: the next update overwrites the line, the last one ends it.
        echo(f"  ingested {self.done}/{self.total} turns ({rate:.0f} turns/s)",
             end="\n" if self.done >= self.total else "\r", file=sys.stderr, flush=True)
