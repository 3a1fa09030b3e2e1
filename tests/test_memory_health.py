"""Memory health at a glance: ``GET /v1/health/memory`` (figures per conversation from the stores, the worker's from
this process's metrics, the last samples of each), its bounded trend rings, and ``compassmem status``.

Memory: a synthetic chat built by ``Memory.add`` (29 events, merges among them: its ``IngestSummary`` holds the
figures the report must give), the sample conversation, and a 300-event conversation written straight into the graph
store (enough relations for a confidence drift), over the real stores, served by a real HTTP server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from synthetic_graph import LargeConversation, synthetic_turns, write_large_conversation

from compassmem.cli.main import main
from compassmem.cli.status import sparkline
from compassmem.core.config import Settings
from compassmem.core.contracts.health import HealthTrend, MemoryHealth
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.monitoring.memory_health import HealthHistory, MemoryHealthMonitor
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.processors.conversation_memory import MemoryUpdate
from compassmem.processors.relations import ADJACENCY_EVIDENCE
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.write.pipeline import IngestSummary

TENANT, LOCKED, KEY = "health", "health-locked", "health-locked.secret-of-the-health-test"
CHAT, SAMPLE_ID, BIG, GROW = "health-chat", "priya-tom", "big", "grow"
SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
SAMPLE_EVERY_S = 0.2
SAMPLES = 5


@dataclass
class Served:
    url: str
    stores: Stores
    monitor: MemoryHealthMonitor
    metrics: MemoryMetrics
    chat: IngestSummary
    big: LargeConversation
    # The served app's: its forgets reach the monitor.
    memory: Memory


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any) -> Iterator[Served]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("health-qdrant") / "qdrant", embedder.dim)
    stores = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    settings = Settings(_env_file=None, api_port=0, api_keys=[KEY])  # type: ignore[call-arg]
    try:
        sample = [Turn(tenant=TENANT, **json.loads(line)) for line in SAMPLE.read_text().splitlines() if line.strip()]
        with Memory(settings, stores=stores, embedder=embedder) as writer:
            chat = writer.add(synthetic_turns(CHAT, 25, tenant=TENANT))
            writer.add([*sample, *(t.model_copy(update={"tenant": LOCKED}) for t in sample)])
        big = write_large_conversation(stores.graph, TENANT, BIG, events=300, topics=5)
        metrics = MemoryMetrics(process_collectors=False)
        services = build_services(settings, stores, embedder, metrics)
        services.health = MemoryHealthMonitor(stores, metrics, samples=SAMPLES, sample_every_s=SAMPLE_EVERY_S)
        with BackgroundServer(create_app(services)) as server:
            yield Served(server.url, stores, services.health, metrics, chat, big, services.memory)
    finally:
        stores.close()


def _health(served: Served, tenant: str = TENANT, key: str | None = None, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(f"{served.url}/v1/health/memory", params={"tenant": tenant, **params}, headers=headers,
                     timeout=60)


def _report(served: Served, **params: Any) -> dict[str, Any]:
    response = _health(served, **params)
    assert response.status_code == 200, response.text
    return response.json()


def _graph(served: Served, conversation_id: str) -> dict[str, Any]:
    response = httpx.get(f"{served.url}/v1/conversations/{conversation_id}/graph", params={"tenant": TENANT},
                         timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_figures_are_those_of_the_memory_built(served: Served) -> None:
    report = _report(served)
    MemoryHealth.model_validate(report)
    listed = httpx.get(f"{served.url}/v1/conversations", params={"tenant": TENANT}, timeout=60).json()
    assert [c["conversation_id"] for c in report["conversations"]] == [c["conversation_id"]
                                                                       for c in listed["conversations"]]
    assert report["totals"]["events"] == sum(c["events"] for c in listed["conversations"])
    assert report["totals"]["turns"] == sum(c["turns"] for c in listed["conversations"])
    assert report["conversations_total"] == report["totals"]["conversations"] == 3
    chat = next(c for c in report["conversations"] if c["conversation_id"] == CHAT)
    summary = served.chat
    # The write path's own figures (what the worker's gauges would say for this conversation).
    assert (chat["events"], chat["segments"], chat["merged_segments"]) == (
        summary.events, summary.segments, summary.merged_segments)
    assert summary.merged_segments > 0 and chat["turns"] == summary.turns
    assert chat["duplicate_rate"] == pytest.approx(summary.duplicate_rate, abs=1e-4)
    assert chat["average_degree"] == pytest.approx(summary.average_degree, abs=1e-4)
    edges = [e for e in _graph(served, CHAT)["edges"] if not e["superseded"]]
    semantic = [e["confidence"] for e in edges if e["evidence"] not in ADJACENCY_EVIDENCE]
    assert chat["relations"] == len(edges) and chat["semantic_relations"] == len(semantic)
    assert chat["confidence_mean"] == pytest.approx(sum(semantic) / len(semantic), abs=1e-4)
    # Fewer semantic relations than the recent window (200): no drift yet.
    assert len(semantic) < 200 and chat["confidence_drift"] is None
    # The big one has a drift: the newest 200 relations against the ones before them.
    big = next(c for c in report["conversations"] if c["conversation_id"] == BIG)
    written = sorted((r for r in served.big.relations if r.evidence not in ADJACENCY_EVIDENCE),
                     key=lambda r: (r.created_at, r.relation_id), reverse=True)
    recent, before = written[:200], written[200:]
    expected = sum(r.confidence for r in recent) / 200 - sum(r.confidence for r in before) / len(before)
    assert big["confidence_drift"] == pytest.approx(expected, abs=1e-4)
    assert big["topics"] == 5 and big["events"] == 300 and big["relations"] == len(served.big.relations)
    for conversation in report["conversations"]:
        assert set(conversation["trend"]["series"]) == {"events", "relations", "average_degree", "duplicate_rate",
                                                        "confidence_drift"}
        assert conversation["trend"]["series"]["events"][-1] == conversation["events"]


def test_one_conversation_or_the_most_recent_ones(served: Served) -> None:
    one = _report(served, conversation=SAMPLE_ID)
    assert [c["conversation_id"] for c in one["conversations"]] == [SAMPLE_ID]
    assert one["conversations_total"] == 3
    newest = _report(served, limit=1)["conversations"]
    assert len(newest) == 1 and newest[0]["conversation_id"] == _report(served)["conversations"][0]["conversation_id"]


def test_bad_parameters_are_4xx_and_a_tenant_with_a_key_needs_it(served: Served) -> None:
    for params, field in [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"conversation": "a b"}, "conversation"),
                          ({"limit": "many"}, "limit")]:
        response = _health(served, **params)
        assert response.status_code == 422 and [d["field"] for d in response.json()["detail"]] == [field]
    assert _health(served, tenant="Not A Tenant").status_code == 422
    missing = _health(served, conversation="nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["detail"]
    assert _health(served, tenant=LOCKED).status_code == 401
    assert _health(served, tenant=LOCKED, key="wrong").status_code == 403
    assert _health(served, tenant=LOCKED, key=KEY).json()["conversations"][0]["conversation_id"] == SAMPLE_ID


def test_the_trend_keeps_the_last_samples_and_grows_between_looks(served: Served) -> None:
    write_large_conversation(served.stores.graph, TENANT, GROW, events=10, topics=2)
    first = _report(served, conversation=GROW)["conversations"][0]
    write_large_conversation(served.stores.graph, TENANT, GROW, events=20, topics=2)
    # No request: the background sampler reads the tenant asked about every SAMPLE_EVERY_S.
    time.sleep(SAMPLE_EVERY_S * 8)
    trend = served.monitor.history.trend(f"conversation:{TENANT}/{GROW}", ("events",))
    assert len(trend.at) == SAMPLES and trend.at == sorted(trend.at)
    later = _report(served, conversation=GROW)["conversations"][0]
    assert first["trend"]["series"]["events"] == [10.0]
    assert later["events"] == 20 and later["trend"]["series"]["events"][-1] == 20.0
    assert len(later["trend"]["at"]) == SAMPLES


def test_the_rings_are_bounded() -> None:
    history = HealthHistory(samples=4, sample_every_s=1.0, max_series=3)
    for second in range(10):
        history.record("a", {"x": float(second)}, now=float(second))
    assert history.trend("a", ("x",)).series["x"] == [6.0, 7.0, 8.0, 9.0]
    # Within sample_every_s of the last sample: its values are replaced, its time kept.
    history.record("a", {"x": 99.0}, now=9.5)
    trend = history.trend("a", ("x",))
    assert trend.series["x"] == [6.0, 7.0, 8.0, 99.0] and trend.at[-1].timestamp() == 9.0
    for key in "bcd":
        history.record(key, {"x": 1.0}, now=20.0)
    assert len(history) == 3 and history.trend("a", ("x",)).at == []


def test_memory_made_again_under_a_forgotten_id_starts_a_fresh_trend(served: Served) -> None:
    """A conversation made again after a forget had the forgotten one's samples in its trend, and a tenant made again
    after its deletion the deleted one's totals: each now starts from its first sample."""
    tenant = "health-again"

    def reading() -> tuple[HealthTrend, HealthTrend, int]:
        # Not watched: no background sample lands between the steps.
        report = served.monitor.report(tenant, conversation=CHAT, watch=False)
        return report.totals.trend, report.conversations[0].trend, report.conversations[0].events

    for forget, totals_kept in ((lambda: served.memory.forget(CHAT, tenant=tenant), 2),
                                (lambda: served.memory.delete_tenant(tenant), 1)):
        served.memory.add(synthetic_turns(CHAT, 2, tenant=tenant))
        reading()
        time.sleep(SAMPLE_EVERY_S)  # so that the next reading is a sample of its own
        forget()
        served.memory.add(synthetic_turns(CHAT, 1, tenant=tenant))
        totals, conversation, events = reading()
        assert conversation.series["events"] == [float(events)]
        assert len(totals.at) == totals_kept


