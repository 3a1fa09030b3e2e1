"""Every Prometheus metric of compassmem, on one registry per process.

``compassmem dev`` runs the worker and the query API in one process on one ``MemoryMetrics``, so its single
``/metrics`` shows both; ``compassmem worker`` serves its own on ``metrics_port``, ``compassmem api`` on the API's
``/metrics``. Names follow Prometheus conventions: base units in the name (``_seconds``, ``_ratio``), counters end
in ``_total``, and labels take bounded values only (stages, relation types, dead-letter reason codes, store
operations, and at most ``conversation_labels`` conversations).

Memory-health gauges cover the conversations the worker owns: those of its assigned partitions, refreshed from
its table every few seconds (so after a restart or a rebalance too) and updated after every batch. Across several
workers, sum the count gauges (``compassmem_memory_*``) and divide: the alert rules do exactly that.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from pydantic import SecretStr

from compassmem.core.contracts.dead_letters import (
    DeadLetter,
    DeadLetterReason,
    DeadLetterStage,
)
from compassmem.core.contracts.query import QueryResponse
from compassmem.monitoring.confidence_drift import ConfidenceDrift, DriftConfig, DriftReading
from compassmem.processors.conversation_memory import ConversationHealth, MemoryUpdate
from compassmem.processors.relations import ADJACENCY_EVIDENCE

# Per-batch stage durations run from a millisecond (a small store flush) to tens of seconds (a cold embedding batch).
_STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Queries: the goal is p50 <= 25 ms, p99 <= 150 ms; buckets resolve both.
_QUERY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 10.0)
# Produce-to-searchable age: the alert's objective is 10 s at the 95th percentile; buckets resolve it and a backlog.
_FRESHNESS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
_HOP_BUCKETS = tuple(float(h) for h in range(11))
_CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# Every (stage, reason code) the worker can produce (streams/decoding.py, processor.py, app.py).
DEAD_LETTER_KINDS = (
    *((DeadLetterStage.DECODE, reason) for reason in (
        DeadLetterReason.EMPTY_VALUE, DeadLetterReason.NOT_UTF8, DeadLetterReason.NOT_JSON,
        DeadLetterReason.NOT_OBJECT, DeadLetterReason.UNKNOWN_CONTROL)),
    (DeadLetterStage.VALIDATE, DeadLetterReason.INVALID_FIELDS),
    (DeadLetterStage.ROUTE, DeadLetterReason.WRONG_KEY),
    (DeadLetterStage.ROUTE, DeadLetterReason.WRONG_PARTITION),
    (DeadLetterStage.ROUTE, DeadLetterReason.REDACTED_TURN),
    (DeadLetterStage.ROUTE, DeadLetterReason.DUPLICATE_TURN),
    (DeadLetterStage.PROCESS, DeadLetterReason.PROCESSING_ERROR),
    (DeadLetterStage.STORE, DeadLetterReason.STORE_REJECTED),
    (DeadLetterStage.CONTROL, DeadLetterReason.INVALID_FIELDS),
    (DeadLetterStage.CONTROL, DeadLetterReason.UNKNOWN_TURN),
    (DeadLetterStage.CONTROL, DeadLetterReason.UNKNOWN_CONVERSATION),
)


@dataclass(frozen=True)
class WorkerReading:
    """What a worker in this process has reported, as its metrics hold it (``MemoryMetrics.worker_reading``)."""

    reporting: bool  # whether a worker in this process reported anything at all
    lag: dict[str, int]  # "topic/partition" -> records not processed yet
    dead_letters: dict[str, int]  # "stage/reason" -> records dead-lettered, those above 0
    drift: DriftReading
    last_batch_at: float | None  # Unix time


class MemoryMetrics:
    """The metric objects plus the bookkeeping behind the derived gauges; implements ``PipelineObserver``."""

    def __init__(self, registry: CollectorRegistry | None = None, conversation_labels: int = 20,
                 drift: DriftConfig | None = None, process_collectors: bool = True,
                 api_keys: Mapping[str, SecretStr | str] | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if process_collectors:
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(collector)
        self._conversation_labels = conversation_labels
        self._drift = ConfidenceDrift(drift)
        self._health: dict[str, ConversationHealth] = {}
        # Conversation key -> its label value (see conversation_label).
        self._labelled: OrderedDict[str, str] = OrderedDict()
        self._protected: dict[str, bytes] = {}
        # Set by the worker's calls: a process without a worker (``compassmem api``) has none of its figures.
        self._worker_reporting = False
        r = self.registry

        # -- ingestion ---------------------------------------------------------------------------------------------
        self.stage_turns = Counter(
            "compassmem_stage_turns_total",
            "Turns through each ingestion stage: consume (records read by the worker), embed, segment (boundary "
            "detection, then merging and relations of closed segments), store (turns indexed under their event).",
            ["stage"], registry=r)
        self.stage_seconds = Histogram(
            "compassmem_stage_duration_seconds",
            "Seconds one batch spent in a stage: embed, segment (with the LLM boundary check, when on), merge, "
            "summarise (LLM summaries, when on), relate, recluster, store, publish (change feeds and dead letters), "
            "state (table writes), batch (all of it).",
            ["stage"], buckets=_STAGE_BUCKETS, registry=r)
        self.freshness_seconds = Histogram(
            "compassmem_ingest_freshness_seconds",
            "Seconds from a turn's produce time (the broker's record timestamp) to the commit of the batch that "
            "made it searchable: what a user waits for memory to know what was just said. Grows when the worker "
            "falls behind, before lag alone says why.",
            buckets=_FRESHNESS_BUCKETS, registry=r)
        self.dead_letters = Counter(
            "compassmem_dead_letters_total", "Records sent to the dead-letter topic, by stage and reason code.",
            ["stage", "reason"], registry=r)
        self.offset_gaps = Counter(
            "compassmem_offset_gaps_total",
            "Times the worker was handed a turns-partition record past an offset it had not applied, or saw a "
            "partition stop short of the broker's end: the records were held back and read again (nothing "
            "skipped). Faust drops fetched records around rebalances, so a few per restart with a backlog are "
            "expected; a steady rise is not.", ["partition"], registry=r)
        self.store_retries = Counter(
            "compassmem_store_retries_total",
            "Batches retried because a store was unavailable or refused the writes (the worker waits, it does not "
            "exit).", registry=r)
        self.last_batch = Gauge("compassmem_last_batch_timestamp_seconds",
                                 "When this worker last finished a batch (Unix time): a stalled worker stops it.",
                                 registry=r)
        self.consumer_lag = Gauge(
            "compassmem_consumer_lag_records",
            "Records of an assigned turns partition not yet processed by this worker (end offset - next offset).",
            ["topic", "partition"], registry=r)
        self.segments_closed = Counter("compassmem_segments_closed_total", "Segments closed into events.",
                                       registry=r)
        self.segments_merged = Counter("compassmem_segments_merged_total",
                                       "Closed segments merged into an existing event (near-duplicates).", registry=r)
        self.relations_written = Counter("compassmem_relations_written_total",
                                         "Relations written (new or changed), by type.", ["type"], registry=r)
        self.relation_confidence = Histogram(
            "compassmem_relation_confidence", "Confidence of written relations (adjacency edges excluded).",
            buckets=_CONFIDENCE_BUCKETS, registry=r)
        self.recluster_runs = Counter("compassmem_recluster_runs_total", "Topic reclustering runs.", registry=r)
        self.recluster_seconds = Histogram("compassmem_recluster_duration_seconds",
                                           "Seconds one reclustering run took.", buckets=_STAGE_BUCKETS, registry=r)

        # -- memory health -----------------------------------------------------------------------------------------
        self.memory_conversations = Gauge("compassmem_memory_conversations",
                                          "Conversations the health gauges cover.", registry=r)
        self.memory_events = Gauge("compassmem_memory_events", "Events in the covered conversations.", registry=r)
        self.memory_relations = Gauge(
            "compassmem_memory_relations",
            "Active relations in the covered conversations; kind=adjacency links consecutive events only.",
            ["kind"], registry=r)
        self.memory_segments = Gauge("compassmem_memory_segments", "Segments closed in the covered conversations.",
                                     registry=r)
        self.memory_merged_segments = Gauge("compassmem_memory_merged_segments",
                                            "Of those, segments merged into an earlier event.", registry=r)
        self.average_degree = Gauge(
            "compassmem_graph_average_degree",
            "2 x active relations / events over the covered conversations (edges=all) and without adjacency "
            "edges (edges=semantic). Below 1.5 means segmentation is off.", ["edges"], registry=r)
        self.conversation_degree = Gauge(
            "compassmem_conversation_average_degree",
            "Average degree of the most recently updated conversations (bounded: older ones are dropped).",
            ["conversation"], registry=r)
        self.duplicate_ratio = Gauge(
            "compassmem_event_duplicate_ratio",
            "Merged segments / closed segments over the covered conversations. Above 0.15 means merging is too "
            "loose.", registry=r)
        self.confidence_mean = Gauge(
            "compassmem_relation_confidence_mean",
            "Mean confidence of written relations: window=recent (last relations) and window=reference (slow "
            "moving mean of the ones before).", ["window"], registry=r)
        self.confidence_drift = Gauge("compassmem_relation_confidence_drift",
                                      "Recent minus reference mean relation confidence.", registry=r)
        self.confidence_trend = Gauge("compassmem_relation_confidence_trend",
                                      "Slope of the recent mean relation confidence, per 1,000 relations.",
                                      registry=r)

        # -- queries -----------------------------------------------------------------------------------------------
        self.queries = Counter("compassmem_queries_total",
                               "Queries answered, by outcome (evidence, no_memory, error).", ["outcome"], registry=r)
        self.query_seconds = Histogram("compassmem_query_duration_seconds", "Seconds to answer one query.",
                                       buckets=_QUERY_BUCKETS, registry=r)
        self.query_phase_seconds = Histogram(
            "compassmem_query_phase_duration_seconds",
            "Seconds per query phase: load, decompose, embed, search, navigate, answer.",
            ["phase"], buckets=_QUERY_BUCKETS, registry=r)
        self.query_hops = Histogram("compassmem_query_hops",
                                    "Longest relation path (hops from a seed) among a query's evidence.",
                                    buckets=_HOP_BUCKETS, registry=r)
        self.http_requests = Counter("compassmem_http_requests_total", "HTTP requests, by route and status code.",
                                     ["method", "route", "status"], registry=r)
        self.http_seconds = Histogram("compassmem_http_request_duration_seconds", "HTTP request duration.",
                                      ["method", "route"], buckets=_QUERY_BUCKETS, registry=r)

        # -- stores ------------------------------------------------------------------------------------------------
        self.store_errors = Counter("compassmem_store_errors_total", "Store calls that raised, by store and operation.",
                                    ["store", "operation"], registry=r)
        self.store_seconds = Histogram("compassmem_store_operation_duration_seconds", "Seconds per store call.",
                                       ["store", "operation"], buckets=_STORE_BUCKETS, registry=r)
        self._publish_health()
        # Series that exist from the start at 0, so that the first increment is a visible rate (alerts use increase).
        for outcome in ("evidence", "no_memory", "error"):
            self.queries.labels(outcome)
        for stage, reason in DEAD_LETTER_KINDS:
            self.dead_letters.labels(stage.value, reason.value)
        if api_keys:
            self.protect_tenants(api_keys)

    # -- label values ------------------------------------------------------------------------------------------------

    def protect_tenants(self, api_keys: Mapping[str, SecretStr | str]) -> None:
        """Tenants with an API key (``COMPASSMEM_API_KEYS``): /metrics is unauthenticated, so their conversation ids
        never become label values; series already there are relabelled."""
        self._protected = {tenant: (key.get_secret_value() if isinstance(key, SecretStr) else key).encode("utf-8")
                           for tenant, key in api_keys.items()}
        for key, label in list(self._labelled.items()):
            fresh = self.conversation_label(key)
            if fresh != label:
                self.conversation_degree.remove(label)
                self._labelled[key] = fresh
                counts = self._health.get(key)
                if counts is not None:
                    self.conversation_degree.labels(fresh).set(counts.average_degree)

    def conversation_label(self, key: str) -> str:
        """The ``conversation`` label of ``tenant/conversation_id``: the key itself for open tenants; for a tenant
        with an API key ``hidden-`` and 16 hex digits of HMAC-SHA256(tenant's key, key), stable, and telling which
        conversation it is only to whoever holds the key."""
        secret = self._protected.get(key.split("/", 1)[0])
        if secret is None:
            return key
        return "hidden-" + hmac.new(secret, key.encode("utf-8"), hashlib.sha256).hexdigest()[:16]

    # -- PipelineObserver --------------------------------------------------------------------------------------------

    def stage(self, stage: str, seconds: float, turns: int | None = None) -> None:
        self.stage_seconds.labels(stage).observe(seconds)
        if turns is not None:
            self.stage_turns.labels(stage).inc(turns)

    def memory_update(self, update: MemoryUpdate) -> None:
        self.segments_closed.inc(update.segments_closed)
        self.segments_merged.inc(len(update.merges))
        confidences = []
        for relation in update.relations:
            self.relations_written.labels(relation.type.value).inc()
            if relation.evidence not in ADJACENCY_EVIDENCE:
                confidences.append(relation.confidence)
                self.relation_confidence.observe(relation.confidence)
        for seconds in update.recluster_seconds:
            self.recluster_runs.inc()
            self.recluster_seconds.observe(seconds)
        if confidences:
            self._drift.add(confidences)
            self._publish_drift()

    # -- worker ------------------------------------------------------------------------------------------------------

    def consumed(self, records: int) -> None:
        self._worker_reporting = True
        self.stage_turns.labels("consume").inc(records)

    def turns_searchable(self, produced_at: Iterable[float], now: float) -> None:
        """``produced_at``: the broker timestamps (seconds) of the turns a committed batch made searchable."""
        for timestamp in produced_at:
            self.freshness_seconds.observe(max(0.0, now - timestamp))

    def batch_done(self, seconds: float) -> None:
        self._worker_reporting = True
        self.stage("batch", seconds)
        self.last_batch.set_to_current_time()

    def offset_gap(self, partition: int) -> None:
        self.offset_gaps.labels(str(partition)).inc()

    def store_retry(self) -> None:
        self.store_retries.inc()

    def dead_lettered(self, letters: Iterable[DeadLetter]) -> None:
        self._worker_reporting = True
        for letter in letters:
            self.dead_letters.labels(letter.stage.value, letter.reason_code).inc()

    def set_lag(self, topic: str, lags: Mapping[int, int]) -> None:
        self._worker_reporting = True
        for partition, lag in lags.items():
            self.consumer_lag.labels(topic, str(partition)).set(max(0, lag))

    def drop_lag(self, topic: str, partitions: Iterable[int]) -> None:
        """Partitions this worker no longer owns: their lag is another worker's to report."""
        for partition in partitions:
            self.consumer_lag.remove(topic, str(partition))

    def conversations_changed(self, health: Mapping[str, ConversationHealth | None]) -> None:
        """New counts for conversations a batch touched (None: forgotten)."""
        self._worker_reporting = True
        for key, counts in health.items():
            if counts is None:
                self._health.pop(key, None)
                if key in self._labelled:
                    self.conversation_degree.remove(self._labelled.pop(key))
                continue
            self._health[key] = counts
            label = self._labelled[key] = self.conversation_label(key)
            self._labelled.move_to_end(key)
            self.conversation_degree.labels(label).set(counts.average_degree)
        while len(self._labelled) > self._conversation_labels:
            _, oldest = self._labelled.popitem(last=False)
            self.conversation_degree.remove(oldest)
        self._publish_health()

    def conversations_owned(self, health: Mapping[str, ConversationHealth]) -> None:
        """Every conversation this worker owns now, read from its table: replaces what the gauges cover."""
        self._worker_reporting = True
        for key in [k for k in self._labelled if k not in health]:
            self.conversation_degree.remove(self._labelled.pop(key))
        self._health = dict(health)
        self._publish_health()

    def worker_reading(self) -> WorkerReading:
        """The worker's lag, dead letters, confidence drift and last batch as this process's metrics hold them (the
        memory-health report's worker figures)."""
        lag = {f"{s.labels['topic']}/{s.labels['partition']}": int(s.value)
               for metric in self.consumer_lag.collect() for s in metric.samples}
        letters = {f"{s.labels['stage']}/{s.labels['reason']}": int(s.value)
                   for metric in self.dead_letters.collect() for s in metric.samples
                   if s.name.endswith("_total") and s.value > 0}
        last = next((s.value for metric in self.last_batch.collect() for s in metric.samples), 0.0)
        return WorkerReading(reporting=self._worker_reporting, lag=lag, dead_letters=letters,
                             drift=self._drift.reading(), last_batch_at=last or None)

    # -- query API ---------------------------------------------------------------------------------------------------

    def query_answered(self, response: QueryResponse, seconds: float) -> None:
        self.queries.labels("evidence" if response.turn_ids else "no_memory").inc()
        self.query_seconds.observe(seconds)
        for phase, ms in response.timings_ms.items():
            if phase != "total":
                self.query_phase_seconds.labels(phase).observe(ms / 1000.0)
        self.query_hops.observe(max((len(item.path) for item in response.evidence), default=0))

    def query_failed(self) -> None:
        self.queries.labels("error").inc()

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_seconds.labels(method, route).observe(seconds)

    # -- derived gauges ----------------------------------------------------------------------------------------------

    def _publish_health(self) -> None:
        counts = self._health.values()
        events = sum(c.events for c in counts)
        relations = sum(c.relations for c in counts)
        adjacency = sum(c.adjacency_relations for c in counts)
        segments = sum(c.segments for c in counts)
        merged = sum(c.merged_segments for c in counts)
        self.memory_conversations.set(len(self._health))
        self.memory_events.set(events)
        self.memory_relations.labels("adjacency").set(adjacency)
        self.memory_relations.labels("semantic").set(relations - adjacency)
        self.memory_segments.set(segments)
        self.memory_merged_segments.set(merged)
        self.average_degree.labels("all").set(2 * relations / events if events else 0.0)
        self.average_degree.labels("semantic").set(2 * (relations - adjacency) / events if events else 0.0)
        self.duplicate_ratio.set(merged / segments if segments else 0.0)

    def _publish_drift(self) -> None:
        reading = self._drift.reading()
        if reading.recent_mean is not None:
            self.confidence_mean.labels("recent").set(reading.recent_mean)
        if reading.reference_mean is not None:
            self.confidence_mean.labels("reference").set(reading.reference_mean)
        self.confidence_drift.set(reading.drift)
        self.confidence_trend.set(reading.trend_per_1000)
