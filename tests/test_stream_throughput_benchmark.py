"""benchmarks.stream_throughput's count of the stream repairs a round made."""

from __future__ import annotations

from benchmarks.stream_throughput import repairs
from compassmem.monitoring.metrics import MemoryMetrics


def test_repairs_count_every_gap_and_stall_over_all_partitions() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    assert repairs(metrics) == 0
    metrics.offset_gap(3)
    metrics.offset_gap(3)
    metrics.offset_gap(0)
    assert repairs(metrics) == 3