@pytest.fixture(scope="module")
def worker_reported(served: Served) -> Served:
    """What a worker in the API's process reports: lag on two partitions, two dead letters, 300 relations whose
    confidence fell from 0.9 to 0.6."""
    metrics = served.metrics
    metrics.set_lag("compassmem.turns", {0: 150, 1: 3})
    metrics.dead_letters.labels("validate", "invalid_fields").inc(2)
    relations = [r.model_copy(update={"confidence": 0.9 if i < 100 else 0.6})
                 for i, r in enumerate(r for r in served.big.relations if r.evidence not in ADJACENCY_EVIDENCE)]
    metrics.memory_update(MemoryUpdate(relations=relations[:300]))
    return served


def test_the_worker_figures_are_those_of_this_processs_metrics(worker_reported: Served) -> None:
    served = worker_reported
    idle = MemoryHealthMonitor(served.stores, MemoryMetrics(process_collectors=False)).worker()
    assert not idle.in_process and idle.lag_records is None and "compassmem worker" in idle.note
    worker = _report(served)["worker"]
    assert worker["in_process"] and worker["lag_records"] == 153
    assert worker["lag_partitions"] == {"compassmem.turns/0": 150, "compassmem.turns/1": 3}
    assert worker["dead_letters"] == 2 and worker["dead_letters_by_reason"] == {"validate/invalid_fields": 2}
    assert worker["confidence_recent_mean"] == pytest.approx(0.6) and worker["confidence_drift"] == pytest.approx(-0.3)
    assert len(worker["warnings"]) == 3 and worker["trend"]["series"]["lag_records"][-1] == 153.0


