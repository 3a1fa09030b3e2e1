"""What the Grafana dashboard shows, as a PNG: the memory-health figures over a streamed development conversation.

A LoCoMo development conversation is produced to the dev broker at ``--rate`` turns/s (above the worker's
throughput on two cores by default, so the consumer lag rises and drains) and consumed by the streaming worker
(the ``StreamingWorker`` of ``compassmem worker``, on a thread, writing the embedded stores). Every ``--interval``
seconds the worker's Prometheus registry is rendered in the text format and parsed back, exactly as a scrape of
``/metrics`` sees it. Plotted: graph average degree (alert line 1.5), event duplicate ratio (alert line 0.15),
relation-confidence means and drift, consumer lag per partition. Also written: the samples as JSON.

    .venv/bin/python -m benchmarks.dashboard_plot [--conversation conv-26] [--rate 150] [--out results/dashboard.png]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import DEFAULT_DATA, RESULTS_DIR, print_table, require_data, wait_for, write_results
from compassmem.core.config import Settings
from compassmem.embedding.embedders import make_embedder
from compassmem.write.importers import read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.monitoring.measured_stores import measure_stores
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.publish.producer import TurnProducer
from compassmem.sinks.factory import open_stores
from compassmem.streams.broker import DevBroker
from compassmem.streams.runner import InProcessWorker
from compassmem.streams.topics import ensure_topics, topic_specs

DEGREE_ALERT = 1.5
DUPLICATE_ALERT = 0.15


def scrape(metrics: MemoryMetrics) -> dict[str, float]:
    """One sample of the plotted figures, read from the text format a Prometheus scrape gets."""
    text = generate_latest(metrics.registry).decode("utf-8")
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "compassmem_graph_average_degree":
                found[f"degree_{labels['edges']}"] = sample.value
            elif sample.name == "compassmem_relation_confidence_mean":
                found[f"confidence_{labels['window']}"] = sample.value
            elif sample.name == "compassmem_consumer_lag_records":
                found[f"lag_p{labels['partition']}"] = sample.value
            elif sample.name in ("compassmem_event_duplicate_ratio", "compassmem_relation_confidence_drift",
                                 "compassmem_relation_confidence_trend", "compassmem_memory_events"):
                found[sample.name.removeprefix("compassmem_")] = sample.value
            elif sample.name == "compassmem_stage_turns_total" and labels["stage"] == "consume":
                found["consumed"] = sample.value
            elif sample.name == "compassmem_stage_duration_seconds_sum":
                found[f"stage_seconds_{labels['stage']}"] = sample.value
    return found


def render(samples: list[dict[str, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    seconds = [s["t"] for s in samples]

    def series(key: str) -> list[float]:
        return [s.get(key, float("nan")) for s in samples]

    figure, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    figure.suptitle(title)
    degree, duplicates, confidence, lag = axes
    degree.plot(seconds, series("degree_all"), label="all edges")
    degree.plot(seconds, series("degree_semantic"), label="without adjacency edges")
    degree.axhline(DEGREE_ALERT, color="red", linestyle="--", label=f"alert below {DEGREE_ALERT}")
    degree.set_ylabel("average degree")
    duplicates.plot(seconds, series("event_duplicate_ratio"), label="merged / closed segments")
    duplicates.axhline(DUPLICATE_ALERT, color="red", linestyle="--", label=f"alert above {DUPLICATE_ALERT}")
    duplicates.set_ylabel("duplicate ratio")
    confidence.plot(seconds, series("confidence_recent"), label="recent mean")
    confidence.plot(seconds, series("confidence_reference"), label="reference mean")
    confidence.plot(seconds, series("relation_confidence_drift"), label="drift (recent - reference)")
    confidence.set_ylabel("relation confidence")
    for key in sorted({k for s in samples for k in s if k.startswith("lag_p")}):
        lag.plot(seconds, series(key), label=f"partition {key.removeprefix('lag_p')}")
    lag.set_ylabel("consumer lag (records)")
    lag.set_xlabel("seconds since the first turn was produced")
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--conversation", default="conv-26", help="conversation id of the data file, or 'all'")
    parser.add_argument("--rate", type=float, default=150.0, help="turns/s produced")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "dashboard.png")
    args = parser.parse_args()
    turns = [t for t in read_turns(require_data(args.data))
             if args.conversation == "all" or t.conversation_id == args.conversation]
    if not turns:
        parser.error(f"no turns of conversation {args.conversation!r} in {args.data}")
    configure_logging("WARNING")
    samples: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="compassmem-dashboard-") as tmp, \
            DevBroker(port=0, log_path=Path(tmp) / "tansu.log") as broker:
        settings = Settings(_env_file=None, data_dir=Path(tmp), kafka_bootstrap=broker.bootstrap,
                            metrics_lag_interval_s=args.interval / 2)
        ensure_topics(broker.bootstrap, topic_specs(settings))
        embedder = make_embedder(settings)
        metrics = MemoryMetrics(conversation_labels=settings.metrics_conversation_labels)
        with open_stores(settings, dim=embedder.dim) as opened:
            worker = InProcessWorker(settings, broker.bootstrap, measure_stores(opened, metrics), embedder,
                                     metrics).start()
            try:
                wait_for(lambda: bool(worker.streaming and worker.streaming.assigned_partitions),  # type: ignore[attr-defined]
                      120, "the worker to join its group")
                produced: dict[str, Any] = {}

                def produce() -> None:
                    with TurnProducer(broker.bootstrap, settings.turns_topic) as producer:
                        produced["summary"] = producer.produce(turns, rate=args.rate)

                producer_thread = threading.Thread(target=produce, name="producer", daemon=True)
                started = time.monotonic()
                producer_thread.start()
                deadline = started + 120 + 2 * len(turns) / min(args.rate, 50.0)
                while True:
                    time.sleep(args.interval)
                    sample = {"t": round(time.monotonic() - started, 2), **scrape(metrics)}
                    samples.append(sample)
                    lag = sum(v for k, v in sample.items() if k.startswith("lag_p"))
                    if not producer_thread.is_alive() and sample.get("consumed", 0) >= len(turns) and lag == 0:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the worker had not consumed {len(turns)} turns in time")
            finally:
                worker.stop()
    title = (f"compassmem memory health: {args.conversation} ({len(turns)} turns) streamed at {args.rate:g} turns/s"
             f" through the dev broker and the worker")
    render(samples, title, args.out)
    final = samples[-1]
    print_table(["figure", "final", "min", "max"], [
        [name, final.get(key, float("nan")), min(s.get(key, float("inf")) for s in samples),
         max(s.get(key, float("-inf")) for s in samples)]
        for name, key in [("average degree (all edges)", "degree_all"),
                          ("average degree (semantic)", "degree_semantic"),
                          ("duplicate ratio", "event_duplicate_ratio"),
                          ("confidence drift", "relation_confidence_drift"),
                          ("confidence trend /1000", "relation_confidence_trend"),
                          ("events", "memory_events")]
    ] + [["consumer lag, all partitions", 0.0, 0.0,
          max(sum(v for k, v in s.items() if k.startswith("lag_p")) for s in samples)]])
    print("seconds per stage, whole run: " + ", ".join(
        f"{key.removeprefix('stage_seconds_')} {value:.2f}" for key, value in final.items()
        if key.startswith("stage_seconds_")))
    print(f"plot written to {args.out}")
    write_results(args.out.with_suffix(".json"), {
        "data": args.data.name, "conversation": args.conversation, "turns": len(turns), "rate": args.rate,
        "interval_s": args.interval, "samples": samples,
    })


if __name__ == "__main__":
    main()
