"""What a long command shows while it runs."""

from __future__ import annotations

import sys
import time


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
        print(f"\r  ingested {self.done}/{self.total} turns ({rate:.0f} turns/s)", end="", file=sys.stderr, flush=True)
        if self.done >= self.total:
            print(file=sys.stderr)