def test_sparklines() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5.0, 5.0]) == "▄▄"
    assert sparkline([None, 0.0, 1.0]) == " ▁█"
    assert sparkline([]) == "" and sparkline([None]) == ""
    assert len(sparkline(list(range(40)))) == 12


def test_status_prints_each_conversations_figures_and_trends(worker_reported: Served,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    served = worker_reported
    assert main(["status", "--url", served.url, "--tenant", TENANT]) == 0
    out = capsys.readouterr().out
    print(out)
    report = _report(served)
    lines = out.splitlines()
    assert lines[0].startswith(f"memory health of tenant '{TENANT}' at ") and served.url in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("conversation "))
    for offset, conversation in enumerate(report["conversations"], start=1):
        row = lines[header + offset]
        assert row.startswith(conversation["conversation_id"])
        assert f"{conversation['events']:,}" in row and f"{conversation['relations']:,}" in row
        assert f"{conversation['average_degree']:.2f}" in row and f"{conversation['duplicate_rate']:.1%}" in row
        assert any(bar in row for bar in "▁▂▃▄▅▆▇█")
    assert f"tenant: {report['totals']['conversations']:,} conversations" in out
    assert "worker: the worker of this process" in out and "lag 153 records" in out and "dead letters 2 (validate/invalid_fields 2)" in out
    assert "warnings:" in out


def test_status_as_json_one_conversation(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", served.url, "--tenant", TENANT, "--conversation", CHAT, "--json"]) == 0
    shown = MemoryHealth.model_validate_json(capsys.readouterr().out)
    assert [c.conversation_id for c in shown.conversations] == [CHAT]
    assert shown.conversations[0].events == served.chat.events


def test_status_says_what_to_do_when_refused_or_unreachable(served: Served, capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    assert main(["status", "--url", served.url, "--tenant", LOCKED]) == 2
    assert "--api-key-file names a file holding the tenant's key, or set COMPASSMEM_API_KEY" in capsys.readouterr().err
    (tmp_path / "key").write_text(KEY + "\n")
    assert main(["status", "--url", served.url, "--tenant", LOCKED, "--api-key-file", str(tmp_path / "key")]) == 0
    assert SAMPLE_ID in capsys.readouterr().out
    assert main(["status", "--url", "http://127.0.0.1:9", "--tenant", TENANT]) == 2
    assert "is compassmem dev or compassmem api running there?" in capsys.readouterr().err
    assert main(["status", "--url", served.url, "--tenant", TENANT, "--conversation", "nobody"]) == 2
    assert "nobody" in capsys.readouterr().err
