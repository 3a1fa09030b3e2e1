"""Memory health at a glance: what ``GET /v1/health/memory``, the explorer's Health panel and ``compassmem status``
show, per tenant and conversation, with the last samples of each figure (``compassmem/monitoring/memory_health.py``
computes and keeps them)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

# The figures' alert thresholds, as the Prometheus rules have them (compassmem/monitoring/prometheus/alerts.yml): at
# least 1.5 times past the range ordinary streams keep (docs/decisions/015-health-thresholds.md: LoCoMo, TIAGE).
LOW_DEGREE = 1.5
LOW_DEGREE_MIN_EVENTS = 20
HIGH_DUPLICATE_RATE = 0.15
HIGH_DUPLICATE_MIN_SEGMENTS = 50
FALLING_CONFIDENCE = -0.15
# Per 1,000 relations: the alert fires on a drift past FALLING_CONFIDENCE that is still falling this fast.
FALLING_CONFIDENCE_TREND = -0.3
GROWING_LAG = 100


class HealthTrend(BaseModel):
    """The last samples of an entity's figures, oldest first: ``at`` the time of each, ``series`` one list per
    figure with a value per sample (null where the figure had none)."""

    at: list[datetime]
    series: dict[str, list[float | None]]


class ConversationHealthReport(BaseModel):
    conversation_id: str
    last_at: datetime | None = Field(description="Its latest turn.")
    events: int = Field(description="Closed events in the graph store.")
    provisional_events: int = Field(description="An open segment being streamed (the vector store's).")
    turns: int
    topics: int
    relations: int = Field(description="Active relations.")
    semantic_relations: int = Field(description="Active relations that are not adjacency edges.")
    superseded_relations: int
    average_degree: float = Field(description="2 x active relations / events (compassmem_conversation_average_degree).")
    semantic_degree: float = Field(description="The same without adjacency edges.")
    segments: int = Field(description="Segments closed: events plus the segments merged into them.")
    merged_segments: int
    duplicate_rate: float = Field(description="Merged segments / segments (compassmem_event_duplicate_ratio).")
    confidence_mean: float | None = Field(description="Mean confidence of the semantic relations; null: none.")
    confidence_recent_mean: float | None = Field(description="Of the most recently written ones (the recent window "
                                                             "of compassmem_relation_confidence_mean).")
    confidence_drift: float | None = Field(description="Recent mean minus the mean of the ones before them; null "
                                                       "until there are relations before the recent window.")
    warnings: list[str] = Field(description="The figures past an alert rule's threshold, each as a sentence.")
    trend: HealthTrend = Field(description="events, relations, average_degree, duplicate_rate, confidence_drift.")


class TenantHealthTotals(BaseModel):
    conversations: int
    events: int = Field(description="Events, provisional ones included.")
    turns: int
    trend: HealthTrend = Field(description="conversations, events, turns.")


class WorkerHealth(BaseModel):
    """The streaming worker's figures, when this API process runs one (``compassmem dev``); a separate
    ``compassmem api`` has none of its own: they are on the workers' /metrics. They cover every tenant the worker
    serves, not only the one asked about."""

    in_process: bool = Field(description="Whether this process runs a worker that has reported.")
    note: str
    lag_records: int | None = Field(description="Turns records not processed yet, over the assigned partitions "
                                                "(compassmem_consumer_lag_records).")
    lag_partitions: dict[str, int] = Field(description="By topic/partition.")
    dead_letters: int | None = Field(description="Records dead-lettered since the worker started "
                                                 "(compassmem_dead_letters_total).")
    dead_letters_by_reason: dict[str, int] = Field(description="stage/reason -> count, those above 0.")
    relations_seen: int | None
    confidence_recent_mean: float | None
    confidence_reference_mean: float | None
    confidence_drift: float | None = Field(description="compassmem_relation_confidence_drift.")
    confidence_trend_per_1000: float | None = Field(description="compassmem_relation_confidence_trend.")
    last_batch_at: datetime | None
    warnings: list[str]
    trend: HealthTrend = Field(description="lag_records, dead_letters, confidence_drift.")


class MemoryHealth(BaseModel):
    tenant: str
    sampled_at: datetime
    sample_every_s: float = Field(description="At most one sample per figure per this many seconds is kept.")
    samples_kept: int = Field(description="How many samples of each figure this process keeps (a ring).")
    conversations_total: int
    totals: TenantHealthTotals
    conversations: list[ConversationHealthReport] = Field(description="The conversation asked for, or the most "
                                                                      "recently updated ones (limit).")
    worker: WorkerHealth
