"""Shares the reranker's threads between the queries of a process, cheapest work first.

A plain thread pool runs pairs first come, first served: four clients reranking 200 long pairs each made a short
question wait behind 800 pairs. Here every query's pairs form a batch ranked by its cost class (its word pieces, by
powers of two), then by what its tenant already has queued, then by arrival: a short question goes ahead of long
ones whoever asks them, a tenant asking little goes ahead of one asking much at the same cost, and a batch left
waiting past its time budget is dropped, not run (the query then ranks without the reranker).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class _Batch:
    tenant: str
    tokens: int
    results: np.ndarray
    remaining: int
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    error: BaseException | None = None


class PairScheduler:
    """Runs ``score(pair)`` for many queries' pairs on ``workers`` threads (the threads start on first use)."""

    def __init__(self, score: Callable[[tuple[list[int], list[int]]], float], workers: int) -> None:
        self._score = score
        self._workers = max(1, workers)
        self._heap: list[tuple[int, int, int, int, _Batch, tuple[list[int], list[int]]]] = []
        self._queued_tokens: dict[str, int] = {}
        self._lock = threading.Condition()
        self._sequence = itertools.count()
        self._threads: list[threading.Thread] = []

    def run(self, pairs: Sequence[tuple[list[int], list[int]]], tenant: str,
            timeout_s: float | None) -> np.ndarray | None:
        """Each pair's score, in order; None when they were not all scored within ``timeout_s`` (what was left is
        dropped, so an abandoned query costs no more work)."""
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        tokens = sum(len(ids) for ids, _ in pairs)
        batch = _Batch(tenant, tokens, np.zeros(len(pairs), dtype=np.float32), len(pairs))
        with self._lock:
            self._start_workers()
            queued = self._queued_tokens.get(tenant, 0)
            self._queued_tokens[tenant] = queued + tokens
            order = next(self._sequence)
            for index, pair in enumerate(pairs):
                heapq.heappush(self._heap, (tokens.bit_length(), queued, order, index, batch, pair))
            self._lock.notify_all()
        finished = batch.done.wait(timeout_s)
        with self._lock:
            if not finished and batch.remaining:
                batch.cancelled = True
                self._release(batch)
                return None
        if batch.error is not None:
            raise batch.error
        return batch.results

    def _release(self, batch: _Batch) -> None:
        left = self._queued_tokens.get(batch.tenant, 0) - batch.tokens
        if left > 0:
            self._queued_tokens[batch.tenant] = left
        else:
            self._queued_tokens.pop(batch.tenant, None)

    def _start_workers(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._work, name=f"reranker-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._heap:
                    self._lock.wait()
                *_, index, batch, pair = heapq.heappop(self._heap)
                if batch.cancelled:
                    continue
            try:
                score, error = self._score(pair), None
            except Exception as failed:  # noqa: BLE001 - handed to the query that asked, never kills the worker
                score, error = 0.0, failed
            with self._lock:
                if batch.cancelled or batch.done.is_set():
                    continue
                batch.results[index] = score
                batch.remaining -= 1
                if error is not None or not batch.remaining:
                    batch.error = error
                    batch.cancelled = error is not None  # its other pairs are not worth scoring
                    self._release(batch)
                    batch.done.set()
