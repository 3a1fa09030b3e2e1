"""The docker-compose configuration, proved without Docker: `compassmem dev` started with the environment of the
compose file's worker (embedded stores and the dev broker instead of the other containers), scraped on /metrics
while turns flow. Every metric the dashboard and the alerts need must exist, and must move."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from compose_file import compose_environment
from conftest import stream_conversation, wait_until
from dev_process import FAST_STREAM_ENV, free_port, running_dev
from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import firing_alerts, query, running_prometheus
from prometheus_text import Samples, parse_samples, total, value

# Settings that name another container of the stack: `compassmem dev` runs those parts embedded instead.
CONTAINER_ADDRESSES = {"COMPASSMEM_KAFKA_BOOTSTRAP", "COMPASSMEM_QDRANT_URL", "COMPASSMEM_FALKORDB_URL"}

REQUIRED_FAMILIES = {
    "compassmem_graph_average_degree", "compassmem_conversation_average_degree", "compassmem_event_duplicate_ratio",
    "compassmem_relation_confidence_mean", "compassmem_relation_confidence_drift",
    "compassmem_relation_confidence_trend", "compassmem_consumer_lag_records", "compassmem_stage_turns",
    "compassmem_stage_duration_seconds", "compassmem_dead_letters", "compassmem_recluster_runs",
    "compassmem_recluster_duration_seconds", "compassmem_query_duration_seconds", "compassmem_query_hops",
    "compassmem_store_errors", "compassmem_store_operation_duration_seconds", "compassmem_memory_events",
    "compassmem_memory_relations", "compassmem_memory_segments", "compassmem_memory_merged_segments",
    "compassmem_relations_written", "compassmem_segments_closed", "compassmem_http_requests",
}


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """`compassmem dev` with the compose worker's environment, and a real Prometheus scraping it with the shipped
    config and alert rules; yields (API URL, dev broker address, Prometheus URL)."""
    compose_env = {k: v for k, v in compose_environment("worker").items() if k not in CONTAINER_ADDRESSES}
    broker_port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMPASSMEM_")},
        **compose_env,
        **FAST_STREAM_ENV,
        # Local stand-ins for the container's paths and ports; the lag probe fast enough to see a burst.
        "COMPASSMEM_DATA_DIR": str(tmp_path / "data"),
        "COMPASSMEM_API_HOST": "127.0.0.1",
        "COMPASSMEM_API_PORT": str(free_port()),
        "COMPASSMEM_DEV_BROKER_PORT": str(broker_port),
        "COMPASSMEM_METRICS_LAG_INTERVAL_S": "0.25",
    }
    with running_dev(env, tmp_path / "dev.log") as url, \
            running_prometheus({"compassmem-api": url.removeprefix("http://")}, tmp_path / "prometheus",
                               free_port()) as prometheus:
        yield url, f"127.0.0.1:{broker_port}", prometheus


def scrape(url: str) -> tuple[set[str], Samples]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {family.name for family in text_string_to_metric_families(text)}, parse_samples(text)


def test_metrics_exist_and_move_when_turns_flow(dev: tuple[str, str, str]) -> None:
    url, bootstrap, prometheus = dev
    families, before = scrape(url)
    assert REQUIRED_FAMILIES <= families, f"missing: {sorted(REQUIRED_FAMILIES - families)}"
    assert total(before, "compassmem_stage_turns_total") == 0

    # One long conversation and a few short ones, in one burst so the worker falls behind for a moment; plus two
    # records that must end up as dead letters. (Reclustering runs every 50 new events of a conversation, more than
    # these make: tests/test_monitoring.py sees it move through the pipeline.)
    long_one = stream_conversation("long", 0, sessions=30)
    short = [turn for index in range(1, 4) for turn in stream_conversation(f"short-{index}", index)]
    turns = long_one + short
    assert httpx.post(f"{url}/v1/turns", json=[t.model_dump(mode="json") for t in turns[:300]],
                      timeout=60).status_code == 202
    assert httpx.post(f"{url}/v1/turns", json=[t.model_dump(mode="json") for t in turns[300:]],
                      timeout=60).status_code == 202
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send("compassmem.turns", key=b"default/bad", value=b"{not json")
    producer.send("compassmem.turns", key=b"default/bad", value=b'{"tenant": "default"}')
    producer.flush()
    producer.close()

    max_lag = 0.0
    deadline = time.monotonic() + 180
    while True:
        _, samples = scrape(url)
        max_lag = max(max_lag, total(samples, "compassmem_consumer_lag_records"))
        if total(samples, "compassmem_stage_turns_total", stage="consume") >= len(turns) + 2 \
                and total(samples, "compassmem_dead_letters_total") >= 2 \
                and total(samples, "compassmem_consumer_lag_records") == 0 \
                and value(samples, "compassmem_memory_conversations") == 4:
            break
        assert time.monotonic() < deadline, f"the worker did not catch up: {sorted(samples.items())[:40]}"
        time.sleep(0.2)

    assert value(samples, "compassmem_stage_turns_total", stage="embed") == len(turns)
    assert value(samples, "compassmem_stage_turns_total", stage="segment") == len(turns)
    assert value(samples, "compassmem_stage_duration_seconds_count", stage="batch") >= 1
    # Every turn's produce-to-searchable age was observed once (not the dead letters'), within the run.
    assert value(samples, "compassmem_ingest_freshness_seconds_count") == len(turns)
    assert 0 < value(samples, "compassmem_ingest_freshness_seconds_sum") <= len(turns) * 180
    assert value(samples, "compassmem_dead_letters_total", stage="decode", reason="not_json") == 1
    assert value(samples, "compassmem_dead_letters_total", stage="validate", reason="invalid_fields") == 1
    assert max_lag > 0, "the lag gauge never saw the burst"
    events, segments = value(samples, "compassmem_memory_events"), value(samples, "compassmem_memory_segments")
    assert events >= 10 and segments >= events
    relations = total(samples, "compassmem_memory_relations")
    assert value(samples, "compassmem_graph_average_degree", edges="all") == pytest.approx(2 * relations / events)
    # The long conversation repeats its topics every ten sessions: some segments merge into earlier events.
    merged = value(samples, "compassmem_memory_merged_segments")
    assert value(samples, "compassmem_event_duplicate_ratio") == pytest.approx(merged / segments)
    assert value(samples, "compassmem_conversation_average_degree", conversation="default/long") > 0
    assert 0 < value(samples, "compassmem_relation_confidence_mean", window="recent") <= 1
    assert total(samples, "compassmem_relations_written_total") > 0
    assert total(samples, "compassmem_store_operation_duration_seconds_count", store="graph") > 0
    assert total(samples, "compassmem_store_errors_total") == 0

    # Idle close (1 s) turns the open segments into events: the turns are then all stored under their event.
    time.sleep(2.5)
    question = {"conversation_id": "long", "question": "What did Ann and Bob say about it?"}
    response = httpx.post(f"{url}/v1/query", json=question, timeout=30)
    assert response.status_code == 200, response.text
    _, after = scrape(url)
    assert value(after, "compassmem_stage_turns_total", stage="store") == len(turns)
    assert value(after, "compassmem_queries_total", outcome="evidence") == 1
    assert value(after, "compassmem_query_duration_seconds_count") == 1
    assert value(after, "compassmem_query_hops_count") == 1
    assert value(after, "compassmem_http_requests_total", method="POST", route="/v1/turns", status="202") == 2

    # Prometheus, with the shipped rules, scraped the same endpoint: the figures agree and the dead-letter alert
    # fires for exactly the two kinds that were sent.
    assert query(prometheus, 'up{job="compassmem-api"}')[0]["value"][1] == "1"

    def dead_letter_alerts() -> set[tuple[str, str]]:
        return {(a["labels"]["stage"], a["labels"]["reason"]) for a in firing_alerts(prometheus)
                if a["labels"]["alertname"] == "CompassmemDeadLetters"}

    wait_until(lambda: dead_letter_alerts() == {("decode", "not_json"), ("validate", "invalid_fields")}, 30,
               "the CompassmemDeadLetters alert", 0.5, lambda: str(firing_alerts(prometheus)))
    assert float(query(prometheus, "sum(compassmem_memory_events)")[0]["value"][1]) == \
        value(after, "compassmem_memory_events")
    assert not {a["labels"]["alertname"] for a in firing_alerts(prometheus)} & {
        "CompassmemLowGraphDegree", "CompassmemStoreErrors", "CompassmemTargetDown"}
