"""Memory health at a glance, without Grafana: per tenant and conversation the figures the Prometheus metrics carry
(events, relations, graph degree, duplicate rate, relation-confidence drift; the worker's lag and dead letters), with
the last samples of each kept in this process for a small trend.

The conversation figures are read from the stores (graph-store aggregates: a conversation of thousands of events is
summed, not loaded), so every API process has them, next to a worker or not; the worker figures are those of a
worker in this process (``compassmem dev``: one ``MemoryMetrics``), absent from a separate ``compassmem api``.

Bounded memory: one ring of ``samples`` samples per entity (a conversation, a tenant's totals, the worker), at most
``max_series`` entities (the least recently sampled is dropped), at most one sample per ``sample_every_s`` (a newer
reading within that time replaces the last sample's values). ``sample_background`` samples the worker and the
tenants asked about in the last ``watch_s`` (at most ``max_watched``), so that trends grow between two looks.
``forget`` drops the trends of forgotten memory (the API's ``Memory`` calls it after a forget or a tenant's
deletion), so that a conversation made again under a forgotten id starts a fresh trend.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from compassmem.core.contracts.health import (
    ConversationHealthReport,
    HealthTrend,
    MemoryHealth,
    TenantHealthTotals,
    WorkerHealth,
)
from compassmem.core.errors import NotFound
from compassmem.core.models import Event
from compassmem.monitoring.confidence_drift import DriftConfig
from compassmem.monitoring.health_warnings import conversation_warnings, worker_warnings
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.sinks.factory import Stores

log = structlog.get_logger(__name__)

SAMPLES = 60
SAMPLE_EVERY_S = 10.0
MAX_SERIES = 512
WATCH_S = 900.0
MAX_WATCHED = 16
# The recent window of the conversations' confidence drift: the worker's (compassmem_relation_confidence_mean).
RECENT_RELATIONS = DriftConfig().recent_size

CONVERSATION_SERIES = ("events", "relations", "average_degree", "duplicate_rate", "confidence_drift")
TENANT_SERIES = ("conversations", "events", "turns")
WORKER_SERIES = ("lag_records", "dead_letters", "confidence_drift")
_WORKER_KEY = "worker"

Figures = Mapping[str, float | None]


class HealthHistory:
    """The last ``samples`` samples of each entity's figures; at most ``max_series`` entities. Thread-safe."""

    def __init__(self, samples: int = SAMPLES, sample_every_s: float = SAMPLE_EVERY_S,
                 max_series: int = MAX_SERIES) -> None:
        self.samples = samples
        self.sample_every_s = sample_every_s
        self._max_series = max_series
        self._rings: OrderedDict[str, deque[tuple[float, dict[str, float | None]]]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, key: str, figures: Figures, now: float) -> None:
        """A new sample of ``key``, or, within ``sample_every_s`` of its last one, that sample's values updated (its
        time kept): the ring spans ``samples`` x ``sample_every_s`` however often it is read."""
        with self._lock:
            ring = self._rings.get(key)
            if ring is None:
                ring = self._rings[key] = deque(maxlen=self.samples)
            self._rings.move_to_end(key)
            if ring and now - ring[-1][0] < self.sample_every_s:
                ring[-1] = (ring[-1][0], dict(figures))
            else:
                ring.append((now, dict(figures)))
            while len(self._rings) > self._max_series:
                self._rings.popitem(last=False)

    def drop(self, matches: Callable[[str], bool]) -> None:
        """Forget the rings of the entities whose key ``matches``."""
        with self._lock:
            for key in [k for k in self._rings if matches(k)]:
                del self._rings[key]

    def trend(self, key: str, names: tuple[str, ...]) -> HealthTrend:
        with self._lock:
            ring = list(self._rings.get(key, ()))
        return HealthTrend(at=[datetime.fromtimestamp(t, UTC) for t, _ in ring],
                           series={name: [figures.get(name) for _, figures in ring] for name in names})

    def __len__(self) -> int:
        with self._lock:
            return len(self._rings)


def _tenant_key(tenant: str) -> str:
    return f"tenant:{tenant}"


def _conversation_key(tenant: str, conversation_id: str) -> str:
    return f"conversation:{tenant}/{conversation_id}"


@dataclass
class _Watch:
    asked_at: float
    conversation: str | None
    limit: int


