"""Store calls timed and their failures counted, for every backend at once.

A proxy rather than per-backend code: the vector and graph interfaces have a dozen methods each and several
backends, and the metrics are the same for all of them (operation = the interface method's name, a bounded set).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, cast

from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.sinks.factory import Stores
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.vector_store import VectorStore


class MeasuredStore:
    """Forwards every attribute to ``inner``; public methods are timed and their exceptions counted (and re-raised)."""

    def __init__(self, inner: object, store: str, metrics: MemoryMetrics) -> None:
        self._inner = inner
        self._store = store
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - whatever the wrapped store's attribute is
        attribute = getattr(self._inner, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        measured = self._measured(name, attribute)
        # Kept on the instance: later calls find it without __getattr__, the wrapper and its label lookups.
        setattr(self, name, measured)
        return measured

    def _measured(self, operation: str, method: Callable[..., Any]) -> Callable[..., Any]:
        seconds = self._metrics.store_seconds.labels(self._store, operation)
        errors = self._metrics.store_errors.labels(self._store, operation)

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            except Exception:
                errors.inc()
                raise
            finally:
                seconds.observe(time.perf_counter() - started)

        return call


def measure_stores(stores: Stores, metrics: MemoryMetrics) -> Stores:
    """The same stores (closing either object closes them), with calls measured."""
    return Stores(vectors=cast(VectorStore, MeasuredStore(stores.vectors, "vectors", metrics)),
                  graph=cast(GraphStore, MeasuredStore(stores.graph, "graph", metrics)),
                  embedded_falkordb=stores.embedded_falkordb)
