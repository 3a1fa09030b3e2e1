"""The metrics layer on its own: confidence drift, derived health gauges, bounded labels, measured store calls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from conftest import stream_conversation
from prometheus_text import parse_samples, total, value

from compassmem.core.contracts.dead_letters import DeadLetterReason, DeadLetterStage
from compassmem.core.models import RelationType
from compassmem.monitoring.confidence_drift import ConfidenceDrift, DriftConfig
from compassmem.monitoring.measured_stores import MeasuredStore
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.conversation_memory import ConversationHealth, MemoryUpdate
from compassmem.processors.relations import ADJACENCY_EVIDENCE
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.streams.decoding import RawRecord

SMALL_DRIFT = DriftConfig(recent_size=20, reference_half_life=50, sample_every=5, trend_samples=6)


def samples_of(metrics: MemoryMetrics) -> dict:
    return parse_samples(generate_latest(metrics.registry).decode())


# -- confidence drift -------------------------------------------------------------------------------------------


def test_drift_is_zero_until_the_reference_window_has_data() -> None:
    drift = ConfidenceDrift(SMALL_DRIFT)
    drift.add([0.9] * 20)
    reading = drift.reading()
    assert reading.recent_mean == pytest.approx(0.9) and reading.reference_mean is None and reading.drift == 0


def test_steady_confidence_shows_no_drift_and_no_trend() -> None:
    drift = ConfidenceDrift(SMALL_DRIFT)
    drift.add([0.7, 0.8] * 100)
    reading = drift.reading()
    assert reading.drift == pytest.approx(0.0, abs=0.01)
    assert reading.trend_per_1000 == pytest.approx(0.0, abs=1.0)


def test_falling_confidence_shows_negative_drift_and_trend() -> None:
    drift = ConfidenceDrift(SMALL_DRIFT)
    drift.add([0.8] * 100)
    drift.add([0.8 - 0.01 * step for step in range(30)])
    reading = drift.reading()
    assert reading.recent_mean < reading.reference_mean  # type: ignore[operator]
    assert reading.drift < -0.05
    assert reading.trend_per_1000 < -0.02 * 1000 / 30  # about -0.01 per relation while it falls


def test_the_reference_is_the_mean_of_what_left_the_window_not_its_first_value() -> None:
    drift = ConfidenceDrift(SMALL_DRIFT)
    drift.add([0.9, 0.5] * 20 + [0.7] * 20)
    reading = drift.reading()
    assert reading.reference_mean == pytest.approx(0.7)
    assert reading.drift == pytest.approx(0.0)


def test_rising_confidence_shows_positive_drift() -> None:
    drift = ConfidenceDrift(SMALL_DRIFT)
    drift.add([0.4] * 100 + [0.9] * 20)
    reading = drift.reading()
    assert reading.drift > 0.3 and reading.trend_per_1000 > 0


# -- derived gauges and bounded labels ---------------------------------------------------------------------------


def test_health_gauges_sum_conversations_and_forget_removes_them() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    metrics.conversations_changed({
        "t/a": ConversationHealth(events=10, relations=10, adjacency_relations=4, segments=12, merged_segments=2),
        "t/b": ConversationHealth(events=10, relations=20, adjacency_relations=6, segments=8, merged_segments=0),
    })
    samples = samples_of(metrics)
    assert value(samples, "compassmem_graph_average_degree", edges="all") == pytest.approx(2 * 30 / 20)
    assert value(samples, "compassmem_graph_average_degree", edges="semantic") == pytest.approx(2 * 20 / 20)
    assert value(samples, "compassmem_event_duplicate_ratio") == pytest.approx(2 / 20)
    assert value(samples, "compassmem_memory_relations", kind="adjacency") == 10
    assert value(samples, "compassmem_conversation_average_degree", conversation="t/b") == pytest.approx(4.0)

    metrics.conversations_changed({"t/b": None})
    samples = samples_of(metrics)
    assert value(samples, "compassmem_memory_conversations") == 1
    assert value(samples, "compassmem_graph_average_degree", edges="all") == pytest.approx(2.0)
    assert ("compassmem_conversation_average_degree", frozenset({("conversation", "t/b")})) not in samples


def test_per_conversation_degree_keeps_only_the_most_recently_updated() -> None:
    metrics = MemoryMetrics(conversation_labels=3, process_collectors=False)
    for index in range(6):
        metrics.conversations_changed({f"t/c{index}": ConversationHealth(events=2, relations=index)})
    metrics.conversations_changed({"t/c3": ConversationHealth(events=2, relations=9)})
    labelled = {dict(labels)["conversation"] for name, labels in samples_of(metrics)
                if name == "compassmem_conversation_average_degree"}
    assert labelled == {"t/c3", "t/c4", "t/c5"}
    # The global figures still cover every conversation, labelled or not.
    assert value(samples_of(metrics), "compassmem_memory_conversations") == 6


def test_owned_conversations_replace_what_the_gauges_cover() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    metrics.conversations_changed({"t/a": ConversationHealth(events=4, relations=4),
                                   "t/b": ConversationHealth(events=6, relations=3)})
    # A rebalance took t/a away and brought t/c, whose state this worker only read from its table.
    metrics.conversations_owned({"t/b": ConversationHealth(events=6, relations=3),
                                 "t/c": ConversationHealth(events=10, relations=30)})
    samples = samples_of(metrics)
    assert value(samples, "compassmem_memory_conversations") == 2
    assert value(samples, "compassmem_memory_events") == 16
    labelled = {dict(labels)["conversation"] for name, labels in samples
                if name == "compassmem_conversation_average_degree"}
    assert labelled == {"t/b"}


def test_memory_update_counts_relations_and_leaves_adjacency_out_of_the_confidence(
        event_builder: Callable[..., Any], relation_builder: Callable[..., Any]) -> None:
    metrics = MemoryMetrics(process_collectors=False)
    first, second = event_builder(first_turn=1), event_builder(first_turn=3)
    adjacency = relation_builder(first, second.event_id, RelationType.FOLLOW_UP, confidence=1.0)
    adjacency = adjacency.model_copy(update={"evidence": sorted(ADJACENCY_EVIDENCE)[0]})
    causal = relation_builder(second, first.event_id, RelationType.CAUSAL, confidence=0.6)
    metrics.memory_update(MemoryUpdate(relations=[adjacency, causal], segments_closed=3, recluster_seconds=[0.2]))
    samples = samples_of(metrics)
    assert value(samples, "compassmem_relations_written_total", type="follow_up") == 1
    assert value(samples, "compassmem_relations_written_total", type="causal") == 1
    assert value(samples, "compassmem_relation_confidence_count") == 1
    assert value(samples, "compassmem_relation_confidence_mean", window="recent") == pytest.approx(0.6)
    assert value(samples, "compassmem_segments_closed_total") == 3
    assert value(samples, "compassmem_recluster_runs_total") == 1
    assert value(samples, "compassmem_recluster_duration_seconds_sum") == pytest.approx(0.2)


def test_dead_letters_are_counted_by_stage_and_reason_code() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    record = RawRecord(topic="turns", partition=0, offset=5, key=b"k", value=b"{")
    metrics.dead_lettered([record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.NOT_JSON, "bad"),
                           record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.NOT_JSON, "worse")])
    assert value(samples_of(metrics), "compassmem_dead_letters_total", stage="decode", reason="not_json") == 2


def test_lag_of_revoked_partitions_is_dropped() -> None:
    metrics = MemoryMetrics(process_collectors=False)
    metrics.set_lag("turns", {0: 5, 1: -3})
    samples = samples_of(metrics)
    assert value(samples, "compassmem_consumer_lag_records", topic="turns", partition="0") == 5
    assert value(samples, "compassmem_consumer_lag_records", topic="turns", partition="1") == 0  # never negative
    metrics.drop_lag("turns", [0])
    assert total(samples_of(metrics), "compassmem_consumer_lag_records", partition="0") == 0
    assert ("compassmem_consumer_lag_records", frozenset({("topic", "turns"), ("partition", "0")})) \
        not in samples_of(metrics)


# -- measured stores ---------------------------------------------------------------------------------------------


def test_a_failing_store_call_is_counted_and_still_raises(own_falkordb_dir: Path) -> None:
    metrics = MemoryMetrics(process_collectors=False)
    server = EmbeddedFalkorDB(own_falkordb_dir).start()
    graph = MeasuredStore(FalkorDBGraphStore.from_embedded(server), "graph", metrics)
    assert graph.relations("default", "c1") == []  # type: ignore[attr-defined]
    server.stop()  # the store goes away under its client: a real failure
    with pytest.raises(Exception):  # noqa: B017 - whichever connection error the client raises
        graph.relations("default", "c1")  # type: ignore[attr-defined]
    samples = samples_of(metrics)
    assert value(samples, "compassmem_store_errors_total", store="graph", operation="relations") == 1
    assert value(samples, "compassmem_store_operation_duration_seconds_count", store="graph",
                 operation="relations") == 2


# -- through the real pipeline -----------------------------------------------------------------------------------


def test_the_pipeline_reports_its_stages_and_reclustering(embedder: Any) -> None:
    metrics = MemoryMetrics(process_collectors=False)
    turns = [turn for index in range(3) for turn in stream_conversation(f"c{index}", index)]
    pipeline = MemoryPipeline(embedder, [], PipelineConfig(recluster_window=3), observer=metrics)
    summary = pipeline.ingest(turns)
    samples = samples_of(metrics)
    for stage in ("embed", "segment"):
        assert value(samples, "compassmem_stage_turns_total", stage=stage) == len(turns)
    assert value(samples, "compassmem_stage_turns_total", stage="store") == len(turns)  # closed at the end
    for stage in ("embed", "segment", "merge", "relate", "recluster", "store"):
        assert value(samples, "compassmem_stage_duration_seconds_count", stage=stage) >= 1, stage
    assert value(samples, "compassmem_segments_closed_total") == summary.segments
    assert value(samples, "compassmem_segments_merged_total") == summary.merged_segments
    assert value(samples, "compassmem_recluster_runs_total") >= 3
    assert value(samples, "compassmem_recluster_duration_seconds_count") == value(
        samples, "compassmem_recluster_runs_total")
    assert total(samples, "compassmem_relations_written_total") >= sum(summary.relations_by_type.values())