class MemoryHealthMonitor:
    """Computes a tenant's memory-health report from the stores and this process's metrics, and keeps the trends."""

    def __init__(self, stores: Stores, metrics: MemoryMetrics | None, *, samples: int = SAMPLES,
                 sample_every_s: float = SAMPLE_EVERY_S, max_series: int = MAX_SERIES, watch_s: float = WATCH_S,
                 max_watched: int = MAX_WATCHED, clock: Callable[[], float] = time.time) -> None:
        self.stores = stores
        self.metrics = metrics
        self.history = HealthHistory(samples, sample_every_s, max_series)
        self._watch_s = watch_s
        self._max_watched = max_watched
        self._watched: OrderedDict[str, _Watch] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock

    @property
    def sample_every_s(self) -> float:
        return self.history.sample_every_s

    def forget(self, tenant: str, conversation_id: str | None = None) -> None:
        """Drop the trend of a forgotten conversation, or (None) every trend of a deleted tenant, which is watched no
        more: memory made again under the same id starts a fresh trend, not the deleted memory's."""
        if conversation_id is not None:
            self.history.drop(_conversation_key(tenant, conversation_id).__eq__)
            return
        conversations = _conversation_key(tenant, "")
        self.history.drop(lambda key: key == _tenant_key(tenant) or key.startswith(conversations))
        with self._lock:
            self._watched.pop(tenant, None)

    def report(self, tenant: str, *, conversation: str | None = None, limit: int = 20,
               watch: bool = True) -> MemoryHealth:
        """The tenant's totals, the figures of ``conversation`` (NotFound when it has no memory) or of the ``limit``
        most recently updated conversations, and the worker's, each with its trend; this reading is recorded."""
        now = self._clock()
        if watch:
            with self._lock:
                self._watched[tenant] = _Watch(now, conversation, limit)
                self._watched.move_to_end(tenant)
                while len(self._watched) > self._max_watched:
                    self._watched.popitem(last=False)
        stats = self.stores.graph.conversation_stats(tenant)
        opened = self.stores.open_events(tenant)
        by_conversation: dict[str, list[Event]] = {}
        for event in opened:
            by_conversation.setdefault(event.conversation_id, []).append(event)
        last_at = {s.conversation_id: s.last_at for s in stats}
        for conversation_id, events in by_conversation.items():
            ends = [e.temporal_info.end for e in events]
            known = last_at.get(conversation_id)
            last_at[conversation_id] = max([*ends, *([known] if known else [])])
        totals = {"conversations": float(len(last_at)),
                  "events": float(sum(s.events for s in stats) + len(opened)),
                  "turns": float(sum(s.turns for s in stats) + sum(len(e.observations) for e in opened))}
        self.history.record(_tenant_key(tenant), totals, now)
        if conversation is not None:
            if conversation not in last_at:
                raise NotFound(f"no memory for conversation {conversation!r} of tenant {tenant!r}")
            chosen = [conversation]
        else:
            chosen = sorted(last_at, key=lambda c: (-(last_at[c].timestamp() if last_at[c] else 0.0), c))[:limit]
        reports = [self._conversation(tenant, c, last_at[c], by_conversation.get(c, []), now) for c in chosen]
        return MemoryHealth(
            tenant=tenant, sampled_at=datetime.fromtimestamp(now, UTC), sample_every_s=self.sample_every_s,
            samples_kept=self.history.samples, conversations_total=len(last_at),
            totals=TenantHealthTotals(conversations=len(last_at), events=int(totals["events"]),
                                      turns=int(totals["turns"]),
                                      trend=self.history.trend(_tenant_key(tenant), TENANT_SERIES)),
            conversations=reports, worker=self.worker(now))

    def _conversation(self, tenant: str, conversation_id: str, last_at: datetime | None, opened: list[Event],
                      now: float) -> ConversationHealthReport:
        counts = self.stores.graph.health_counts(tenant, conversation_id, RECENT_RELATIONS)
        events = counts.events
        segments = events + counts.merged_segments
        semantic = counts.relations - counts.adjacency_relations
        mean = counts.confidence_sum / counts.scored_relations if counts.scored_relations else None
        recent = counts.recent_confidence_sum / counts.recent_scored if counts.recent_scored else None
        before = counts.scored_relations - counts.recent_scored
        drift = (recent - (counts.confidence_sum - counts.recent_confidence_sum) / before
                 if before > 0 and recent is not None else None)
        degree = 2 * counts.relations / events if events else 0.0
        duplicate_rate = counts.merged_segments / segments if segments else 0.0
        warnings = conversation_warnings(conversation_id, events=events, degree=degree, segments=segments,
                                         duplicate_rate=duplicate_rate, drift=drift)
        key = _conversation_key(tenant, conversation_id)
        self.history.record(key, {"events": float(events + len(opened)), "relations": float(counts.relations),
                                  "average_degree": round(degree, 4), "duplicate_rate": round(duplicate_rate, 4),
                                  "confidence_drift": None if drift is None else round(drift, 4)}, now)
        return ConversationHealthReport(
            conversation_id=conversation_id, last_at=last_at, events=events, provisional_events=len(opened),
            turns=counts.turns + sum(len(e.observations) for e in opened), topics=counts.topics,
            relations=counts.relations, semantic_relations=semantic, superseded_relations=counts.superseded_relations,
            average_degree=round(degree, 4), semantic_degree=round(2 * semantic / events if events else 0.0, 4),
            segments=segments, merged_segments=counts.merged_segments, duplicate_rate=round(duplicate_rate, 4),
            confidence_mean=None if mean is None else round(mean, 4),
            confidence_recent_mean=None if recent is None else round(recent, 4),
            confidence_drift=None if drift is None else round(drift, 4), warnings=warnings,
            trend=self.history.trend(key, CONVERSATION_SERIES))

    def worker(self, now: float | None = None) -> WorkerHealth:
        """The worker's figures as this process's metrics hold them; this reading is recorded."""
        now = self._clock() if now is None else now
        reading = self.metrics.worker_reading() if self.metrics is not None else None
        if reading is None or not reading.reporting:
            return WorkerHealth(
                in_process=False, note="this API process runs no worker: its lag, dead letters and confidence drift "
                                       "are on the workers' /metrics (compassmem worker serves them)",
                lag_records=None, lag_partitions={}, dead_letters=None, dead_letters_by_reason={},
                relations_seen=None, confidence_recent_mean=None, confidence_reference_mean=None,
                confidence_drift=None, confidence_trend_per_1000=None, last_batch_at=None, warnings=[],
                trend=self.history.trend(_WORKER_KEY, WORKER_SERIES))
        lag = sum(reading.lag.values())
        letters = sum(reading.dead_letters.values())
        drift = reading.drift
        has_reference = drift.reference_mean is not None
        before = [v for v in self.history.trend(_WORKER_KEY, ("lag_records",)).series["lag_records"] if v is not None]
        warnings = worker_warnings(lag=lag, lag_before=before[-1] if before else None,
                                   dead_letters=reading.dead_letters, drift=drift.drift if has_reference else None)
        self.history.record(_WORKER_KEY, {"lag_records": float(lag), "dead_letters": float(letters),
                                          "confidence_drift": round(drift.drift, 4) if has_reference else None}, now)
        return WorkerHealth(
            in_process=True, note="the worker of this process (compassmem dev), over every tenant it serves",
            lag_records=lag, lag_partitions=reading.lag, dead_letters=letters,
            dead_letters_by_reason=reading.dead_letters, relations_seen=drift.relations_seen,
            confidence_recent_mean=None if drift.recent_mean is None else round(drift.recent_mean, 4),
            confidence_reference_mean=None if drift.reference_mean is None else round(drift.reference_mean, 4),
            confidence_drift=round(drift.drift, 4) if has_reference else None,
            confidence_trend_per_1000=round(drift.trend_per_1000, 4) if has_reference else None,
            last_batch_at=datetime.fromtimestamp(reading.last_batch_at, UTC) if reading.last_batch_at else None,
            warnings=warnings, trend=self.history.trend(_WORKER_KEY, WORKER_SERIES))

    def sample_background(self) -> None:
        """One round of the background sampler: the worker, and each tenant asked about in the last ``watch_s``
        (as it was last asked); a tenant whose stores fail is skipped until the next round."""
        now = self._clock()
        self.worker(now)
        with self._lock:
            for tenant in [t for t, w in self._watched.items() if now - w.asked_at > self._watch_s]:
                del self._watched[tenant]
            watched = list(self._watched.items())
        for tenant, watch in watched:
            try:
                self.report(tenant, conversation=watch.conversation, limit=watch.limit, watch=False)
            except NotFound:
                with self._lock:
                    self._watched.pop(tenant, None)
            except Exception as error:  # noqa: BLE001 - a store down now is the next round's to retry
                log.warning("memory_health.sample_failed", tenant=tenant, error=repr(error))
